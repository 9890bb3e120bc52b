/// Encodes `Encodable` values into a ``JSON`` value: the wire codec of a Codable app.
///
/// Not Foundation's `JSONEncoder`: no bytes, no number formatting of its own (the canonical
/// writer does that), and numbers follow the wire's rules: integers within ±(2^53 − 1) and
/// finite doubles only, so a value never changes on its way through JSON. Enums that adopt
/// ``TaggedEnumCodable`` travel as `{"type":"case",…}` objects that other languages can speak.
public struct JSONValueEncoder: Sendable {
    /// Creates an encoder.
    public init() {}

    /// Encodes a value.
    ///
    /// - Parameter value: The value.
    /// - Returns: Its JSON.
    /// - Throws: ``AppCodingError`` naming the coding path, for an integer beyond ±(2^53 − 1),
    ///   a non-finite double, a tagged case with a member named `type`, or a value that encodes nothing.
    public func encode<T: Encodable>(_ value: T) throws(AppCodingError) -> JSON {
        do {
            let box = EncodedBox()
            try encodeValue(value, into: box, path: [])
            return try box.materialize(path: [])
        } catch let error as AppCodingError {
            throw error
        } catch {
            throw AppCodingError(String(describing: error))
        }
    }
}

/// Decodes `Decodable` values from a ``JSON`` value; the counterpart of ``JSONValueEncoder``.
public struct JSONValueDecoder: Sendable {
    /// Creates a decoder.
    public init() {}

    /// Decodes a value.
    ///
    /// - Parameters:
    ///   - type: The type.
    ///   - json: The JSON.
    /// - Returns: The value.
    /// - Throws: ``AppCodingError`` naming the coding path and what was expected.
    public func decode<T: Decodable>(_ type: T.Type, from json: JSON) throws(AppCodingError) -> T {
        do {
            return try decodeValue(type, from: json, path: LazyPath([]))
        } catch {
            throw AppCodingError(codingMessage(error))
        }
    }
}

/// An enum whose cases travel as JSON objects tagged with a `"type"` member:
/// `case setLimitText(String)` ↔ `{"type":"setLimitText","text":"5"}`.
///
/// Adopt it on an enum with synthesized `Codable`. Labeled associated values keep their
/// labels as member names; unlabeled ones are `_0`, `_1`, … unless ``memberNames`` names them.
/// A case without associated values is `{"type":"case"}`. No member may be called `type`.
///
/// Decoding goes through the synthesized `init(from:)`. To make it several times faster, list
/// the cases with their constructors in ``taggedCases`` (see ``TaggedCases``).
public protocol TaggedEnumCodable: Codable, Sendable {
    /// Member names for unlabeled associated values, by case: `["setLimitText": ["text"]]`
    /// names `_0` of `setLimitText` `text` on the wire. Default: the names ``taggedCases``
    /// gives, else none.
    static var memberNames: [String: [String]] { get }

    /// The cases with their constructors, so that decoding skips the `Decoder` containers.
    /// Default: ``TaggedCases/none`` (every case decodes through `Codable`).
    static var taggedCases: TaggedCases<Self> { get }
}

extension TaggedEnumCodable {
    /// The member names ``taggedCases`` gives (none by default): labels, or `_0`, `_1`, ….
    public static var memberNames: [String: [String]] { taggedCases.memberNames }

    /// No table: every case decodes through `Codable`.
    public static var taggedCases: TaggedCases<Self> { .none }
}

// MARK: - Tagged enums

/// `{"case":{members}}` (synthesized) → `{"type":"case", members}` (the wire).
private func flattenTagged(_ json: JSON, names: [String: [String]], path: [any CodingKey]) throws(AppCodingError) -> JSON {
    guard case .object(let outer) = json, outer.count == 1, let (caseKey, payload) = outer.first else {
        throw AppCodingError("\(describe(path)): a TaggedEnumCodable value must be an enum with synthesized Codable (one case key), got \(json.canonicalString)")
    }
    var members: [JSONKey: JSON] = ["type": .string(caseKey.string)]
    guard case .object(let fields) = payload else {
        throw AppCodingError("\(describe(path)): case \(caseKey.string) did not encode as an object")
    }
    let renames = names[caseKey.string] ?? []
    for (key, value) in fields {
        var name = key.string
        if name.hasPrefix("_"), let index = Int(name.dropFirst()), index < renames.count { name = renames[index] }
        guard JSONKey(name) != "type" else {
            throw AppCodingError("\(describe(path)): case \(caseKey.string) has a member named \"type\", which the tag uses; rename it")
        }
        guard members.updateValue(value, forKey: JSONKey(name)) == nil else {
            throw AppCodingError("\(describe(path)): case \(caseKey.string) has two members named \"\(name)\" (check its memberNames); give each a name of its own")
        }
    }
    return .object(members)
}

