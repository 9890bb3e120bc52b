import Synchronization
import SyncProtocol

/// A ``TaggedEnumCodable`` enum's cases with their constructors: with it, ``JSONValueDecoder``
/// builds each action straight from its members instead of through the synthesized
/// `init(from:)` and the `Decoder` containers, several times faster.
///
/// One line per case: the wire name, the constructor (an enum case is a function of its
/// associated values), and the member name of each associated value, in order:
///
/// ```swift
/// enum Action: TaggedEnumCodable, Sendable {
///     case add(amount: Int)
///     case rename(String, to: String)
///     case reset
///
///     static let taggedCases = TaggedCases<Action>(
///         .case("add", Action.add, "amount"),
///         .case("rename", Action.rename, "from", "to"),
///         .case("reset", .reset)
///     )
/// }
/// ```
///
/// The table only speeds decoding up; it never changes what an action means:
/// - Encoding still goes through the synthesized `encode(to:)`. The table's member names
///   are the enum's default ``TaggedEnumCodable/memberNames``, so `_0`-style values are
///   written under the names the table reads.
/// - A tag the table does not list is decoded through `Codable`, so a partial table is fine.
/// - Each entry is checked against the `Codable` conformance: the value it builds must
///   encode exactly as the synthesized decoding of the same JSON does. The check runs on
///   each case's first use in a process (on every use in debug builds). An entry that
///   fails it (a wrong constructor, swapped or misnamed members) refuses the action with an
///   ``AppCodingError`` naming the entry, so a wrong table is loud, never a silent misreading.
public struct TaggedCases<Value: TaggedEnumCodable>: Sendable {
    /// One case: its wire name, member names, and how to build it from the members.
    public struct Case: Sendable {
        /// The case's name on the wire.
        @usableFromInline let tag: String
        /// The wire names of its associated values, in order.
        @usableFromInline let members: [String]
        /// Why the entry cannot work (names that do not match the values), if it cannot.
        @usableFromInline let problem: String?
        /// Builds the value from the action object's members.
        @usableFromInline let build: @Sendable (_ members: [JSONKey: JSON], _ path: LazyPath) throws -> Value
        /// Whether the entry has been checked against the `Codable` conformance.
        @usableFromInline let checked: CheckedFlag

        @usableFromInline init(tag: String, members: [String], problem: String?,
                               build: @escaping @Sendable (_ members: [JSONKey: JSON], _ path: LazyPath) throws -> Value) {
            self.tag = tag
            self.members = members
            self.problem = problem
            self.build = build
            self.checked = CheckedFlag()
        }

        /// A case without associated values: `.case("reset", .reset)`.
        ///
        /// - Parameters:
        ///   - tag: The case's name on the wire, the enum case's name.
        ///   - value: The case.
        /// - Returns: The entry.
        @inlinable public static func `case`(_ tag: String, _ value: Value) -> Case {
            Case(tag: tag, members: [], problem: nil, build: { _, _ in value })
        }

        /// A case with associated values: `.case("add", Action.add, "name", "amount")`.
        ///
        /// - Parameters:
        ///   - tag: The case's name on the wire, the enum case's name.
        ///   - make: The case's constructor, e.g. `Action.add`.
        ///   - members: The wire name of each associated value, in order: its label, or for an
        ///     unlabeled value the name to write it under.
        /// - Returns: The entry. If the names do not match the values one for one, decoding
        ///   this case throws an ``AppCodingError`` saying so.
        @inlinable public static func `case`<each Member: Decodable & Sendable>(
            _ tag: String, _ make: @escaping @Sendable (repeat each Member) -> Value, _ members: String...
        ) -> Case {
            var arity = 0
            for _ in repeat (each Member).self { arity += 1 }
            guard arity == members.count else {
                let problem = "\(Value.self).taggedCases: the entry \"\(tag)\" names \(members.count) member(s) for \(arity) associated value(s); name each value once, in order"
                return Case(tag: tag, members: members, problem: problem, build: { _, _ in throw AppCodingError(problem) })
            }
            let keys = members.map { JSONKey($0) }
            return Case(tag: tag, members: members, problem: nil, build: { object, path in
                var index = 0
                return make(repeat try decodeMember((each Member).self, at: &index, of: keys, in: object, path: path))
            })
        }
    }

