import BuiltinApps
import SyncCore
import SyncLocks
import Synchronization
import Testing

@Suite("TodosApp")
struct TodosAppTests {
    typealias State = TodosApp.State
    typealias Action = TodosApp.Action
    typealias Todo = TodosApp.Todo
    typealias Failure = TodosApp.Failure

    let app = TodosApp()

    /// Three todos, the middle one done.
    static let sample = State(todos: [
        Todo(id: "a", title: "Buy milk", completed: false, createdAt: 1_700_000_000_000),
        Todo(id: "b", title: "Walk dog", completed: true, createdAt: 1_700_000_000_001),
        Todo(id: "c", title: "Write tests", completed: false, createdAt: 1_700_000_000_002.5),
    ], filter: .all)

    func actionJSON(_ command: AppCommand<State, Action>) -> JSON? {
        if case .action(let json) = command { return json }
        return nil
    }

    // MARK: - Reducer

    @Test("fingerprint and initial state")
    func initial() {
        #expect(TodosApp.fingerprint == "todos@2")
        #expect(app.initialState == State(todos: [], filter: .all))
        #expect(app.initialState.visible == [])
    }

    @Test("every action gives the exact next state")
    func everyAction() throws {
        var state = app.initialState
        try app.reduce(into: &state, action: .add(id: "a", title: "Buy milk", createdAt: 1000))
        #expect(state == State(todos: [Todo(id: "a", title: "Buy milk", completed: false, createdAt: 1000)], filter: .all))

        try app.reduce(into: &state, action: .add(id: "b", title: "Walk dog", createdAt: 2000))
        #expect(state == State(todos: [
            Todo(id: "a", title: "Buy milk", completed: false, createdAt: 1000),
            Todo(id: "b", title: "Walk dog", completed: false, createdAt: 2000),
        ], filter: .all))

        try app.reduce(into: &state, action: .toggle(id: "a"))
        #expect(state == State(todos: [
            Todo(id: "a", title: "Buy milk", completed: true, createdAt: 1000),
            Todo(id: "b", title: "Walk dog", completed: false, createdAt: 2000),
        ], filter: .all))

        try app.reduce(into: &state, action: .toggle(id: "a"))
        #expect(state == State(todos: [
            Todo(id: "a", title: "Buy milk", completed: false, createdAt: 1000),
            Todo(id: "b", title: "Walk dog", completed: false, createdAt: 2000),
        ], filter: .all))

        try app.reduce(into: &state, action: .edit(id: "b", title: "Walk the dog"))
        #expect(state == State(todos: [
            Todo(id: "a", title: "Buy milk", completed: false, createdAt: 1000),
            Todo(id: "b", title: "Walk the dog", completed: false, createdAt: 2000),
        ], filter: .all))

        try app.reduce(into: &state, action: .add(id: "c", title: " spaced ", createdAt: 3000))
        try app.reduce(into: &state, action: .toggle(id: "b"))
        try app.reduce(into: &state, action: .toggle(id: "c"))
        #expect(state == State(todos: [
            Todo(id: "a", title: "Buy milk", completed: false, createdAt: 1000),
            Todo(id: "b", title: "Walk the dog", completed: true, createdAt: 2000),
            Todo(id: "c", title: " spaced ", completed: true, createdAt: 3000),
        ], filter: .all))

        try app.reduce(into: &state, action: .setFilter(.completed))
        #expect(state == State(todos: [
            Todo(id: "a", title: "Buy milk", completed: false, createdAt: 1000),
            Todo(id: "b", title: "Walk the dog", completed: true, createdAt: 2000),
            Todo(id: "c", title: " spaced ", completed: true, createdAt: 3000),
        ], filter: .completed))

        try app.reduce(into: &state, action: .clearCompleted)
        #expect(state == State(todos: [
            Todo(id: "a", title: "Buy milk", completed: false, createdAt: 1000),
        ], filter: .completed))

        try app.reduce(into: &state, action: .clearCompleted)
        #expect(state == State(todos: [
            Todo(id: "a", title: "Buy milk", completed: false, createdAt: 1000),
        ], filter: .completed))

        try app.reduce(into: &state, action: .setFilter(.active))
        #expect(state == State(todos: [
            Todo(id: "a", title: "Buy milk", completed: false, createdAt: 1000),
        ], filter: .active))

        try app.reduce(into: &state, action: .remove(id: "a"))
        #expect(state == State(todos: [], filter: .active))

        try app.reduce(into: &state, action: .setFilter(.all))
        #expect(state == State(todos: [], filter: .all))
    }

    @Test("remove takes out exactly the one todo, keeping order")
    func removeMiddle() throws {
        var state = Self.sample
        try app.reduce(into: &state, action: .remove(id: "b"))
        #expect(state == State(todos: [Self.sample.todos[0], Self.sample.todos[2]], filter: .all))
    }

    @Test("a todo id freed by remove can be added again")
    func reuseRemovedID() throws {
        var state = Self.sample
        try app.reduce(into: &state, action: .remove(id: "a"))
        try app.reduce(into: &state, action: .add(id: "a", title: "Again", createdAt: 5))
        #expect(state == State(todos: [
            Self.sample.todos[1], Self.sample.todos[2],
            Todo(id: "a", title: "Again", completed: false, createdAt: 5),
        ], filter: .all))
    }

    @Test("every rejection throws the exact failure and leaves the state unchanged", arguments: [
        (Action.add(id: "a", title: "Again", createdAt: 1), Failure.duplicateID("a")),
        (.add(id: "z", title: "", createdAt: 1), .emptyTitle),
        (.add(id: "z", title: "   ", createdAt: 1), .emptyTitle),
        (.add(id: "z", title: " \t\n ", createdAt: 1), .emptyTitle),
        (.add(id: "a", title: "", createdAt: 1), .emptyTitle),
        (.toggle(id: "z"), .unknownID("z")),
        (.toggle(id: ""), .unknownID("")),
        (.edit(id: "z", title: "New"), .unknownID("z")),
        (.edit(id: "a", title: ""), .emptyTitle),
        (.edit(id: "a", title: "  \t "), .emptyTitle),
        (.remove(id: "z"), .unknownID("z")),
        (.remove(id: "A"), .unknownID("A")),
    ])
    func rejections(_ action: Action, _ failure: Failure) {
        var state = Self.sample
        let before = state
        #expect(throws: failure) { try app.reduce(into: &state, action: action) }
        #expect(state == before)
        #expect(state == Self.sample)
    }

    @Test("rejections through a store reach onError and leave the state unchanged")
    func rejectionsThroughStore() {
        let failures = Failures()
        let store = Store(initialState: Self.sample, reducer: app, onError: { failure, action in
            failures.append(failure, action)
        })
        store.dispatch(.add(id: "b", title: "dup", createdAt: 0))
        store.dispatch(.toggle(id: "nope"))
        store.dispatch(.edit(id: "c", title: " "))
        #expect(store.state == Self.sample)
        #expect(failures.all == [
            .init(failure: .duplicateID("b"), action: .add(id: "b", title: "dup", createdAt: 0)),
            .init(failure: .unknownID("nope"), action: .toggle(id: "nope")),
            .init(failure: .emptyTitle, action: .edit(id: "c", title: " ")),
        ])
        store.dispatch(.toggle(id: "a"))
        #expect(store.state.todos[0] == Todo(id: "a", title: "Buy milk", completed: true, createdAt: 1_700_000_000_000))
    }

    @Test("failure descriptions")
    func failureDescriptions() {
        #expect(Failure.duplicateID("a").description == #"a todo with id "a" already exists; choose a new id"#)
        #expect(Failure.unknownID("z").description == #"no todo has id "z""#)
        #expect(Failure.emptyTitle.description == "a todo's title must not be empty")
        #expect(app.describe(.unknownID("z")) == #"no todo has id "z""#)
    }

    @Test("visible follows the filter")
    func visible() {
        var state = Self.sample
        #expect(state.visible == Self.sample.todos)
        state.filter = .active
        #expect(state.visible == [Self.sample.todos[0], Self.sample.todos[2]])
        state.filter = .completed
        #expect(state.visible == [Self.sample.todos[1]])
        #expect(State(todos: [], filter: .completed).visible == [])
        #expect(State(todos: [Self.sample.todos[1]], filter: .active).visible == [])
    }

    // MARK: - Codec

    static let allActions: [Action] = [
        .add(id: "t1", title: "Buy milk", createdAt: 1_700_000_000_000),
        .add(id: "t2", title: "with \"quotes\" and ü", createdAt: 0.5),
        .toggle(id: "t1"), .edit(id: "t1", title: "Buy oat milk"), .remove(id: "t1"), .clearCompleted,
        .setFilter(.all), .setFilter(.active), .setFilter(.completed),
    ]

    @Test("actions round trip through their JSON", arguments: allActions)
    func actionRoundTrip(_ action: Action) throws {
        let json = app.encodeAction(action)
        #expect(try app.decodeAction(json) == action)
        #expect(try app.decodeAction(JSON(parsing: json.canonicalString)) == action)
    }

    @Test("actions have the documented JSON forms", arguments: [
        (Action.add(id: "t1", title: "Buy milk", createdAt: 1_700_000_000_000),
         #"{"type":"add","id":"t1","title":"Buy milk","createdAt":1700000000000}"#),
        (.toggle(id: "t1"), #"{"type":"toggle","id":"t1"}"#),
        (.edit(id: "t1", title: "Buy oat milk"), #"{"type":"edit","id":"t1","title":"Buy oat milk"}"#),
        (.remove(id: "t1"), #"{"type":"remove","id":"t1"}"#),
        (.clearCompleted, #"{"type":"clearCompleted"}"#),
        (.setFilter(.active), #"{"type":"setFilter","filter":"active"}"#),
    ])
    func actionForms(_ action: Action, _ text: String) throws {
        #expect(app.encodeAction(action) == (try JSON(parsing: text)))
    }

    @Test("a state with several todos round trips, with exact JSON")
    func stateRoundTrip() throws {
        var state = Self.sample
        state.filter = .active
        let json = app.encodeState(state)
        #expect(json.canonicalString == #"{"filter":"active","todos":["#
            + #"{"completed":false,"createdAt":1700000000000,"id":"a","title":"Buy milk"},"#
            + #"{"completed":true,"createdAt":1700000000001,"id":"b","title":"Walk dog"},"#
            + #"{"completed":false,"createdAt":1700000000002.5,"id":"c","title":"Write tests"}]}"#)
        #expect(try app.decodeState(json) == state)
        #expect(try app.decodeState(JSON(parsing: json.canonicalString)) == state)
        #expect(try app.decodeState(app.encodeState(app.initialState)) == app.initialState)
        #expect(app.encodeState(app.initialState).canonicalString == #"{"filter":"all","todos":[]}"#)
    }

    @Test("decodeState refuses malformed states", arguments: [
        (#"{"todos":[]}"#, #"a todos state is {"todos":[…],"filter":"all|active|completed"}"#),
        (#"{"todos":[],"filter":"done"}"#, #"a todos state is {"todos":[…],"filter":"all|active|completed"}"#),
        (#"{"todos":{},"filter":"all"}"#, #"a todos state is {"todos":[…],"filter":"all|active|completed"}"#),
        (#"[]"#, #"a todos state is {"todos":[…],"filter":"all|active|completed"}"#),
        (#"{"todos":[{"id":"a","title":"t","completed":false}],"filter":"all"}"#,
         #"a todo is {"id":string,"title":string,"completed":bool,"createdAt":number}"#),
        (#"{"todos":[{"id":1,"title":"t","completed":false,"createdAt":0}],"filter":"all"}"#,
         #"a todo is {"id":string,"title":string,"completed":bool,"createdAt":number}"#),
        (#"{"todos":[{"id":"a","title":"t","completed":"no","createdAt":0}],"filter":"all"}"#,
         #"a todo is {"id":string,"title":string,"completed":bool,"createdAt":number}"#),
    ])
    func decodeStateErrors(_ text: String, _ message: String) throws {
        let json = try JSON(parsing: text)
        #expect(throws: AppCodingError(message)) { try app.decodeState(json) }
    }

    @Test("decodeAction refuses malformed actions", arguments: [
        (#"{"type":"add","id":"t1","title":"Buy milk"}"#,
         #"action "add" needs a number member "createdAt" (milliseconds since 1970, chosen by the dispatcher)"#),
        (#"{"type":"add","id":"t1","title":"Buy milk","createdAt":"now"}"#,
         #"action "add" needs a number member "createdAt" (milliseconds since 1970, chosen by the dispatcher)"#),
        (#"{"type":"add","title":"Buy milk","createdAt":1}"#, #"action "add" needs a string member "id""#),
        (#"{"type":"setFilter","filter":"done"}"#, #"filter "done" is not one of all, active, completed"#),
        (#"{"type":"setFilter","filter":"All"}"#, #"filter "All" is not one of all, active, completed"#),
        (#"{"type":"setFilter"}"#, #"action "setFilter" needs a string member "filter""#),
        (#"{"type":"toggle","id":7}"#, #"action member "id" must be a string, not number"#),
        (#"{"type":"edit","id":"t1"}"#, #"action "edit" needs a string member "title""#),
        (#"{"type":"purge"}"#,
         #"unknown todos action "purge"; expected add, toggle, edit, remove, clearCompleted, setFilter or setDue"#),
        (#"{"id":"t1"}"#, #"an action needs a string member "type""#),
        (#"42"#, #"an action must be a JSON object, not number"#),
    ])
    func decodeActionErrors(_ text: String, _ message: String) throws {
        let json = try JSON(parsing: text)
        #expect(throws: AppCodingError(message)) { try app.decodeAction(json) }
    }

    // MARK: - Shorthand

    @Test("add TITLE picks an id and a time and keeps the whole title")
    func addShorthand() throws {
        let json = try #require(actionJSON(try app.command("add Buy milk")))
        #expect(json["type"] == "add")
        #expect(json["title"] == "Buy milk")
        let id = try #require(json["id"]?.stringValue)
        #expect(!id.isEmpty)
        #expect(json["createdAt"]?.numberValue != nil)
        #expect(json.objectValue?.keys.sorted() == ["createdAt", "id", "title", "type"])
        guard case .add(let decodedID, let title, _) = try app.decodeAction(json) else {
            Issue.record("add should decode as .add")
            return
        }
        #expect(decodedID == id)
        #expect(title == "Buy milk")

        let spaced = try #require(actionJSON(try app.command("  add   Buy  oat milk  ")))
        #expect(spaced["title"] == "Buy  oat milk")
    }

    @Test("shorthand for toggle, edit, remove, clear and filter", arguments: [
        ("toggle ID", Action.toggle(id: "ID")),
        ("edit ID New title", .edit(id: "ID", title: "New title")),
        ("remove ID", .remove(id: "ID")),
        ("clear", .clearCompleted),
        ("filter all", .setFilter(.all)),
        ("filter active", .setFilter(.active)),
        ("filter completed", .setFilter(.completed)),
    ])
    func shorthand(_ line: String, _ expected: Action) throws {
        let json = try #require(actionJSON(try app.command(line)))
        #expect(json == app.encodeAction(expected))
        #expect(try app.decodeAction(json) == expected)
    }

    @Test("a JSON line is passed through")
    func jsonLine() throws {
        let json = try #require(actionJSON(try app.command(#"{"type":"toggle","id":"t9"}"#)))
        #expect(try app.decodeAction(json) == .toggle(id: "t9"))
    }

    @Test("shorthand usage errors", arguments: [
        ("add", "usage: add TITLE"),
        ("add   ", "usage: add TITLE"),
        ("toggle", "usage: toggle ID"),
        ("remove", "usage: remove ID"),
        ("edit x", "usage: edit ID TITLE"),
        ("edit", "usage: edit ID TITLE"),
        ("filter bogus", "usage: filter all|active|completed"),
        ("filter", "usage: filter all|active|completed"),
    ])
    func usageErrors(_ line: String, _ message: String) {
        #expect(throws: AppCodingError(message)) { try app.command(line) }
    }

    @Test("an unknown word is not JSON")
    func unknownWord() throws {
        let error = try #require(throws: AppCodingError.self) { try app.command("buy milk") }
        #expect(error.message == #"unknown command "buy"; give a shorthand command (:help lists them) or an action as a JSON object, {"type":…}"#)
    }
}

/// Records a store's refusals.
private final class Failures: Sendable {
    struct Entry: Equatable, Sendable {
        let failure: TodosApp.Failure
        let action: TodosApp.Action
    }
    private let entries = Locked<[Entry]>([])
    func append(_ failure: TodosApp.Failure, _ action: TodosApp.Action) {
        entries.withLock { $0.append(Entry(failure: failure, action: action)) }
    }
    var all: [Entry] { entries.withLock { $0 } }

    @Test("decodeState refuses two todos with the same id")
    func decodeStateDuplicateIDs() throws {
        let json = try JSON(parsing: #"{"filter":"all","todos":[{"id":"a","title":"x","completed":false,"createdAt":1},{"id":"a","title":"y","completed":true,"createdAt":2}]}"#)
        #expect(throws: AppCodingError(#"two todos have id "a"; ids are unique"#)) { try TodosApp().decodeState(json) }
    }
}