// MARK: - Unordered collections

/// A collection whose iteration order depends on hashing (and so on the process).
private protocol UnorderedEncodable {
    /// The elements' JSON, sorted by their canonical bytes.
    func encodeSorted(path: [any CodingKey]) throws -> JSON
}

extension Set: UnorderedEncodable where Element: Encodable {
    func encodeSorted(path: [any CodingKey]) throws -> JSON {
        var elements: [JSON] = []
        elements.reserveCapacity(count)
        for (index, element) in enumerated() {
            let box = EncodedBox()
            try encodeValue(element, into: box, path: path + [AnyKey(index)])
            elements.append(try box.materialize(path: path))
        }
        return .array(elements.map { ($0.canonicalBytes, $0) }.sorted { $0.0.lexicographicallyPrecedes($1.0) }.map(\.1))
    }
}

extension Dictionary: UnorderedEncodable where Key: Encodable, Value: Encodable {
    func encodeSorted(path: [any CodingKey]) throws -> JSON {
        // String and Int keys are written as an object (whose members the canonical form
        // sorts); other keys as [key, value, key, value, …], here sorted by key.
        let inner = EncodedBox()
        try encode(to: ValueEncoder(box: inner, codingPath: path))
        let json = try inner.materialize(path: path)
        guard case .array(let flat) = json, flat.count % 2 == 0 else { return json }
        var pairs: [([UInt8], JSON, JSON)] = []
        for index in stride(from: 0, to: flat.count, by: 2) {
            pairs.append((flat[index].canonicalBytes, flat[index], flat[index + 1]))
        }
        pairs.sort { $0.0.lexicographicallyPrecedes($1.0) }
        return .array(pairs.flatMap { [$0.1, $0.2] })
    }
}

// MARK: - Encoding

/// A node of the value being built; containers hold references so nested containers can
/// be filled after they are handed out, as `Encoder` requires.
private final class EncodedBox {
    enum Kind {
        case unset
        case value(JSON)
        case object([JSONKey: EncodedBox])
        case array([EncodedBox])
    }
    var kind: Kind = .unset

    func materialize(path: [any CodingKey]) throws(AppCodingError) -> JSON {
        switch kind {
        case .unset:
            throw AppCodingError("\(describe(path)): the value encoded nothing")
        case .value(let json):
            return json
        case .object(let members):
            var result: [JSONKey: JSON] = [:]
            for (key, box) in members {
                result[key] = try box.materialize(path: path + [AnyKey(key.string)])
            }
            return .object(result)
        case .array(let elements):
            var result: [JSON] = []
            result.reserveCapacity(elements.count)
            for (index, box) in elements.enumerated() {
                result.append(try box.materialize(path: path + [AnyKey(index)]))
            }
            return .array(result)
        }
    }

    func set(_ key: JSONKey, _ child: EncodedBox) {
        if case .object(var members) = kind {
            kind = .unset
            members[key] = child
            kind = .object(members)
        } else {
            kind = .object([key: child])
        }
    }

    func append(_ child: EncodedBox) {
        if case .array(var elements) = kind {
            kind = .unset
            elements.append(child)
            kind = .array(elements)
        } else {
            kind = .array([child])
        }
    }
}

/// The largest integer every JSON implementation reads back exactly.
private let maxExactInteger = 9_007_199_254_740_991

