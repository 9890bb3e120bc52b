import BuiltinApps
import StoreSyncTesting
import SyncCore
import Testing

/// The built-in todos app's second version: `todos@1` (``TodosV1App``, frozen) upgrades to
/// `todos@2` (``TodosApp``), which adds an optional due date per todo.
@Suite("TodosApp version 2: due dates, and the upgrade from todos@1")
struct TodosUpgradeTests {
    typealias V1 = TodosV1App
    typealias V2 = TodosApp

    /// Three todos of version 1, the middle one done, showing the active ones.
    static let v1Sample = V1.State(todos: [
        V1.Todo(id: "a", title: "Buy milk", completed: false, createdAt: 1_700_000_000_000),
        V1.Todo(id: "b", title: "Walk dog", completed: true, createdAt: 1_700_000_000_001),
        V1.Todo(id: "c", title: "Write tests", completed: false, createdAt: 1_700_000_000_002.5),
    ], filter: .active)

    /// ``v1Sample`` as version 2 holds it: the same todos and filter, no due dates.
    static let v2Sample = V2.State(todos: [
        V2.Todo(id: "a", title: "Buy milk", completed: false, createdAt: 1_700_000_000_000, due: nil),
        V2.Todo(id: "b", title: "Walk dog", completed: true, createdAt: 1_700_000_000_001, due: nil),
        V2.Todo(id: "c", title: "Write tests", completed: false, createdAt: 1_700_000_000_002.5, due: nil),
    ], filter: .active)

    /// The canonical JSON `todos@1` (the `TodosApp` of before version 2) wrote for
    /// ``v1Sample``, and which its migration to version 2 keeps, byte for byte.
    static let v1SampleJSON = #"{"filter":"active","todos":["#
        + #"{"completed":false,"createdAt":1700000000000,"id":"a","title":"Buy milk"},"#
        + #"{"completed":true,"createdAt":1700000000001,"id":"b","title":"Walk dog"},"#
        + #"{"completed":false,"createdAt":1700000000002.5,"id":"c","title":"Write tests"}]}"#

    /// FNV-1a 64 of ``v1SampleJSON``.
    static let v1SampleDigest = "10cc9d3b02b4b3ef"

    /// The action JSON of a command, or `nil` for local work.
    func actionJSON(_ command: AppCommand<V2.State, V2.Action>) -> JSON? {
        if case .action(let json) = command { return json }
        return nil
    }

    // MARK: - Versions

    @Test("fingerprints: todos@1 is TodosV1App, todos@2 is TodosApp, and the chain carries both, oldest first")
    func chain() throws {
        #expect(V1.fingerprint == "todos@1")
        #expect(V2.fingerprint == "todos@2")
        #expect(V1.name == V2.name)
        let chain = V2().versions
        #expect(chain.fingerprints == ["todos@1", "todos@2"])
        #expect(chain.newest == "todos@2")
        #expect(chain.previous(of: "todos@2") == "todos@1")
        #expect(chain.previous(of: "todos@1") == nil)
        #expect(chain.contains("todos@1") && chain.contains("todos@2") && !chain.contains("todos@3"))
        #expect(chain.app("todos@1") is V1)
        #expect(chain.app("todos@2") is V2)
        #expect(V1().versions.fingerprints == ["todos@1"])
        // The registry's "todos" is the newest version.
        let registered = try #require(BuiltinApps.app(named: "todos"))
        #expect(registered is V2)
        #expect(registered.versions.fingerprints == ["todos@1", "todos@2"])
        #expect(BuiltinApps.all.contains { $0.fingerprint == "todos@2" })
    }

    // MARK: - Migration