    /// The entries, typed and erased; `nil` for no table (cheap to make for every decode).
    @usableFromInline let storage: Storage?

    /// A table's entries, typed for ``CodableSyncApp``'s decoding and erased for the generic decoder.
    @usableFromInline final class Storage: Sendable {
        /// The entries, in the order given.
        @usableFromInline let cases: [Case]
        /// The same entries without the enum's type.
        @usableFromInline let table: CaseTable

        init(_ cases: [Case]) {
            self.cases = cases
            table = CaseTable(tags: cases.map { JSONKey($0.tag) }) { index, json, path in
                try TaggedCases.decode(cases[index], from: json, path: path)
            }
        }
    }

    /// Creates a table.
    ///
    /// - Parameter cases: One entry per case; a tag listed twice keeps its first entry.
    public init(_ cases: Case...) {
        self.init(cases)
    }

    /// Creates a table from an array of entries.
    ///
    /// - Parameter cases: One entry per case; a tag listed twice keeps its first entry.
    public init(_ cases: [Case]) {
        storage = cases.isEmpty ? nil : Storage(cases)
    }

    private init() {
        storage = nil
    }

    /// No table: every case decodes through `Codable` (the default).
    public static var none: TaggedCases { TaggedCases() }

    /// Whether the table lists no case.
    public var isEmpty: Bool { storage == nil }

    /// The erased table, for the generic decoder.
    var table: CaseTable? { storage?.table }

    /// The member names of every listed case with associated values, as
    /// ``TaggedEnumCodable/memberNames`` takes them.
    public var memberNames: [String: [String]] {
        var names: [String: [String]] = [:]
        for entry in storage?.cases ?? [] where !entry.members.isEmpty && names[entry.tag] == nil {
            names[entry.tag] = entry.members
        }
        return names
    }

    /// Decodes a value through the table.
    ///
    /// - Parameters:
    ///   - json: The value's JSON.
    ///   - path: Its coding path.
    /// - Returns: The value, or `nil` when the JSON is not an object whose string `"type"`
    ///   the table lists: then decode through `Codable`, which also words the error for an
    ///   unknown case.
    /// - Throws: When the case's members do not decode, or its entry fails its check.
    @inlinable func decode(_ json: JSON, path: LazyPath) throws -> Value? {
        guard let storage, let (index, object) = storage.table.find(json) else { return nil }
        let entry = storage.cases[index]
        let value = try entry.build(object, path)
        if entry.checked.needed { try TaggedCases.check(entry, built: value, from: json, path: path) }
        return value
    }

    /// Builds a case's value and checks its entry if it is due.
    private static func decode(_ entry: Case, from json: JSON, path: LazyPath) throws -> Value {
        guard case .object(let object) = json else {
            throw AppCodingError("internal: \(Value.self).taggedCases was asked to build from \(json.canonicalString)")
        }
        let value = try entry.build(object, path)
        if entry.checked.needed { try check(entry, built: value, from: json, path: path) }
        return value
    }

    /// Checks an entry against the `Codable` conformance: the value it built must encode as
    /// the synthesized decoding of the same JSON does.
    @usableFromInline static func check(_ entry: Case, built: Value, from json: JSON, path: LazyPath) throws {
        if let problem = entry.problem { throw AppCodingError(problem) }
        let fix = "fix that entry of \(Value.self).taggedCases (its constructor, or its member names in order)"
        let synthesized: Value
        do {
            synthesized = try Value(from: TaggedDecoder(json: json, names: Value.memberNames, codingPath: path.array))
        } catch {
            throw AppCodingError("\(Value.self).taggedCases decodes \(json.canonicalString) as case \"\(entry.tag)\", but its Codable conformance refuses it (\(codingMessage(error))); \(fix)")
        }
        let encoder = JSONValueEncoder()
        let mine = try encoder.encode(built), theirs = try encoder.encode(synthesized)
        guard mine.canonicalBytes == theirs.canonicalBytes else {
            throw AppCodingError("\(Value.self).taggedCases builds \(mine.canonicalString) from \(json.canonicalString), but its Codable conformance reads \(theirs.canonicalString); \(fix)")
        }
        entry.checked.set()
    }
}