private func encodeValue<T: Encodable>(_ value: T, into box: EncodedBox, path: [any CodingKey]) throws {
    // By the static type, as `decodeValue`: metatype comparisons are pointer compares, where
    // `case let v as Bool` would be a dynamic cast each (the largest cost of encoding an
    // action). An Optional is not unwrapped here; its own `encode(to:)` writes the wrapped
    // value, or `null`, through the same function.
    // Each `unsafeBitCast` below follows the check that `T` is exactly that type.
    switch ObjectIdentifier(T.self) {
    case ObjectIdentifier(Bool.self): box.kind = .value(.bool(unsafeBitCast(value, to: Bool.self)))
    case ObjectIdentifier(String.self): box.kind = .value(.string(unsafeBitCast(value, to: String.self)))
    case ObjectIdentifier(Double.self): box.kind = .value(try number(unsafeBitCast(value, to: Double.self), path))
    case ObjectIdentifier(Float.self): box.kind = .value(try number(Double(unsafeBitCast(value, to: Float.self)), path))
    case ObjectIdentifier(Int.self): box.kind = .value(try integer(unsafeBitCast(value, to: Int.self), path))
    case ObjectIdentifier(Int8.self): box.kind = .value(try integer(Int(unsafeBitCast(value, to: Int8.self)), path))
    case ObjectIdentifier(Int16.self): box.kind = .value(try integer(Int(unsafeBitCast(value, to: Int16.self)), path))
    case ObjectIdentifier(Int32.self): box.kind = .value(try integer(Int(unsafeBitCast(value, to: Int32.self)), path))
    case ObjectIdentifier(Int64.self): box.kind = .value(try integer(Int(unsafeBitCast(value, to: Int64.self)), path))
    case ObjectIdentifier(UInt.self): box.kind = .value(try unsigned(UInt64(unsafeBitCast(value, to: UInt.self)), path))
    case ObjectIdentifier(UInt8.self): box.kind = .value(try unsigned(UInt64(unsafeBitCast(value, to: UInt8.self)), path))
    case ObjectIdentifier(UInt16.self): box.kind = .value(try unsigned(UInt64(unsafeBitCast(value, to: UInt16.self)), path))
    case ObjectIdentifier(UInt32.self): box.kind = .value(try unsigned(UInt64(unsafeBitCast(value, to: UInt32.self)), path))
    case ObjectIdentifier(UInt64.self): box.kind = .value(try unsigned(unsafeBitCast(value, to: UInt64.self), path))
    case ObjectIdentifier(JSON.self): box.kind = .value(unsafeBitCast(value, to: JSON.self))
    default:
        // By the static type: an Optional of a tagged enum is not itself tagged (its wrapped
        // value is, when it is encoded in turn).
        if let tagged = T.self as? any TaggedEnumCodable.Type {
            let inner = EncodedBox()
            try value.encode(to: ValueEncoder(box: inner, codingPath: path))
            box.kind = .value(try flattenTagged(try inner.materialize(path: path), names: tagged.memberNames, path: path))
        } else if let unordered = value as? any UnorderedEncodable {
            // A Set (or a dictionary written as pairs) iterates in a per-process hash order:
            // sorted by canonical bytes, every process writes the same JSON and digest.
            box.kind = .value(try unordered.encodeSorted(path: path))
        } else {
            try value.encode(to: ValueEncoder(box: box, codingPath: path))
        }
    }
}

private func number(_ value: Double, _ path: [any CodingKey]) throws(AppCodingError) -> JSON {
    guard value.isFinite else { throw AppCodingError("\(describe(path)): \(value) has no JSON form; use a finite number") }
    return .number(value)
}

private func integer(_ value: Int, _ path: [any CodingKey]) throws(AppCodingError) -> JSON {
    guard value.magnitude <= UInt(maxExactInteger) else {
        throw AppCodingError("\(describe(path)): \(value) is beyond ±(2^53 − 1), which JSON carries exactly; encode it as a string")
    }
    return JSON(value)
}

private func unsigned(_ value: UInt64, _ path: [any CodingKey]) throws(AppCodingError) -> JSON {
    guard value <= UInt64(maxExactInteger) else {
        throw AppCodingError("\(describe(path)): \(value) is beyond 2^53 − 1, which JSON carries exactly; encode it as a string")
    }
    return JSON(value)
}

