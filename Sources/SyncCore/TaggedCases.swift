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
/// Declare it with `static let` (a computed table would be rebuilt, and checked, on every use).
/// The constructor must be the enum case itself (`Action.add`), not a closure.
///
/// The table only speeds decoding up; it decodes what the synthesized `Codable` conformance
/// decodes (the enum must use the synthesized one, as every ``TaggedEnumCodable`` does):
/// - Encoding still goes through the synthesized `encode(to:)`. The table's member names
///   are the enum's default ``TaggedEnumCodable/memberNames``, so `_0`-style values are
///   written under the names the table reads.
/// - A tag the table does not list is decoded through `Codable`, so a partial table is fine.
/// - An absent member is `nil` for an optional value, and a refusal for any other, as with
///   the synthesized `decodeIfPresent` and `decode`.
/// - Each entry is checked against the synthesized decoding in each process, on its first
///   use until it passes: the members that decoding reads for the case must be the entry's
///   names in the same order (whatever the values), and the value the entry builds must
///   encode exactly as the synthesized decoding's does. An entry that fails (a wrong
///   constructor, members misnamed, missing or out of order, a miscounted list) refuses the
///   action with an ``AppCodingError`` naming the entry and what to fix, so a wrong table is
///   loud, never a silent misreading.
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
        /// The member names of the cases with associated values, by tag (first entry per tag).
        let memberNames: [String: [String]]
        /// Each entry's tag as the canonical JSON string its action's `"type"` holds.
        let canonicalTags: [[UInt8]]

        init(_ cases: [Case]) {
            self.cases = cases
            canonicalTags = cases.map { JSON.string($0.tag).canonicalBytes }
            var names: [String: [String]] = [:], seen: Set<JSONKey> = []
            for entry in cases where seen.insert(JSONKey(entry.tag)).inserted && !entry.members.isEmpty {
                names[entry.tag] = entry.members
            }
            memberNames = names
            table = CaseTable(tags: cases.map { JSONKey($0.tag) }) { index, object, json, path in
                try TaggedCases.build(cases[index], object, from: json, path: path)
            }
        }
    }

    /// Each case's JSON shape, one line per tag in the order given, e.g.
    /// `{"type":"add","name":…,"amount":…}` (for help texts such as `:help` in `attach`).
    public var shapes: [String] {
        guard let storage else { return [] }
        var seen: Set<String> = [], lines: [String] = []
        for entry in storage.cases where seen.insert(entry.tag).inserted {
            let tag = JSON.string(entry.tag).canonicalString
            let members = entry.members.map { "," + JSON.string($0).canonicalString + ":…" }.joined()
            lines.append("{\"type\":\(tag)\(members)}")
        }
        return lines
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
    public var memberNames: [String: [String]] { storage?.memberNames ?? [:] }

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
        return try TaggedCases.build(storage.cases[index], object, from: json, path: path)
    }

    /// Decodes a value straight from its canonical bytes, without a `JSON` tree for the action:
    /// the `"type"` is matched as bytes and only the other members' values are parsed.
    ///
    /// It builds exactly what ``decode(_:path:)`` builds from the parsed bytes, or nothing:
    /// `nil` when the bytes are not a canonical object of simple member names, the table does
    /// not list the `"type"`, its entry has not passed its check in this process yet, or a
    /// member does not parse or decode. The caller then parses the bytes and decodes the tree,
    /// which also words the error.
    ///
    /// - Parameters:
    ///   - bytes: The action's canonical JSON.
    ///   - maxDepth: The deepest nesting accepted, as for `JSON(parsing:maxDepth:)`.
    /// - Returns: The value, or `nil`.
    @usableFromInline func decode(canonical bytes: UnsafeRawBufferPointer, maxDepth: Int) -> Value? {
        guard let storage, maxDepth >= 1 else { return nil }
        var found: Int?
        var members: [JSONKey: JSON] = [:]
        let read = CanonicalObjectReader.forEachMember(in: bytes) { name, value in
            guard isTypeName(name) else {
                guard let json = try? JSON(parsing: value, maxDepth: maxDepth - 1) else { return false }
                members[JSONKey(String(decoding: name, as: UTF8.self))] = json
                return true
            }
            // The first entry with this tag, as `CaseTable.find` takes it.
            found = storage.canonicalTags.firstIndex { $0.elementsEqual(value) }
            return found != nil
        }
        guard read, let index = found, !storage.cases[index].checked.needed else { return nil }
        return try? storage.cases[index].build(members, LazyPath([]))
    }

    /// Builds a case's value from the action object's members, checking its entry if it is due.
    @inlinable static func build(_ entry: Case, _ object: [JSONKey: JSON], from json: JSON, path: LazyPath) throws -> Value {
        if entry.checked.needed { return try buildChecking(entry, object, from: json, path: path) }
        return try entry.build(object, path)
    }

    /// Builds a case's value from an entry not yet checked, and checks the entry.
    @usableFromInline static func buildChecking(_ entry: Case, _ object: [JSONKey: JSON], from json: JSON,
                                                path: LazyPath) throws -> Value {
        let built: Value
        do {
            built = try entry.build(object, path)
        } catch {
            // A wrong entry can fail where Codable reads the action: say so rather than
            // passing on a "missing member" the user cannot explain.
            try check(entry, built: nil, from: json, path: path)
            throw error
        }
        try check(entry, built: built, from: json, path: path)
        return built
    }

    /// Checks an entry against the synthesized decoding of the same JSON, and marks it checked
    /// when it passes.
    ///
    /// - Parameters:
    ///   - entry: The entry.
    ///   - built: What the entry built, or `nil` if building failed.
    ///   - json: The action.
    ///   - path: Its coding path.
    /// - Throws: ``AppCodingError`` naming the entry and what to fix, when the entry reads other
    ///   members than the synthesized decoding (for any values), or builds another value.
    ///   Returns without marking when neither decoding can read this action.
    @usableFromInline static func check(_ entry: Case, built: Value?, from json: JSON, path: LazyPath) throws {
        if let problem = entry.problem { throw AppCodingError("\(describe(path.array)): \(problem)") }
        let place = "\(describe(path.array)): the entry \"\(entry.tag)\" of \(Value.self).taggedCases"
        let fix = "give it the enum case itself as the constructor and the members' wire names in declaration order"
        let expected = entry.members.map { JSONKey($0) }
        let recorder = MemberRecorder()
        let synthesized: Value
        do {
            synthesized = try Value(from: TaggedDecoder(json: json, names: Value.memberNames, codingPath: path.array,
                                                        recorder: recorder))
        } catch {
            // Codable refuses this action; the members it read before refusing must still agree.
            guard expected.starts(with: recorder.names) else {
                throw AppCodingError("\(place) names the members \(list(expected)), but Codable reads \(list(recorder.names)) first; \(fix)")
            }
            guard built == nil else {
                throw AppCodingError("\(place) decodes \(json.canonicalString), which Codable refuses (\(codingMessage(error))); \(fix)")
            }
            return
        }
        guard recorder.names == expected else {
            throw AppCodingError("\(place) names the members \(list(expected)), but Codable reads case \"\(entry.tag)\" from \(list(recorder.names)), in that order; \(fix)")
        }
        let encoder = JSONValueEncoder()
        let theirs = try encoder.encode(synthesized)
        guard let built else {
            throw AppCodingError("\(place) cannot build \(json.canonicalString), which Codable reads as \(theirs.canonicalString); \(fix)")
        }
        let mine = try encoder.encode(built)
        guard mine.canonicalBytes == theirs.canonicalBytes else {
            throw AppCodingError("\(place) builds \(mine.canonicalString) from \(json.canonicalString), but Codable reads \(theirs.canonicalString); \(fix)")
        }
        entry.checked.set()
    }
}