/// Whether a table entry has been checked against the `Codable` conformance in this process.
@usableFromInline final class CheckedFlag: Sendable {
    private let done = Atomic<Bool>(false)

    init() {}

    /// Whether the entry (still) has to be checked: until it passes once, and always in debug builds.
    @usableFromInline var needed: Bool { _isDebugAssertConfiguration() || !done.load(ordering: .acquiring) }

    /// Records that the entry passed its check.
    func set() { done.store(true, ordering: .releasing) }
}

/// A ``TaggedCases`` table without its enum's type, for the generic decoder.
@usableFromInline final class CaseTable: Sendable {
    /// The entries' tags, in order.
    private let tags: [JSONKey]
    /// Builds (and checks) the value of the entry at an index, as `Any`.
    private let build: @Sendable (_ index: Int, _ json: JSON, _ path: LazyPath) throws -> Any

    init(tags: [JSONKey], build: @escaping @Sendable (_ index: Int, _ json: JSON, _ path: LazyPath) throws -> Any) {
        self.tags = tags
        self.build = build
    }

    /// The entry for an action object's `"type"`, with the object's members.
    ///
    /// - Parameter json: The value's JSON.
    /// - Returns: The entry's index and the members, or `nil` if the JSON is not an object with
    ///   a string `"type"` the table lists.
    @usableFromInline func find(_ json: JSON) -> (Int, [JSONKey: JSON])? {
        guard case .object(let members) = json, case .string(let tag)? = members["type"] else { return nil }
        // Enums have few cases: comparing bytes beats hashing the tag.
        let key = JSONKey(tag)
        guard let index = tags.firstIndex(of: key) else { return nil }
        return (index, members)
    }

    /// Decodes a value through the table, for the generic decoder.
    ///
    /// - Returns: The value (of the table's enum type), or `nil` as ``find(_:)``.
    func decode(_ json: JSON, path: LazyPath) throws -> Any? {
        guard let (index, _) = find(json) else { return nil }
        return try build(index, json, path)
    }
}

/// The table of a tagged enum, if it has one.
func caseTable<E: TaggedEnumCodable>(of type: E.Type) -> CaseTable? {
    E.taggedCases.table
}

/// A member's name in a coding path (fits an existential's inline buffer).
struct MemberKey: CodingKey {
    let stringValue: String
    var intValue: Int? { nil }
    init(_ name: String) { stringValue = name }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

/// Decodes an associated value from its member; an absent member reads as `null`, which only
/// an optional accepts (as the synthesized `decodeIfPresent` does).
///
/// - Parameters:
///   - type: The value's type.
///   - index: The value's position among the case's values; advanced past it.
///   - keys: The case's member names.
///   - object: The action object.
///   - path: The action's coding path.
@usableFromInline func decodeMember<M: Decodable>(_ type: M.Type, at index: inout Int, of keys: [JSONKey],
                                                  in object: [JSONKey: JSON], path: LazyPath) throws -> M {
    guard index < keys.count else {
        throw AppCodingError("\(describe(path.array)): a taggedCases entry has more values than member names")
    }
    let key = keys[index]
    index += 1
    let memberPath = path.appending(MemberKey(key.string))
    guard let json = object[key] else {
        do {
            return try decodeValue(type, from: .null, path: memberPath)
        } catch {
            throw DecodingError.keyNotFound(MemberKey(key.string), .init(codingPath: path.array, debugDescription: "no member \"\(key.string)\""))
        }
    }
    return try decodeValue(type, from: json, path: memberPath)
}