private struct ValueEncoder: Encoder {
    let box: EncodedBox
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if case .object = box.kind {} else { box.kind = .object([:]) }
        return KeyedEncodingContainer(KeyedEncoding<Key>(box: box, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if case .array = box.kind {} else { box.kind = .array([]) }
        return UnkeyedEncoding(box: box, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleValueEncoding(box: box, codingPath: codingPath)
    }
}

private struct KeyedEncoding<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let box: EncodedBox
    let codingPath: [any CodingKey]

    mutating func encodeNil(forKey key: Key) throws { box.set(JSONKey(key.stringValue), leaf(.null)) }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        let child = EncodedBox()
        try encodeValue(value, into: child, path: codingPath + [key])
        box.set(JSONKey(key.stringValue), child)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type,
                                                        forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        let child = EncodedBox()
        child.kind = .object([:])
        box.set(JSONKey(key.stringValue), child)
        return KeyedEncodingContainer(KeyedEncoding<NestedKey>(box: child, codingPath: codingPath + [key]))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        let child = EncodedBox()
        child.kind = .array([])
        box.set(JSONKey(key.stringValue), child)
        return UnkeyedEncoding(box: child, codingPath: codingPath + [key])
    }

    mutating func superEncoder() -> any Encoder {
        let child = EncodedBox()
        box.set("super", child)
        return ValueEncoder(box: child, codingPath: codingPath + [AnyKey("super")])
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        let child = EncodedBox()
        box.set(JSONKey(key.stringValue), child)
        return ValueEncoder(box: child, codingPath: codingPath + [key])
    }
}

private struct UnkeyedEncoding: UnkeyedEncodingContainer {
    let box: EncodedBox
    let codingPath: [any CodingKey]
    private(set) var count = 0

    init(box: EncodedBox, codingPath: [any CodingKey]) {
        self.box = box
        self.codingPath = codingPath
        if case .array(let elements) = box.kind { count = elements.count }
    }

    mutating func encodeNil() throws {
        box.append(leaf(.null))
        count += 1
    }

    mutating func encode<T: Encodable>(_ value: T) throws {
        let child = EncodedBox()
        try encodeValue(value, into: child, path: codingPath + [AnyKey(count)])
        box.append(child)
        count += 1
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let child = EncodedBox()
        child.kind = .object([:])
        box.append(child)
        defer { count += 1 }
        return KeyedEncodingContainer(KeyedEncoding<NestedKey>(box: child, codingPath: codingPath + [AnyKey(count)]))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let child = EncodedBox()
        child.kind = .array([])
        box.append(child)
        defer { count += 1 }
        return UnkeyedEncoding(box: child, codingPath: codingPath + [AnyKey(count)])
    }

    mutating func superEncoder() -> any Encoder {
        let child = EncodedBox()
        box.append(child)
        defer { count += 1 }
        return ValueEncoder(box: child, codingPath: codingPath + [AnyKey(count)])
    }
}

private struct SingleValueEncoding: SingleValueEncodingContainer {
    let box: EncodedBox
    let codingPath: [any CodingKey]

    mutating func encodeNil() throws { box.kind = .value(.null) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        try encodeValue(value, into: box, path: codingPath)
    }
}

private func leaf(_ json: JSON) -> EncodedBox {
    let box = EncodedBox()
    box.kind = .value(json)
    return box
}

// MARK: - Decoding

/// A coding path built only when it is needed (an error, a nested decoder): most values are
/// decoded without ever allocating one.
@usableFromInline struct LazyPath: Sendable {
    let parent: [any CodingKey]
    let key: (any CodingKey)?

    @usableFromInline init(_ parent: [any CodingKey], _ key: (any CodingKey)? = nil) {
        self.parent = parent
        self.key = key
    }

    var array: [any CodingKey] { key.map { parent + [$0] } ?? parent }

    /// The path one level down; allocates only below the second level.
    func appending(_ child: any CodingKey) -> LazyPath {
        key == nil ? LazyPath(parent, child) : LazyPath(array, child)
    }
}

