import SyncCore

/// Any JSON document, initially `{}`, edited through RFC 6901 JSON Pointers.
///
/// Actions (see ``JSONEdit`` for the exact semantics):
/// `{"type":"set","path":P,"value":V}`, `{"type":"remove","path":P}`,
/// `{"type":"merge","path":P,"value":O}` (RFC 7386), `{"type":"increment","path":P,"by":N}`
/// and `{"type":"append","path":P,"value":V}`. A refused edit leaves the document unchanged.
public struct JSONApp: SyncApp {
    /// The document.
    public typealias State = JSON
    /// One edit.
    public typealias Action = JSONEdit
    /// Why an edit was refused.
    public typealias Failure = JSONEditError

    /// Creates the app.
    public init() {}

    /// `json`.
    public static let name = "json"
    /// The reducer and codec version.
    public static let version = "1"
    /// One line for `--list-apps`.
    public static let summary = "any JSON document, edited by set/remove/merge/increment/append at JSON Pointers"
    /// The shorthand.
    public static let commandHelp = """
        set PATH VALUE               set the value at PATH ("" is the root; "-" appends to an array)
        remove PATH                  remove the value at PATH (must exist)
        merge PATH OBJECT            RFC 7386 merge patch at PATH
        increment PATH [N]           add N (default 1); a missing PATH starts from 0
        append PATH VALUE            append to the array at PATH (missing PATH becomes [VALUE])
        {"type":…}                   any wire action as JSON
        VALUE is JSON when it parses as JSON, else the text as a string: set /name Ada
        """

    /// `{}`.
    public var initialState: JSON { .object([:]) }

    /// Applies one edit atomically.
    ///
    /// - Parameters:
    ///   - state: The document; unchanged when this throws.
    ///   - action: The edit.
    /// - Throws: ``JSONEditError`` when the edit cannot apply.
    public func reduce(into state: inout JSON, action: JSONEdit) throws(JSONEditError) {
        try action.apply(to: &state)
    }

    /// Decodes a wire action.
    ///
    /// - Parameter json: The action JSON.
    /// - Returns: The edit.
    /// - Throws: ``AppCodingError`` when it is not a valid edit.
    public func decodeAction(_ json: JSON) throws(AppCodingError) -> JSONEdit {
        do {
            return try JSONEdit(action: json)
        } catch {
            throw AppCodingError(error.message)
        }
    }

    /// Decodes the common edits straight from their canonical bytes
    /// (``JSONEdit/init(canonical:maxDepth:)``); anything else takes ``decodeAction(_:)``.
    ///
    /// - Parameters:
    ///   - bytes: The action's canonical JSON.
    ///   - maxDepth: The nesting the action may have.
    /// - Returns: The edit, or `nil` for the general path.
    @inlinable public func decodeAction(canonical bytes: UnsafeRawBufferPointer, maxDepth: Int) -> JSONEdit? {
        JSONEdit(canonical: bytes, maxDepth: maxDepth)
    }

    /// Writes an edit's canonical wire form directly (``JSONEdit/canonicalBytes``).
    ///
    /// - Parameter action: The edit.
    /// - Returns: Its canonical bytes.
    @inlinable public func encodeAction(canonical action: JSONEdit) -> [UInt8]? { action.canonicalBytes }

    /// Encodes an edit.
    ///
    /// - Parameter action: The edit.
    /// - Returns: Its wire JSON.
    public func encodeAction(_ action: JSONEdit) -> JSON { action.action }

    /// The document itself.
    ///
    /// - Parameter state: The document.
    /// - Returns: `state`.
    public func encodeState(_ state: JSON) -> JSON { state }

    /// The document itself.
    ///
    /// - Parameter json: The document.
    /// - Returns: `json`.
    public func decodeState(_ json: JSON) throws(AppCodingError) -> JSON { json }

    /// The refusal's message.
    ///
    /// - Parameter failure: The error.
    /// - Returns: Its message, e.g. `increment /a: target is a string, not a number`.
    public func describe(_ failure: JSONEditError) -> String { failure.message }

    /// Parses the json shorthand (see ``commandHelp``) or a JSON action.
    ///
    /// - Parameter line: The typed line.
    /// - Returns: The command.
    /// - Throws: ``AppCodingError`` for an unknown command or a missing argument.
    public func command(_ line: String) throws(AppCodingError) -> AppCommand<JSON, JSONEdit> {
        let (word, rest) = AppCommandParsing.splitWord(line[...])
        let (path, valueText) = AppCommandParsing.splitWord(rest)
        let pathString = path == "\"\"" ? "" : String(path)
        switch word {
        case "set", "merge", "append":
            guard !path.isEmpty, !valueText.isEmpty else { throw AppCodingError("usage: \(word) PATH VALUE") }
            return .action(["type": .string(String(word)), "path": .string(pathString),
                            "value": AppCommandParsing.looseValue(valueText)])
        case "remove":
            guard !path.isEmpty else { throw AppCodingError("usage: remove PATH") }
            return .action(["type": "remove", "path": .string(pathString)])
        case "increment":
            guard !path.isEmpty else { throw AppCodingError("usage: increment PATH [N]") }
            var by: JSON = 1
            if !valueText.isEmpty {
                guard let number = try? JSON(parsing: String(valueText)), number.numberValue != nil else {
                    throw AppCodingError("usage: increment PATH [N], N a number")
                }
                by = number
            }
            return .action(["type": "increment", "path": .string(pathString), "by": by])
        default:
            return .action(try AppCommandParsing.jsonObject(line))
        }
    }
}
