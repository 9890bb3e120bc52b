@_exported import StoreCore
@_exported import SyncProtocol

/// A reducer that can cross process boundaries: a name, a version, and a JSON codec.
///
/// The hub and every replica run the same `SyncApp`. The hub decodes each dispatched
/// action with ``decodeAction(_:)``, validates it by applying the reducer, and sends
/// ``encodeAction(_:)``'s JSON to every replica, which decodes and applies it. States
/// travel as ``encodeState(_:)`` JSON (in `welcome`) and are compared by the digest of
/// that JSON's canonical bytes, so the encoding must be a pure function of the state:
/// equal states, equal JSON.
///
/// Conform your own reducer and pass it to `Hub` and `Replica`:
///
///     extension Counter: SyncApp {
///         static let name = "counter"
///         static let version = "1"
///         …
///     }
public protocol SyncApp: Reducer where State: Sendable, Action: Sendable {
    /// The app's name, as it appears in `hello.app` and `status.app` (e.g. `"counter"`).
    static var name: String { get }
    /// The reducer's version. Change it whenever the reducer's behaviour or the JSON
    /// forms change: hub and replicas with different fingerprints refuse each other.
    static var version: String { get }
    /// One line describing the app, for `hubd --list-apps`. Defaults to "the NAME app".
    static var summary: String { get }
    /// The shorthand commands `replica-cli` accepts for this app, one per line. Defaults to
    /// a line saying that actions are typed as JSON.
    static var commandHelp: String { get }

    /// The state a fresh hub starts from.
    var initialState: State { get }

    /// Decodes a wire action.
    ///
    /// - Parameter json: The `action` member of a `dispatch` or `action` message.
    /// - Returns: The action.
    /// - Throws: ``AppCodingError`` when the JSON is not an action of this app.
    func decodeAction(_ json: JSON) throws(AppCodingError) -> Action

    /// Decodes an action straight from its canonical bytes, without a `JSON` tree, when it can:
    /// the per-action fast path of the hub and of replicas. `nil` means "not here": the caller
    /// parses the bytes and calls ``decodeAction(_:)``. An action it returns must be exactly the
    /// one ``decodeAction(_:)`` returns for those bytes, and it must return `nil` for anything
    /// ``decodeAction(_:)`` refuses. The default answers `nil` always; an app whose actions are
    /// small and regular implements it (the json app does), and a ``CodableSyncApp`` whose
    /// action enum lists its cases in a ``TaggedCases`` table gets it from the table. An app
    /// that writes its own ``decodeAction(_:)`` (to validate or migrate) over such a default
    /// must write this one too, even if only to return `nil`, or the fast path goes around it.
    ///
    /// - Parameters:
    ///   - bytes: The action's canonical JSON, exactly one value.
    ///   - maxDepth: The nesting the action may have (the action itself counting 1).
    /// - Returns: The action, or `nil` to take the general path.
    func decodeAction(canonical bytes: UnsafeRawBufferPointer, maxDepth: Int) -> Action?

    /// Encodes an action straight to the canonical bytes of its wire form, when it can: the
    /// per-dispatch fast path of replicas. The bytes must equal
    /// `encodeAction(action).canonicalBytes`; `nil` means "use ``encodeAction(_:)``". The
    /// default answers `nil` always (the json app implements it).
    ///
    /// - Parameter action: The action.
    /// - Returns: Its canonical bytes, or `nil`.
    func encodeAction(canonical action: Action) -> [UInt8]?

    /// Encodes an action for the wire; ``decodeAction(_:)`` must invert it.
    ///
    /// - Parameter action: The action.
    /// - Returns: Its JSON form, an object with a string member `"type"`.
    func encodeAction(_ action: Action) -> JSON

    /// Encodes a state; equal states must give equal JSON.
    ///
    /// - Parameter state: The state.
    /// - Returns: Its JSON form.
    func encodeState(_ state: State) -> JSON

    /// Decodes a state sent by the hub in `welcome`.
    ///
    /// - Parameter json: The JSON form.
    /// - Returns: The state.
    /// - Throws: ``AppCodingError`` when the JSON is not a state of this app.
    func decodeState(_ json: JSON) throws(AppCodingError) -> State

    /// A message for a refused action, sent to the dispatcher in `reject.error.message`.
    ///
    /// - Parameter failure: What the reducer threw.
    /// - Returns: One sentence saying what was wrong.
    func describe(_ failure: Failure) -> String