/// Whether a member name's bytes are `type`.
private func isTypeName(_ name: UnsafeRawBufferPointer) -> Bool {
    name.count == 4 && name[0] == UInt8(ascii: "t") && name[1] == UInt8(ascii: "y") && name[2] == UInt8(ascii: "p")
        && name[3] == UInt8(ascii: "e")
}

/// `["a", "b"]` for messages.
private func list(_ names: [JSONKey]) -> String {
    "[" + names.map { "\"\($0.string)\"" }.joined(separator: ", ") + "]"
}

/// Whether a table entry has been checked against the `Codable` conformance in this process.
@usableFromInline final class CheckedFlag: Sendable {
    private let done = Atomic<Bool>(false)

    init() {}

    /// Whether the entry still has to be checked: until it first passes.
    @usableFromInline var needed: Bool { !done.load(ordering: .acquiring) }

    /// Records that the entry passed its check.
    func set() { done.store(true, ordering: .releasing) }
}

/// A ``TaggedCases`` table without its enum's type, for the generic decoder.
@usableFromInline final class CaseTable: Sendable {
    /// The entries' tags, in order.
    private let tags: [JSONKey]
    /// Builds (and checks) the value of the entry at an index from the action object's members, as `Any`.
    private let build: @Sendable (_ index: Int, _ object: [JSONKey: JSON], _ json: JSON, _ path: LazyPath) throws -> Any

    init(tags: [JSONKey],
         build: @escaping @Sendable (_ index: Int, _ object: [JSONKey: JSON], _ json: JSON, _ path: LazyPath) throws -> Any) {
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
        guard let (index, object) = find(json) else { return nil }
        return try build(index, object, json, path)
    }
}

/// Decodes a tagged enum through its synthesized `init(from:)` alone (a tag its table does not list).
///
/// - Parameters:
///   - type: The enum.
///   - json: The value's JSON.
/// - Returns: The value.
/// - Throws: ``AppCodingError`` naming the path and what was expected.
@usableFromInline func decodeThroughCodable<E: TaggedEnumCodable>(_ type: E.Type, from json: JSON) throws(AppCodingError) -> E {
    do {
        return try E(from: TaggedDecoder(json: json, names: E.memberNames, codingPath: []))
    } catch {
        throw AppCodingError(codingMessage(error))
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

/// Decodes an associated value from its member; an absent member is `nil` for an optional
/// value and a refusal for any other, as the synthesized `decodeIfPresent` and `decode` have it.
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
        guard type is any AbsentIsNil.Type else {
            throw DecodingError.keyNotFound(MemberKey(key.string), .init(codingPath: path.array, debugDescription: "no member \"\(key.string)\""))
        }
        return try decodeValue(type, from: .null, path: memberPath)
    }
    return try decodeValue(type, from: json, path: memberPath)
}

/// Optionals: an absent member decodes as `nil`.
private protocol AbsentIsNil {}

extension Optional: AbsentIsNil {}