func decodeValue<T: Decodable>(_ type: T.Type, from json: JSON, path: LazyPath) throws -> T {
    func mismatch(_ expected: String) -> DecodingError {
        .typeMismatch(T.self, .init(codingPath: path.array, debugDescription: "expected \(expected), got \(json.canonicalString)"))
    }
    // Metatype comparisons are pointer compares; `is X.Type` would be a dynamic cast each.
    // Each `unsafeBitCast` below follows the check that `T` is exactly that type.
    let requested = ObjectIdentifier(type)
    if requested == ObjectIdentifier(String.self) {
        guard case .string(let v) = json else { throw mismatch("a string") }
        return unsafeBitCast(v, to: T.self)
    }
    if requested == ObjectIdentifier(Int.self) {
        return unsafeBitCast(try exactInteger(json, mismatch) as Int, to: T.self)
    }
    if requested == ObjectIdentifier(Bool.self) {
        guard case .bool(let v) = json else { throw mismatch("a boolean") }
        return unsafeBitCast(v, to: T.self)
    }
    if requested == ObjectIdentifier(Double.self) {
        guard case .number(let v) = json else { throw mismatch("a number") }
        return unsafeBitCast(v, to: T.self)
    }
    switch requested {
    case ObjectIdentifier(Float.self):
        guard case .number(let v) = json, Float(v).isFinite else { throw mismatch("a number within Float's range") }
        return try cast(Float(v), path)
    case ObjectIdentifier(Int8.self): return try cast(try exactInteger(json, mismatch) as Int8, path)
    case ObjectIdentifier(Int16.self): return try cast(try exactInteger(json, mismatch) as Int16, path)
    case ObjectIdentifier(Int32.self): return try cast(try exactInteger(json, mismatch) as Int32, path)
    case ObjectIdentifier(Int64.self): return try cast(try exactInteger(json, mismatch) as Int64, path)
    case ObjectIdentifier(UInt.self): return try cast(try exactInteger(json, mismatch) as UInt, path)
    case ObjectIdentifier(UInt8.self): return try cast(try exactInteger(json, mismatch) as UInt8, path)
    case ObjectIdentifier(UInt16.self): return try cast(try exactInteger(json, mismatch) as UInt16, path)
    case ObjectIdentifier(UInt32.self): return try cast(try exactInteger(json, mismatch) as UInt32, path)
    case ObjectIdentifier(UInt64.self): return try cast(try exactInteger(json, mismatch) as UInt64, path)
    case ObjectIdentifier(JSON.self): return try cast(json, path)
    default:
        if let tagged = type as? any TaggedEnumCodable.Type {
            if let table = caseTable(of: tagged), let value = try table.decode(json, path: path) {
                return try cast(value, path)
            }
            return try T(from: TaggedDecoder(json: json, names: tagged.memberNames, codingPath: path.array))
        }
        return try T(from: ValueDecoder(json: json, codingPath: path.array))
    }
}

/// `value` as `T`, which the caller has checked it is (no trap either way).
private func cast<T>(_ value: Any, _ path: LazyPath) throws -> T {
    guard let result = value as? T else {
        throw DecodingError.typeMismatch(T.self, .init(codingPath: path.array, debugDescription: "internal: \(type(of: value)) is not \(T.self)"))
    }
    return result
}

private func exactInteger<I: FixedWidthInteger>(_ json: JSON, _ mismatch: (String) -> DecodingError) throws -> I {
    guard case .number(let value) = json, value.rounded() == value, abs(value) <= Double(maxExactInteger),
          let exact = I(exactly: value) else {
        throw mismatch("an integer that fits \(I.self) (within ±(2^53 − 1))")
    }
    return exact
}

private struct ValueDecoder: Decoder {
    let json: JSON
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = json else {
            throw DecodingError.typeMismatch([String: JSON].self,
                                             .init(codingPath: codingPath, debugDescription: "expected an object, got \(json.canonicalString)"))
        }
        return KeyedDecodingContainer(KeyedDecoding<Key>(members: members, renames: [], codingPath: codingPath, recorder: nil))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let elements) = json else {
            throw DecodingError.typeMismatch([JSON].self,
                                             .init(codingPath: codingPath, debugDescription: "expected an array, got \(json.canonicalString)"))
        }
        return UnkeyedDecoding(elements: elements, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        SingleValueDecoding(json: json, codingPath: codingPath)
    }
}

/// Decodes a ``TaggedEnumCodable`` straight from `{"type":"case", members…}`: it shows the
/// synthesized `init(from:)` the `{"case":{members}}` shape it expects, without building it.
struct TaggedDecoder: Decoder {
    let json: JSON
    let names: [String: [String]]
    let codingPath: [any CodingKey]
    /// Notes the wire names the case's decoding asks for (checking a ``TaggedCases`` entry).
    var recorder: MemberRecorder? = nil
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = json, let tag = members["type"]?.stringValue else {
            throw AppCodingError("\(describe(codingPath)): expected an object with a string \"type\" naming the case, got \(json.canonicalString)")
        }
        return KeyedDecodingContainer(TaggedCaseContainer<Key>(tag: tag, members: members, renames: names[tag] ?? [], codingPath: codingPath,
                                                                 recorder: recorder))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        throw AppCodingError("\(describe(codingPath)): a tagged enum is an object with a \"type\"")
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer {
        throw AppCodingError("\(describe(codingPath)): a tagged enum is an object with a \"type\"")
    }
}