    /// Parses one line a person typed into `replica-cli` (JSON or the app's shorthand).
    ///
    /// The requirement is declared with plain `throws`, so that an implementation written with
    /// `throws`, `throws(AppCodingError)` or no `throws` at all is the one called (a near miss
    /// cannot compile as an unrelated overload beside the default). Throw ``AppCodingError``
    /// to give the user a message; any other error is shown with `String(describing:)`.
    ///
    /// - Parameter line: The line, without its newline.
    /// - Returns: A wire action, or local work (a thunk) to run in the typing replica.
    /// - Throws: ``AppCodingError`` saying what was expected.
    func command(_ line: String) throws -> AppCommand<State, Action>

    /// What an interactive client says when a local command (a thunk) sent nothing, e.g.
    /// `limit reached: nothing sent` for the counter's `step` at its limit.
    ///
    /// - Parameters:
    ///   - line: The command typed.
    ///   - state: The replica's state the command looked at.
    /// - Returns: One line.
    func nothingSent(by line: String, state: State) -> String

    /// Every version of the app this binary carries, oldest first, ending with this one, and
    /// how a state moves along them. An app that replaces an earlier version conforms to
    /// ``UpgradingApp`` and gets its chain from there; any other app's chain is itself alone.
    var versions: AppVersionChain { get }
}

/// What a typed command asks for.
public enum AppCommand<State: Sendable, Action: Sendable>: Sendable {
    /// An action to send to the hub, in wire JSON.
    case action(JSON)
    /// Work that runs in the local replica only (a thunk); the plain actions it
    /// dispatches go to the hub.
    case local(Thunk<State, Action>)
}

/// A JSON value that is not a valid action or state of an app.
public struct AppCodingError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What was wrong, e.g. `action "type" "jump" is not one of increment, decrement`.
    public let message: String

    /// Creates an error.
    ///
    /// - Parameter message: What was wrong and, where possible, what is expected.
    public init(_ message: String) { self.message = message }

    /// The message.
    public var description: String { message }

    /// What to show for an error a command parser threw: an ``AppCodingError``'s message,
    /// any other error as `String(describing:)`.
    ///
    /// - Parameter error: The error.
    /// - Returns: One line for the user.
    public static func message(of error: any Error) -> String {
        (error as? AppCodingError)?.message ?? String(describing: error)
    }
}

extension SyncApp {
    /// No fast path: every action is parsed and decoded by ``decodeAction(_:)``.
    @inlinable public func decodeAction(canonical bytes: UnsafeRawBufferPointer, maxDepth: Int) -> Action? { nil }

    /// No fast path: every action is encoded by ``encodeAction(_:)``.
    @inlinable public func encodeAction(canonical action: Action) -> [UInt8]? { nil }

    /// The app's fingerprint, `name@version`: hub and replica must agree on it exactly.
    public static var fingerprint: String { "\(name)@\(version)" }

    /// The chain of an app that replaces no earlier version: itself alone.
    public var versions: AppVersionChain { AppVersionChain(self) }

    /// The default summary: `the NAME app`.
    public static var summary: String { "the \(name) app" }

    /// The default help: actions are typed as JSON objects with a string `"type"`.
    public static var commandHelp: String {
        #"  {"type":…}                   any action of this app, as a JSON object"#
    }

    /// The default message for a refusal: the failure's description.
    ///
    /// - Parameter failure: What the reducer threw.
    /// - Returns: `String(describing: failure)`.
    public func describe(_ failure: Failure) -> String { String(describing: failure) }

    /// The default command parser: the line must be a JSON action.
    ///
    /// - Parameter line: The line.
    /// - Returns: `.action` of the parsed JSON.
    /// - Throws: ``AppCodingError`` when the line is not a JSON object.
    public func command(_ line: String) throws(AppCodingError) -> AppCommand<State, Action> {
        .action(try AppCommandParsing.jsonObject(line))
    }

    /// `nothing sent: COMMAND found nothing to do in this replica's state`.
    ///
    /// - Parameters:
    ///   - line: The command typed.
    ///   - state: The replica's state.
    /// - Returns: One line.
    public func nothingSent(by line: String, state: State) -> String {
        "nothing sent: \(ControlCharacters.escaped(line)) found nothing to do in this replica's state"
    }

    /// The canonical JSON of a state's encoding.
    ///
    /// - Parameter state: The state.
    /// - Returns: Its RFC 8785 canonical bytes.
    public func canonicalBytes(of state: State) -> [UInt8] { encodeState(state).canonicalBytes }

