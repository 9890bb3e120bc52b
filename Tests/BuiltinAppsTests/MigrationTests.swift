import StoreSyncTesting
import SyncCore
import Testing

/// Version 1 of a small notes app: titles only.
struct NotesV1: CodableSyncApp {
    struct State: Codable, Equatable, Sendable { var titles: [String] = [] }
    enum Action: TaggedEnumCodable, Equatable, Sendable { case add(title: String) }
    static let name = "notes"
    static let version = "1"
    var initialState: State { State() }
    func reduce(into state: inout State, action: Action) {
        switch action {
        case .add(let title): state.titles.append(title)
        }
    }
}

/// Version 2: each note has an id (its place in version 1) and a title.
struct NotesV2: CodableSyncApp, UpgradingApp {
    struct Note: Codable, Equatable, Sendable { var id: Int; var title: String }
    struct State: Codable, Equatable, Sendable { var notes: [Note] = [] }
    enum Action: TaggedEnumCodable, Equatable, Sendable { case add(id: Int, title: String) }
    static let name = "notes"
    static let version = "2"
    var initialState: State { State() }
    var previous: NotesV1 { NotesV1() }
    func migrate(_ old: NotesV1.State) throws(MigrationError) -> State {
        State(notes: old.titles.enumerated().map { Note(id: $0.offset + 1, title: $0.element) })
    }
    func reduce(into state: inout State, action: Action) {
        switch action {
        case .add(let id, let title): state.notes.append(Note(id: id, title: title))
        }
    }
}

/// Version 3: an optional due date (seconds since 1970, chosen by the dispatcher); refuses a
/// state with two notes of one id.
struct NotesV3: CodableSyncApp, UpgradingApp {
    struct Note: Codable, Equatable, Sendable { var id: Int; var title: String; var due: Int? }
    struct State: Codable, Equatable, Sendable { var notes: [Note] = [] }
    enum Action: TaggedEnumCodable, Equatable, Sendable { case add(id: Int, title: String) }
    static let name = "notes"
    static let version = "3"
    var initialState: State { State() }
    var previous: NotesV2 { NotesV2() }
    func migrate(_ old: NotesV2.State) throws(MigrationError) -> State {
        guard Set(old.notes.map(\.id)).count == old.notes.count else {
            throw MigrationError("two notes share an id; give each its own with notes@2 first")
        }
        return State(notes: old.notes.map { Note(id: $0.id, title: $0.title, due: nil) })
    }
    func reduce(into state: inout State, action: Action) {
        switch action {
        case .add(let id, let title): state.notes.append(Note(id: id, title: title, due: nil))
        }
    }
}

/// A migration that reads something outside its input: what `MigrationCheck` must catch.
struct DriftingNotes: CodableSyncApp, UpgradingApp {
    struct State: Codable, Equatable, Sendable { var count = 0 }
    enum Action: TaggedEnumCodable, Equatable, Sendable { case add(title: String) }
    static let name = "notes"
    static let version = "drift"
    var initialState: State { State() }
    var previous: NotesV1 { NotesV1() }
    func migrate(_ old: NotesV1.State) throws(MigrationError) -> State { State(count: Int.random(in: 0...1_000_000)) }
    func reduce(into state: inout State, action: Action) {}
}

@Suite("Upgrading apps: a version names the one it replaces, and how its state moves")
struct MigrationTests {
    @Test("the chain: every version a binary carries, oldest first")
    func chain() {
        #expect(NotesV1().versions.fingerprints == ["notes@1"])
        #expect(NotesV3().versions.fingerprints == ["notes@1", "notes@2", "notes@3"])
        #expect(NotesV3().versions.newest == "notes@3")
        #expect(NotesV3().versions.previous(of: "notes@3") == "notes@2")
        #expect(NotesV3().versions.previous(of: "notes@1") == nil)
        #expect(NotesV3().versions.contains("notes@2") && !NotesV3().versions.contains("notes@4"))
    }

    @Test("a state of version 1 moves to version 3 through the JSON path a hub takes, one step at a time")
    func jsonPath() throws {
        let v1: JSON = ["titles": ["milk", "eggs"]]
        let v3 = try NotesV3().versions.migrate(v1, from: "notes@1")
        #expect(v3 == ["notes": [["id": 1, "title": "milk"], ["id": 2, "title": "eggs"]]])
        #expect(try NotesV3().versions.migrate(v1, from: "notes@1", to: "notes@2") == ["notes": [["id": 1, "title": "milk"], ["id": 2, "title": "eggs"]]])
        #expect(try NotesV3().versions.migrate(v3, from: "notes@3") == v3, "the version it already is: unchanged")
    }

    @Test("refusals say why and change nothing: no path, backwards, not a state of that version, a step that throws")
    func refusals() {
        let chain = NotesV3().versions
        let cases: [(JSON, String, String?, String)] = [
            (["titles": []], "notes@0", nil, "notes@0 is not a version this binary carries (notes@1, notes@2, notes@3): no path from it"),
            (["notes": []], "notes@3", "notes@1", "notes@1 is older than notes@3: a migration only goes forward"),
            (["notes": 3], "notes@1", nil, "the state is not a state of notes@1"),
            (["notes": [["id": 1, "title": "a"], ["id": 1, "title": "b"]]], "notes@2", nil,
             "the migration from notes@2 to notes@3 failed: two notes share an id; give each its own with notes@2 first"),
        ]
        for (state, from, to, message) in cases {
            do {
                _ = try chain.migrate(state, from: from, to: to)
                Issue.record("\(from) → \(to ?? "newest") was accepted")
            } catch {
                #expect(error.message.hasPrefix(message), "\(error.message)")
            }
        }
    }

    @Test("MigrationCheck: the exact state after, its digest, determinism, the wire and the chain")
    func kit() {
        let old = NotesV1.State(titles: ["milk"])
        let new = NotesV2.State(notes: [.init(id: 1, title: "milk")])
        let digest = NotesV2().digest(of: new)
        #expect(MigrationCheck.check(NotesV2(), from: old, expect: new, digest: digest) == nil)
        #expect(MigrationCheck.check(NotesV2(), from: old, expect: NotesV2.State(), digest: nil)?.message
                == #"the migration gave {"notes":[{"id":1,"title":"milk"}]}, not {"notes":[]}"#)
        #expect(MigrationCheck.check(NotesV2(), from: old, expect: new, digest: "0000000000000000")?.message.hasPrefix("the migrated state's digest is \(digest), not 0000000000000000") == true)
        let drifting = MigrationCheck.check(DriftingNotes(), from: old, expect: DriftingNotes.State(count: 0))
        #expect(drifting != nil, "a migration that reads a random source is caught (its result is not the one expected, or not the same twice)")
        let twoIDs = NotesV2.State(notes: [.init(id: 1, title: "a"), .init(id: 1, title: "b")])
        #expect(MigrationCheck.check(NotesV3(), from: twoIDs, expect: NotesV3.State())?.message
                == "the migration from notes@2 to notes@3 threw: two notes share an id; give each its own with notes@2 first")
    }
}
