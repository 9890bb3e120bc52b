/// A ``SyncApp`` whose wire codec comes from `Codable`: no hand-written
/// `decodeAction`/`encodeAction`/`encodeState`/`decodeState`.
///
/// Actions and state go through ``JSONValueEncoder`` and ``JSONValueDecoder`` (not
/// Foundation's `JSONEncoder`). Make the action enum ``TaggedEnumCodable`` so that actions
/// travel as `{"type":"case",…}` objects that clients in other languages can write:
///
/// ```swift
/// struct Tally: CodableSyncApp {
///     struct State: Codable, Equatable, Sendable { var count = 0 }
///     enum Action: TaggedEnumCodable, Sendable {
///         case add(amount: Int)
///         case reset
///     }
///     static let name = "tally"
///     static let version = "1"
///     var initialState: State { State() }
///     func reduce(into state: inout State, action: Action) {
///         switch action {
///         case .add(let amount): state.count += amount
///         case .reset: state.count = 0
///         }
///     }
/// }
/// ```
///
/// `{"type":"add","amount":2}` is then an action on the wire, and the state's digest is the
/// digest of `{"count":2}`, exactly as if the codec were written by hand.
///
/// Every process decodes every action. To decode without the `Decoder` containers (about
/// 2.5× less work), list the action enum's cases in a ``TaggedCases`` table.
public protocol CodableSyncApp: SyncApp where State: Codable, Action: Codable {}

extension CodableSyncApp {
    /// Decodes an action with ``JSONValueDecoder``.
    ///
    /// - Parameter json: The action's JSON.
    /// - Returns: The action.
    /// - Throws: ``AppCodingError`` naming the path and what was expected.
    public func decodeAction(_ json: JSON) throws(AppCodingError) -> Action {
        try JSONValueDecoder().decode(Action.self, from: json)
    }

    /// Encodes an action with ``JSONValueEncoder``.
    ///
    /// An action that has no exact JSON form (a non-finite double, an integer beyond
    /// ±(2^53 − 1)) becomes `{"unencodable":"<why>"}`, which the hub refuses with `bad-action`
    /// and that reason: the dispatcher is told, nothing is applied.
    ///
    /// - Parameter action: The action.
    /// - Returns: Its JSON.
    public func encodeAction(_ action: Action) -> JSON {
        do {
            return try JSONValueEncoder().encode(action)
        } catch {
            return ["unencodable": .string(error.message)]
        }
    }

    /// Encodes the state with ``JSONValueEncoder``.
    ///
    /// A state that has no exact JSON form is written as `{"unencodable":"<why>"}`; keep
    /// states to finite numbers and integers within ±(2^53 − 1) (store larger ones as strings).
    ///
    /// - Parameter state: The state.
    /// - Returns: Its JSON.
    public func encodeState(_ state: State) -> JSON {
        do {
            return try JSONValueEncoder().encode(state)
        } catch {
            return ["unencodable": .string(error.message)]
        }
    }

    /// Decodes the state with ``JSONValueDecoder``.
    ///
    /// - Parameter json: The state's JSON.
    /// - Returns: The state.
    /// - Throws: ``AppCodingError`` naming the path and what was expected.
    public func decodeState(_ json: JSON) throws(AppCodingError) -> State {
        try JSONValueDecoder().decode(State.self, from: json)
    }
}

extension CodableSyncApp where Action: TaggedEnumCodable {
    /// The help: the JSON shape of each action in the ``TaggedEnumCodable/taggedCases``
    /// table (or the default line when there is no table).
    public static var commandHelp: String {
        let shapes = Action.taggedCases.shapes
        guard !shapes.isEmpty else { return #"  {"type":…}                   any action of this app, as a JSON object"# }
        return shapes.map { "  " + $0 }.joined(separator: "\n")
    }

    /// Decodes an action through its ``TaggedEnumCodable/taggedCases`` table when that lists
    /// the action's `"type"`, else through its synthesized `Codable` conformance.
    ///
    /// - Parameter json: The action's JSON.
    /// - Returns: The action.
    /// - Throws: ``AppCodingError`` naming the path and what was expected.
    @inlinable public func decodeAction(_ json: JSON) throws(AppCodingError) -> Action {
        do {
            if let action = try Action.taggedCases.decode(json, path: LazyPath([])) { return action }
        } catch {
            throw AppCodingError(codingMessage(error, tag: json["type"]?.stringValue))
        }
        return try decodeThroughCodable(Action.self, from: json)
    }

    /// Decodes an action straight from its canonical bytes through its
    /// ``TaggedEnumCodable/taggedCases`` table, without a `JSON` tree for the action (what
    /// every replica does for every action it applies, and the hub for every dispatch).
    ///
    /// `nil` (decode the parsed JSON instead, which words any error) when the table does not
    /// list the `"type"`, its entry is not checked yet in this process, or the bytes are not a
    /// simple canonical object; otherwise exactly what this extension's ``decodeAction(_:)``
    /// returns for them. An app that writes its own `decodeAction(_:)` (to validate or migrate
    /// actions) must also write this method, returning `nil` to keep every action on its own
    /// decoder: this one reads the table and would go around it.
    ///
    /// - Parameters:
    ///   - bytes: The action's canonical JSON.
    ///   - maxDepth: The deepest nesting accepted.
    /// - Returns: The action, or `nil`.
    @inlinable public func decodeAction(canonical bytes: UnsafeRawBufferPointer, maxDepth: Int) -> Action? {
        Action.taggedCases.decode(canonical: bytes, maxDepth: maxDepth)
    }
}

extension CodableSyncApp where Action: TaggedEnumCodable {
    /// A short digest of the app's wire shapes: each action case and its members (from
    /// ``TaggedEnumCodable/taggedCases``) and the structure of `state` encoded (member names
    /// and JSON types, not values). Put it in ``SyncApp/version`` so that a change of those
    /// forms changes the fingerprint by itself:
    ///
    /// ```swift
    /// static var version: String { "3." + shapeDigest(of: State()) }
    /// ```
    ///
    /// It cannot see a change of behaviour (a reducer that adds 2 where it added 1): bump the
    /// version's first part for those; replicas find such a divergence within about a second
    /// anyway (docs/DEBUGGING.md).
    ///
    /// - Parameter state: A state whose encoding shows every member (usually the initial one).
    /// - Returns: 8 lowercase hex digits.
    public static func shapeDigest(of state: State) -> String {
        let encoded = (try? JSONValueEncoder().encode(state)) ?? .null
        let shape: JSON = ["actions": .array(Action.taggedCases.shapes.map { .string($0) }), "state": Self.shape(of: encoded)]
        return String(Digest.of(shape).prefix(8))
    }

    /// The structure of a JSON value: objects keep their member names, arrays the shape of
    /// their first element, scalars become their type's name.
    private static func shape(of value: JSON) -> JSON {
        switch value {
        case .object(let members): .object(members.mapValues { shape(of: $0) })
        case .array(let items): .array(items.first.map { [shape(of: $0)] } ?? [])
        case .string: "string"
        case .number: "number"
        case .bool: "bool"
        case .null: "null"
        }
    }
}