    /// The digest of a state: FNV-1a 64 of its canonical JSON, as 16 hex digits.
    ///
    /// - Parameter state: The state.
    /// - Returns: The digest every process with an equal state prints.
    public func digest(of state: State) -> String { Digest.of(encodeState(state)) }
}

/// Helpers for writing ``SyncApp/command(_:)`` shorthands.
public enum AppCommandParsing {
    /// Parses a whole line as a JSON object that has a string `"type"`.
    ///
    /// - Parameter line: The text.
    /// - Returns: The object.
    /// - Throws: ``AppCodingError`` when it is not such an object.
    public static func jsonObject(_ line: String) throws(AppCodingError) -> JSON {
        let value: JSON
        do {
            value = try JSON(parsing: line)
        } catch {
            // A line that does not even start like an object is a mistyped command, not bad JSON.
            guard line.drop(while: { $0 == " " || $0 == "\t" }).first == "{" else {
                let word = splitWord(line[...]).word
                throw AppCodingError("unknown command \"\(word)\"; give a shorthand command (:help lists them) or an action as a JSON object, {\"type\":…}")
            }
            throw AppCodingError("not a valid JSON action: \(error.description)")
        }
        guard case .object(let members) = value, members["type"]?.stringValue != nil else {
            throw AppCodingError("an action is a JSON object with a string \"type\", e.g. {\"type\":\"increment\"}")
        }
        return value
    }

    /// Splits a line into the first word and the rest (trimmed of spaces).
    ///
    /// - Parameter line: The text.
    /// - Returns: The first word and the remainder, which may be empty.
    public static func splitWord(_ line: Substring) -> (word: Substring, rest: Substring) {
        let trimmed = line.drop(while: { $0 == " " || $0 == "\t" })
        guard let end = trimmed.firstIndex(where: { $0 == " " || $0 == "\t" }) else { return (trimmed, "") }
        let rest = trimmed[end...].drop(while: { $0 == " " || $0 == "\t" })
        var restEnd = rest.endIndex
        while restEnd > rest.startIndex, let last = rest[..<restEnd].last, last == " " || last == "\t" {
            restEnd = rest.index(before: restEnd)
        }
        return (trimmed[..<end], rest[..<restEnd])
    }

    /// Reads a value typed after a command: JSON if it parses, else the text as a string.
    ///
    /// - Parameter text: The text.
    /// - Returns: The value (`set /name Ada` sets the string "Ada"; `set /n 5` the number 5).
    public static func looseValue(_ text: Substring) -> JSON {
        if let value = try? JSON(parsing: String(text)) { return value }
        return .string(String(text))
    }

    /// A member of an action object, required to be a string.
    ///
    /// - Parameters:
    ///   - json: The action.
    ///   - key: The member name.
    /// - Returns: The string.
    /// - Throws: ``AppCodingError`` naming the member when it is missing or not a string.
    public static func string(_ json: JSON, _ key: String) throws(AppCodingError) -> String {
        guard let value = json[key] else { throw AppCodingError("action \"\(json["type"]?.stringValue ?? "?")\" needs a string member \"\(key)\"") }
        guard let string = value.stringValue else {
            throw AppCodingError("action member \"\(key)\" must be a string, not \(value.kindName)")
        }
        return string
    }

    /// A member of an action object, required to be a Boolean.
    ///
    /// - Parameters:
    ///   - json: The action.
    ///   - key: The member name.
    /// - Returns: The Boolean.
    /// - Throws: ``AppCodingError`` naming the member when it is missing or not a Boolean.
    public static func bool(_ json: JSON, _ key: String) throws(AppCodingError) -> Bool {
        guard let value = json[key] else { throw AppCodingError("action \"\(json["type"]?.stringValue ?? "?")\" needs a boolean member \"\(key)\"") }
        guard let bool = value.boolValue else {
            throw AppCodingError("action member \"\(key)\" must be a boolean, not \(value.kindName)")
        }
        return bool
    }

    /// The action's `"type"`.
    ///
    /// - Parameter json: The action.
    /// - Returns: The type string.
    /// - Throws: ``AppCodingError`` when the value is not an object with a string `"type"`.
    public static func type(_ json: JSON) throws(AppCodingError) -> String {
        guard case .object(let members) = json else {
            throw AppCodingError("an action must be a JSON object, not \(json.kindName)")
        }
        guard let type = members["type"]?.stringValue else {
            throw AppCodingError("an action needs a string member \"type\"")
        }
        return type
    }
}