    @Test("MigrationCheck: todos@1 → todos@2 carries every todo and the filter, with no due dates; exact state and digest")
    func migration() throws {
        #expect(MigrationCheck.check(V2(), from: Self.v1Sample, expect: Self.v2Sample, digest: Self.v1SampleDigest) == nil)
        #expect(MigrationCheck.check(V2(), from: V1().initialState, expect: V2().initialState,
                                     digest: "f74b7f08f94506b5") == nil)
        for filter in V1.Filter.allCases {
            let old = V1.State(todos: [V1.Todo(id: "x", title: "t", completed: true, createdAt: 0)], filter: filter)
            let new = V2.State(todos: [V2.Todo(id: "x", title: "t", completed: true, createdAt: 0)],
                               filter: try #require(V2.Filter(rawValue: filter.rawValue)))
            #expect(MigrationCheck.check(V2(), from: old, expect: new) == nil, "filter \(filter)")
        }
        // The migrated state's JSON is the old state's JSON: version 1's shape, plus nothing.
        let migrated = try V2().migrate(Self.v1Sample)
        #expect(V2().encodeState(migrated).canonicalString == Self.v1SampleJSON)
        #expect(V2().digest(of: migrated) == V1().digest(of: Self.v1Sample))
        // The JSON path a hub takes gives the same.
        let viaChain = try V2().versions.migrate(V1().encodeState(Self.v1Sample), from: "todos@1")
        #expect(viaChain.canonicalString == Self.v1SampleJSON)
        // A wrong expectation is caught: MigrationCheck compares exactly.
        var wrong = Self.v2Sample
        wrong.todos[0].due = 1
        #expect(MigrationCheck.check(V2(), from: Self.v1Sample, expect: wrong) != nil)
    }

    @Test("the chain refuses a todos@1 state that is not one, and a way back")
    func chainRefusals() throws {
        let notAState: JSON = ["todos": [["id": "a", "title": "t", "completed": false]], "filter": "all"]
        #expect(throws: MigrationError.self) { try V2().versions.migrate(notAState, from: "todos@1") }
        #expect(throws: MigrationError.self) {
            try V2().versions.migrate(V2().encodeState(Self.v2Sample), from: "todos@2", to: "todos@1")
        }
    }

    // MARK: - Version 1's actions under version 2

    /// Version 1 wire actions, some of which are refused.
    static let v1Actions: [String] = [
        #"{"type":"add","id":"t1","title":"Buy milk","createdAt":1700000000000}"#,
        #"{"type":"add","id":"t2","title":"with \"quotes\" and ü","createdAt":0.5}"#,
        #"{"type":"add","id":"t1","title":"again","createdAt":2}"#,
        #"{"type":"add","id":"t3","title":"  ","createdAt":2}"#,
        #"{"type":"toggle","id":"t1"}"#,
        #"{"type":"toggle","id":"nope"}"#,
        #"{"type":"edit","id":"t2","title":"Buy oat milk"}"#,
        #"{"type":"edit","id":"t2","title":""}"#,
        #"{"type":"setFilter","filter":"completed"}"#,
        #"{"type":"add","id":"t3","title":"Walk dog","createdAt":1700000000002.5}"#,
        #"{"type":"clearCompleted"}"#,
        #"{"type":"remove","id":"c"}"#,
        #"{"type":"remove","id":"c"}"#,
        #"{"type":"setFilter","filter":"active"}"#,
    ]

    @Test("every version 1 action decodes, encodes and reduces under version 2 exactly as under version 1")
    func v1ActionsUnchanged() throws {
        var old = Self.v1Sample
        var new = try V2().migrate(old)
        for text in Self.v1Actions {
            let json = try JSON(parsing: text)
            let oldAction = try V1().decodeAction(json)
            let newAction = try V2().decodeAction(json)
            #expect(V2().encodeAction(newAction).canonicalString == V1().encodeAction(oldAction).canonicalString, "\(text)")
            var oldFailure: String?
            var newFailure: String?
            do { try V1().reduce(into: &old, action: oldAction) } catch { oldFailure = V1().describe(error) }
            do { try V2().reduce(into: &new, action: newAction) } catch { newFailure = V2().describe(error) }
            #expect(oldFailure == newFailure, "\(text)")
            #expect(V2().encodeState(new).canonicalString == V1().encodeState(old).canonicalString, "\(text)")
            #expect(V2().digest(of: new) == V1().digest(of: old), "\(text)")
        }
        #expect(V2().encodeState(new).canonicalString
                == #"{"filter":"active","todos":[{"completed":false,"createdAt":1700000000000,"id":"a","title":"Buy milk"},"#
                + #"{"completed":false,"createdAt":0.5,"id":"t2","title":"Buy oat milk"},"#
                + #"{"completed":false,"createdAt":1700000000002.5,"id":"t3","title":"Walk dog"}]}"#)
        // A version 1 state decodes under version 2 as its migration.
        #expect(try V2().decodeState(V1().encodeState(Self.v1Sample)) == Self.v2Sample)
    }

    @Test("version 1's shorthand is version 2's, and gives the same actions")
    func v1Shorthand() throws {
        for line in ["toggle t1", "remove t1", "edit t1 New title", "clear", "filter active", #"{"type":"toggle","id":"t9"}"#] {
            guard case .action(let old) = try V1().command(line), case .action(let new) = try V2().command(line) else {
                Issue.record("\(line) is not an action")
                continue
            }
            #expect(old == new, "\(line)")
        }
        guard case .action(let added) = try V1().command("add Buy milk") else {
            Issue.record("add is not an action")
            return
        }
        let id = try #require(added["id"]?.stringValue)
        let createdAt = try #require(added["createdAt"]?.numberValue)
        #expect(try V2().decodeAction(added) == .add(id: id, title: "Buy milk", createdAt: createdAt))
    }

    // MARK: - setDue

    @Test("setDue sets a due date, and clears it, the one todo only")
    func setDue() throws {
        var state = Self.v2Sample
        try V2().reduce(into: &state, action: .setDue(id: "a", due: 1_767_225_600_000))
        var expected = Self.v2Sample
        expected.todos[0] = V2.Todo(id: "a", title: "Buy milk", completed: false, createdAt: 1_700_000_000_000, due: 1_767_225_600_000)
        #expect(state == expected)
        let withDue = #"{"filter":"active","todos":["#
            + #"{"completed":false,"createdAt":1700000000000,"due":1767225600000,"id":"a","title":"Buy milk"},"#
            + #"{"completed":true,"createdAt":1700000000001,"id":"b","title":"Walk dog"},"#
            + #"{"completed":false,"createdAt":1700000000002.5,"id":"c","title":"Write tests"}]}"#
        #expect(V2().encodeState(state).canonicalString == withDue)
        #expect(V2().digest(of: state) == "464fee3bda2ec32f")
        #expect(try V2().decodeState(JSON(parsing: withDue)) == state)
        // Changing it again, then to a fraction of a millisecond.
        try V2().reduce(into: &state, action: .setDue(id: "a", due: 1_767_225_600_000.5))
        #expect(state.todos[0].due == 1_767_225_600_000.5)
        // v1 actions keep a due date: toggle and edit leave it.
        try V2().reduce(into: &state, action: .toggle(id: "a"))
        try V2().reduce(into: &state, action: .edit(id: "a", title: "Buy oat milk"))
        #expect(state.todos[0] == V2.Todo(id: "a", title: "Buy oat milk", completed: true, createdAt: 1_700_000_000_000,
                                          due: 1_767_225_600_000.5))
        // Clearing it gives back the JSON of a todo without one.
        try V2().reduce(into: &state, action: .setDue(id: "a", due: nil))
        #expect(state.todos[0].due == nil)
        #expect(V2().encodeState(state).canonicalString.contains(#"{"completed":true,"createdAt":1700000000000,"id":"a","title":"Buy oat milk"}"#))
        #expect(!V2().encodeState(state).canonicalString.contains("due"))
        // Clearing a todo with no due date is accepted and changes nothing.
        let before = state
        try V2().reduce(into: &state, action: .setDue(id: "b", due: nil))
        #expect(state == before)
    }

    @Test("setDue refuses an unknown id as toggle does, and a due date that is not finite, changing nothing",
          arguments: [
              (V2.Action.setDue(id: "z", due: 1), V2.Failure.unknownID("z")),
              (.setDue(id: "z", due: nil), .unknownID("z")),
              (.setDue(id: "A", due: 1), .unknownID("A")),
              (.setDue(id: "", due: 1), .unknownID("")),
              (.setDue(id: "a", due: .infinity), .invalidDue),
              (.setDue(id: "a", due: -.infinity), .invalidDue),
              (.setDue(id: "a", due: .nan), .invalidDue),
              (.setDue(id: "z", due: .nan), .invalidDue),
          ])
    func setDueRefused(_ action: V2.Action, _ failure: V2.Failure) {
        var state = Self.v2Sample
        #expect(throws: failure) { try V2().reduce(into: &state, action: action) }
        #expect(state == Self.v2Sample)
    }

    @Test("setDue's refusals read as the others do")
    func setDueMessages() {
        var state = Self.v2Sample
        #expect(throws: V2.Failure.unknownID("z")) { try V2().reduce(into: &state, action: .toggle(id: "z")) }
        #expect(V2().describe(.unknownID("z")) == #"no todo has id "z""#)
        #expect(V2().describe(.invalidDue) == "a due date must be a finite number of milliseconds since 1970")
    }

    @Test("setDue's wire forms: with a due date, without one, and null", arguments: [
        (#"{"type":"setDue","id":"t1","due":1767225600000}"#, V2.Action.setDue(id: "t1", due: 1_767_225_600_000),
         #"{"due":1767225600000,"id":"t1","type":"setDue"}"#),
        (#"{"type":"setDue","id":"t1"}"#, .setDue(id: "t1", due: nil), #"{"id":"t1","type":"setDue"}"#),
        (#"{"type":"setDue","id":"t1","due":null}"#, .setDue(id: "t1", due: nil), #"{"id":"t1","type":"setDue"}"#),
        (#"{"type":"setDue","id":"t1","due":-1.5}"#, .setDue(id: "t1", due: -1.5), #"{"due":-1.5,"id":"t1","type":"setDue"}"#),
    ])
    func setDueWire(_ text: String, _ action: V2.Action, _ canonical: String) throws {
        #expect(try V2().decodeAction(JSON(parsing: text)) == action)
        #expect(V2().encodeAction(action).canonicalString == canonical)
        #expect(try V2().decodeAction(V2().encodeAction(action)) == action)
    }

    @Test("a setDue whose due date has no JSON form is never sent as another action")
    func setDueUnencodable() {
        for due in [Double.infinity, -.infinity, .nan] {
            let json = V2().encodeAction(.setDue(id: "t1", due: due))
            #expect(json["unencodable"] != nil, "\(json.canonicalString)")
            #expect(throws: AppCodingError.self) { try V2().decodeAction(json) }
        }
    }

    @Test("decodeAction refuses a malformed setDue", arguments: [
        (#"{"type":"setDue","id":"t1","due":"2026-01-01"}"#,
         #"action "setDue" needs a number member "due" (milliseconds since 1970, chosen by the dispatcher), or none or null to clear it"#),
        (#"{"type":"setDue","id":"t1","due":true}"#,
         #"action "setDue" needs a number member "due" (milliseconds since 1970, chosen by the dispatcher), or none or null to clear it"#),
        (#"{"type":"setDue","due":1}"#, #"action "setDue" needs a string member "id""#),
        (#"{"type":"setDue","id":7,"due":1}"#, #"action member "id" must be a string, not number"#),
        (#"{"type":"purge"}"#,
         #"unknown todos action "purge"; expected add, toggle, edit, remove, clearCompleted, setFilter or setDue"#),
    ])
    func setDueDecodeErrors(_ text: String, _ message: String) throws {
        let json = try JSON(parsing: text)
        #expect(throws: AppCodingError(message)) { try V2().decodeAction(json) }
    }

    @Test("todos@1 knows no setDue, nor a due date in a state")
    func v1RefusesDue() throws {
        #expect(throws: AppCodingError(#"unknown todos action "setDue"; expected add, toggle, edit, remove, clearCompleted or setFilter"#)) {
            try V1().decodeAction(JSON(parsing: #"{"type":"setDue","id":"t1","due":1}"#))
        }
        #expect(throws: AppCodingError("unknown command \"due\"; give a shorthand command (:help lists them) or an action as a JSON object, {\"type\":…}")) {
            try V1().command("due t1 1767225600000")
        }
    }

    @Test("decodeState: a due date is a finite number, or absent", arguments: [
        #"{"filter":"all","todos":[{"completed":false,"createdAt":0,"due":"soon","id":"a","title":"t"}]}"#,
        #"{"filter":"all","todos":[{"completed":false,"createdAt":0,"due":null,"id":"a","title":"t"}]}"#,
        #"{"filter":"all","todos":[{"completed":false,"createdAt":0,"due":[1],"id":"a","title":"t"}]}"#,
    ])
    func decodeStateDue(_ text: String) throws {
        let json = try JSON(parsing: text)
        #expect(throws: AppCodingError(#"a todo's "due" is a number (milliseconds since 1970), or absent for none"#)) {
            try V2().decodeState(json)
        }
    }

    @Test("decodeState refuses a due date that is not finite (a JSON value built in Swift, never parsed)")
    func decodeStateNonFiniteDue() {
        let json: JSON = ["filter": "all", "todos": [["completed": false, "createdAt": 0, "due": .number(.infinity), "id": "a", "title": "t"]]]
        #expect(throws: AppCodingError(#"a todo's "due" is a number (milliseconds since 1970), or absent for none"#)) {
            try V2().decodeState(json)
        }
    }

    @Test("version 2 is deterministic, also through the wire, with due dates")
    func deterministic() {
        #expect(DeterminismCheck.check(V2(), actions: [
            .add(id: "a", title: "one", createdAt: 1.5), .setDue(id: "a", due: 1_767_225_600_000), .toggle(id: "a"),
            .add(id: "b", title: "two", createdAt: 2), .setDue(id: "b", due: 3), .setDue(id: "a", due: nil),
            .setDue(id: "missing", due: 1), .clearCompleted,
        ]) == nil)
    }

    // MARK: - Shorthand

    @Test("due ID MS sets a due date; due ID clears it", arguments: [
        ("due t1 1767225600000", V2.Action.setDue(id: "t1", due: 1_767_225_600_000)),
        ("  due   t1   1767225600000.5  ", .setDue(id: "t1", due: 1_767_225_600_000.5)),
        ("due t1 -5", .setDue(id: "t1", due: -5)),
        ("due t1", .setDue(id: "t1", due: nil)),
    ])
    func dueShorthand(_ line: String, _ expected: V2.Action) throws {
        let json = try #require(actionJSON(try V2().command(line)))
        #expect(json == V2().encodeAction(expected))
        #expect(try V2().decodeAction(json) == expected)
    }

    @Test("due shorthand usage errors", arguments: [
        ("due", "usage: due ID [MS]"),
        ("due   ", "usage: due ID [MS]"),
        ("due t1 tomorrow", "usage: due ID [MS], MS a number of milliseconds since 1970"),
        ("due t1 1 2", "usage: due ID [MS], MS a number of milliseconds since 1970"),
        ("due t1 NaN", "usage: due ID [MS], MS a number of milliseconds since 1970"),
        ("due t1 0x10", "usage: due ID [MS], MS a number of milliseconds since 1970"),
    ])
    func dueUsage(_ line: String, _ message: String) {
        #expect(throws: AppCodingError(message)) { try V2().command(line) }
    }

    @Test("the help lists due, and --list-apps says what version 2 adds")
    func help() {
        #expect(V2.commandHelp.contains("due ID [MS]"))
        #expect(!V1.commandHelp.contains("due"))
        #expect(V1.summary == "TodoMVC: add, toggle, edit, remove, clear completed, filter")
        #expect(V2.summary == "TodoMVC: add, toggle, edit, remove, clear completed, filter, due dates")
    }

    // MARK: - Version 1, frozen

    @Test("TodosV1App writes exactly the JSON todos@1 wrote: states, actions and digests")
    func v1Frozen() throws {
        let app = V1()
        #expect(app.encodeState(Self.v1Sample).canonicalString == Self.v1SampleJSON)
        #expect(app.digest(of: Self.v1Sample) == Self.v1SampleDigest)
        #expect(app.encodeState(app.initialState).canonicalString == #"{"filter":"all","todos":[]}"#)
        #expect(app.digest(of: app.initialState) == "f74b7f08f94506b5")
        #expect(try app.decodeState(JSON(parsing: Self.v1SampleJSON)) == Self.v1Sample)
        let forms: [(V1.Action, String)] = [
            (.add(id: "t1", title: "Buy milk", createdAt: 1_700_000_000_000),
             #"{"createdAt":1700000000000,"id":"t1","title":"Buy milk","type":"add"}"#),
            (.toggle(id: "t1"), #"{"id":"t1","type":"toggle"}"#),
            (.edit(id: "t1", title: "Buy oat milk"), #"{"id":"t1","title":"Buy oat milk","type":"edit"}"#),
            (.remove(id: "t1"), #"{"id":"t1","type":"remove"}"#),
            (.clearCompleted, #"{"type":"clearCompleted"}"#),
            (.setFilter(.completed), #"{"filter":"completed","type":"setFilter"}"#),
        ]
        for (action, canonical) in forms {
            #expect(app.encodeAction(action).canonicalString == canonical)
            #expect(try app.decodeAction(JSON(parsing: canonical)) == action)
        }
        // A due date in a state is not a todos@1 member: version 1 ignores it, as it always did.
        let withDue = try JSON(parsing: #"{"filter":"all","todos":[{"completed":false,"createdAt":0,"due":5,"id":"a","title":"t"}]}"#)
        #expect(try app.decodeState(withDue) == V1.State(todos: [V1.Todo(id: "a", title: "t", createdAt: 0)], filter: .all))
    }
}