/// The outer `{"case": …}` level of a tagged enum: one key, the case named by `"type"`.
private struct TaggedCaseContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let tag: String
    let members: [JSONKey: JSON]
    let renames: [String]
    let codingPath: [any CodingKey]
    let recorder: MemberRecorder?

    var allKeys: [Key] { Key(stringValue: tag).map { [$0] } ?? [] }

    func contains(_ key: Key) -> Bool { JSONKey(key.stringValue) == JSONKey(tag) }

    private func notTheCase(_ key: Key) -> DecodingError {
        .keyNotFound(key, .init(codingPath: codingPath, debugDescription: "the case is \"\(tag)\""))
    }

    func decodeNil(forKey key: Key) throws -> Bool { throw notTheCase(key) }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        guard contains(key) else { throw notTheCase(key) }
        return try T(from: ValueDecoder(json: .object(members.filter { $0.key != "type" }), codingPath: codingPath + [CaseKey(tag)]))
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type,
                                               forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        guard contains(key) else { throw notTheCase(key) }
        return KeyedDecodingContainer(KeyedDecoding<NestedKey>(members: members, renames: renames, codingPath: codingPath + [CaseKey(tag)],
                                                                 recorder: recorder))
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer { throw notTheCase(key) }

    func superDecoder() throws -> any Decoder { ValueDecoder(json: .object(members), codingPath: codingPath) }

    func superDecoder(forKey key: Key) throws -> any Decoder { ValueDecoder(json: .object(members), codingPath: codingPath + [CaseKey(tag)]) }
}

private struct KeyedDecoding<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let members: [JSONKey: JSON]
    /// For a tagged case: the wire names of its unlabeled values `_0`, `_1`, ….
    let renames: [String]
    let codingPath: [any CodingKey]
    /// For a tagged case being checked against its ``TaggedCases`` entry: notes each member asked for.
    let recorder: MemberRecorder?

    /// In one order everywhere (RFC 8785's): when two wire members map to one Swift key (names
    /// that differ only by normalization, `"1"` and `"01"` for an `Int` key), every process
    /// keeps the same one, so hub and replicas never decode a dispatch differently.
    var allKeys: [Key] { members.keys.sorted().compactMap { Key(stringValue: $0.string) } }

    /// The member a key names on the wire (`_0` → its given name in a tagged case).
    private func wireName(_ key: Key) -> JSONKey {
        let name = key.stringValue
        let wire: JSONKey
        if !renames.isEmpty, name.utf8.first == UInt8(ascii: "_"), let index = Int(name.dropFirst()), index < renames.count {
            wire = JSONKey(renames[index])
        } else {
            wire = JSONKey(name)
        }
        recorder?.note(wire)
        return wire
    }

    func contains(_ key: Key) -> Bool { members[wireName(key)] != nil }

    private func value(_ key: Key) throws -> JSON {
        guard let value = members[wireName(key)] else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no member \"\(wireName(key).string)\""))
        }
        return value
    }

    func decodeNil(forKey key: Key) throws -> Bool { try value(key).isNull }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try decodeValue(type, from: try value(key), path: LazyPath(codingPath, key))
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type,
                                               forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try ValueDecoder(json: try value(key), codingPath: codingPath + [key]).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try ValueDecoder(json: try value(key), codingPath: codingPath + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        ValueDecoder(json: members["super"] ?? .null, codingPath: codingPath + [AnyKey("super")])
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        ValueDecoder(json: members[wireName(key)] ?? .null, codingPath: codingPath + [key])
    }
}

private struct UnkeyedDecoding: UnkeyedDecodingContainer {
    let elements: [JSON]
    let codingPath: [any CodingKey]
    private(set) var currentIndex = 0

    init(elements: [JSON], codingPath: [any CodingKey]) {
        self.elements = elements
        self.codingPath = codingPath
    }

    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    private mutating func next<T>(_ type: T.Type) throws -> (JSON, LazyPath) {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(type, .init(codingPath: codingPath + [AnyKey(currentIndex)],
                                                          debugDescription: "the array has only \(elements.count) elements"))
        }
        defer { currentIndex += 1 }
        return (elements[currentIndex], LazyPath(codingPath, AnyKey(currentIndex)))
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, elements[currentIndex].isNull else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let (json, path) = try next(type)
        return try decodeValue(type, from: json, path: path)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        let (json, path) = try next([String: JSON].self)
        return try ValueDecoder(json: json, codingPath: path.array).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let (json, path) = try next([JSON].self)
        return try ValueDecoder(json: json, codingPath: path.array).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        let (json, path) = try next(JSON.self)
        return ValueDecoder(json: json, codingPath: path.array)
    }
}

private struct SingleValueDecoding: SingleValueDecodingContainer {
    let json: JSON
    let codingPath: [any CodingKey]

    func decodeNil() -> Bool { json.isNull }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try decodeValue(type, from: json, path: LazyPath(codingPath))
    }
}

// MARK: - Paths and messages

/// A coding key for array indices and renamed members.
struct AnyKey: CodingKey {
    let stringValue: String
    let intValue: Int?
    init(_ string: String) {
        stringValue = string
        intValue = nil
    }
    init(_ index: Int) {
        stringValue = "\(index)"
        intValue = index
    }
    init?(stringValue: String) { self.init(stringValue) }
    init?(intValue: Int) { self.init(intValue) }
}

/// The case of a tagged enum in a coding path: on the wire it is the `"type"` member's value,
/// not a member, so it is never written as a step of the path.
struct CaseKey: CodingKey {
    let stringValue: String
    var intValue: Int? { nil }
    init(_ tag: String) { stringValue = tag }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

/// Where a decoding problem is, in the wire's terms: `at /a/0/b` (the members and indices of
/// the JSON, as a JSON Pointer), `at the top level`, and for a tagged enum's case
/// `in case "add"` or `in case "add", at /item` (the case is the `"type"`, not a member).
///
/// - Parameters:
///   - path: The coding path.
///   - tag: The case of a top-level tagged enum whose path does not hold it (a case table's).
/// - Returns: The place, for the start of a message.
func describe(_ path: [any CodingKey], tag: String? = nil) -> String {
    var steps: [String] = []
    var caseTag = tag
    for key in path {
        if key is CaseKey {
            // The case's members sit in the object that holds its "type": no step of its own.
            caseTag = key.stringValue
        } else {
            steps.append(escapedStep(key.stringValue))
        }
    }
    let pointer = steps.isEmpty ? nil : "at /" + steps.joined(separator: "/")
    guard let caseTag else { return pointer ?? "at the top level" }
    let named = "in case \"\(ControlCharacters.escaped(caseTag))\""
    return pointer.map { named + ", " + $0 } ?? named
}

/// A member name as a JSON Pointer step (RFC 6901: `~` as `~0`, `/` as `~1`).
private func escapedStep(_ name: String) -> String {
    guard name.utf8.contains(where: { $0 == UInt8(ascii: "~") || $0 == UInt8(ascii: "/") }) else { return name }
    var escaped = ""
    for scalar in name.unicodeScalars {
        switch scalar {
        case "~": escaped += "~0"
        case "/": escaped += "~1"
        default: escaped.unicodeScalars.append(scalar)
        }
    }
    return escaped
}

/// What went wrong in decoding, in one line with the place (see ``describe(_:tag:)``).
///
/// - Parameters:
///   - error: What decoding threw.
///   - tag: The case of a top-level tagged enum decoded through its case table, if any.
/// - Returns: The message.
@usableFromInline func codingMessage(_ error: any Error, tag: String? = nil) -> String {
    if let error = error as? AppCodingError { return error.message }
    guard let error = error as? DecodingError else { return String(describing: error) }
    switch error {
    case .typeMismatch(_, let context), .valueNotFound(_, let context), .keyNotFound(_, let context),
         .dataCorrupted(let context):
        let path = context.codingPath
        if case .keyNotFound(let key, _) = error {
            return "\(describe(path, tag: tag)): missing member \"\(key.stringValue)\""
        }
        return "\(describe(path, tag: tag)): \(context.debugDescription)"
    @unknown default:
        return String(describing: error)
    }
}

/// The wire names a tagged case's synthesized decoding asks for, in the order it first asks:
/// its associated values' members, in declaration order. Used once per ``TaggedCases`` entry.
final class MemberRecorder {
    private(set) var names: [JSONKey] = []

    func note(_ name: JSONKey) {
        if !names.contains(name) { names.append(name) }
    }
}
