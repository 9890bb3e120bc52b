import BuiltinApps
import StoreSyncTesting
import SyncCore
import Testing

@Suite("StoreSyncTesting: TestStore and DeterminismCheck on the built-in apps")
struct TestingKitTests {
    @Test("TestStore asserts the exact change of each counter action")
    func counterExhaustive() {
        let store = TestStore(initialState: CounterApp().initialState, reducer: CounterApp())
        store.send(.increment) { $0.count = 1 }
        store.send(.setLimitText("5")) { $0.limitText = "5" }
        store.send(.setIncrementing(false)) {
            $0.isIncrementing = false
            $0.limitText = ""            // toggling clears the limit (seed 000)
        }
        store.send(.decrement) { $0.count = 0 }
        #expect(store.state == CounterApp.State(count: 0, isIncrementing: false, limitText: ""))
    }

    @Test("TestStore fails on an unasserted change, an unexpected refusal, and a refusal that did not come")
    func failuresAreRecorded() {
        let counter = TestStore(initialState: CounterApp().initialState, reducer: CounterApp())
        withKnownIssue("the change to count is not asserted") {
            counter.send(.increment)
        }
        let todos = TestStore(initialState: TodosApp().initialState, reducer: TodosApp())
        todos.send(.add(id: "t1", title: "milk", createdAt: 1)) {
            $0.todos = [TodosApp.Todo(id: "t1", title: "milk", completed: false, createdAt: 1)]
        }
        todos.sendRefused(.add(id: "t1", title: "again", createdAt: 2)) { failure in
            #expect(failure.description.contains("t1"))
        }
        withKnownIssue("a refusal nobody expected") {
            todos.send(.toggle(id: "nope"))
        }
        withKnownIssue("an expected refusal that did not come") {
            todos.sendRefused(.toggle(id: "t1"))
        }
    }

    @Test("the built-in apps are deterministic, also through the wire")
    func builtinsAreDeterministic() throws {
        #expect(DeterminismCheck.check(CounterApp(), actions: [.increment, .setLimitText("3"), .setIncrementing(false), .decrement]) == nil)
        #expect(DeterminismCheck.check(CodableCounterApp(), actions: [.increment, .setLimitText("é"), .decrement]) == nil)
        #expect(DeterminismCheck.check(TodosApp(), actions: [
            .add(id: "a", title: "one", createdAt: 1.5), .toggle(id: "a"), .edit(id: "a", title: "uno"),
            .add(id: "b", title: "two", createdAt: 2), .clearCompleted, .toggle(id: "missing"),
        ]) == nil)
        let json = JSONApp()
        let actions = try ["set /a 1", "set /b {\"x\":[1,2]}", "increment /a 2", "append /b/x 3", "remove /b"].map { line in
            guard case .action(let wire) = try json.command(line) else { throw AppCodingError("not an action: \(line)") }
            return try json.decodeAction(wire)
        }
        #expect(DeterminismCheck.check(json, actions: actions) == nil)
    }

    @Test("seed 004's randomElement() in a reducer is caught, with the action that diverged")
    func randomReducerIsCaught() {
        let divergence = DeterminismCheck.check(Seed004Colors(), actions: [.pickSomeColor, .pickSomeColor, .pickSomeColor])
        #expect(divergence != nil, "a reducer calling randomElement() must be caught")
        #expect(divergence?.description.contains("pickSomeColor") == true, "\(String(describing: divergence))")
    }
}

/// Seed 004's mistake: the reducer picks a random value itself (not deterministic).
struct Seed004Colors: SyncApp {
    typealias State = [String]
    enum Action: Sendable { case pickSomeColor }
    static let name = "colors"
    static let version = "1"
    var initialState: [String] { [] }
    func reduce(into state: inout [String], action: Action) {
        // 64 colours: two copies agree by chance with probability 1/64 per action.
        state.append("color-\((0..<64).randomElement() ?? 0)")
    }
    func decodeAction(_ json: JSON) throws(AppCodingError) -> Action { .pickSomeColor }
    func encodeAction(_ action: Action) -> JSON { ["type": "pickSomeColor"] }
    func encodeState(_ state: [String]) -> JSON { .array(state.map { .string($0) }) }
    func decodeState(_ json: JSON) throws(AppCodingError) -> [String] { json.arrayValue?.compactMap(\.stringValue) ?? [] }
    func describe(_ failure: Never) -> String {}
    func command(_ line: String) throws(AppCodingError) -> AppCommand<[String], Action> { .action(encodeAction(.pickSomeColor)) }
}

/// An app whose shorthand hook is written with plain `throws` (once a silent near miss: it
/// compiled beside the default and was never called).
struct PlainThrowsApp: SyncApp {
    enum Action: Sendable { case bump }
    static let name = "plain"
    static let version = "1"
    var initialState: Int { 0 }
    func reduce(into state: inout Int, action: Action) { state += 1 }
    func decodeAction(_ json: JSON) throws(AppCodingError) -> Action { .bump }
    func encodeAction(_ action: Action) -> JSON { ["type": "bump"] }
    func encodeState(_ state: Int) -> JSON { JSON(state) }
    func decodeState(_ json: JSON) throws(AppCodingError) -> Int { json.intValue ?? 0 }
    func describe(_ failure: Never) -> String {}
    struct NotAWord: Error {}
    func command(_ line: String) throws -> AppCommand<Int, Action> {
        guard line == "bump" else { throw NotAWord() }
        return .action(encodeAction(.bump))
    }
}

@Suite("The shorthand hook")
struct ShorthandHookTests {
    /// Calls the hook the way replica-cli does: through the protocol.
    func viaProtocol<App: SyncApp>(_ app: App, _ line: String) throws -> AppCommand<App.State, App.Action> {
        try app.command(line)
    }

    @Test("a hook written with plain throws is the one replica-cli calls")
    func plainThrowsIsCalled() throws {
        guard case .action(let wire) = try viaProtocol(PlainThrowsApp(), "bump") else {
            Issue.record("expected an action")
            return
        }
        #expect(wire == ["type": "bump"])
        #expect(throws: PlainThrowsApp.NotAWord.self) { try viaProtocol(PlainThrowsApp(), "jump") }
        // The default (no hook) still takes JSON.
        guard case .action(let json) = try viaProtocol(JSONApp(), #"{"type":"remove","path":"/a"}"#) else {
            Issue.record("expected an action")
            return
        }
        #expect(json["type"] == "remove")
    }
}

@Suite("A Codable app's help")
struct CodableHelpTests {
    @Test(":help lists each action's JSON shape from the case table")
    func shapes() {
        #expect(CodableCounterApp.commandHelp == """
              {"type":"increment"}
              {"type":"decrement"}
              {"type":"setIncrementing","value":…}
              {"type":"setLimitText","text":…}
            """)
    }
}

@Suite("A fingerprint from the app's wire shapes")
struct ShapeDigestTests {
    @Test("shapeDigest changes with the actions' or the state's shape, not with values")
    func shapes() {
        let base = CodableCounterApp.shapeDigest(of: CodableCounterApp.State())
        #expect(base.count == 8 && base.allSatisfy(\.isHexDigit))
        // Values do not matter; the digest is stable.
        #expect(CodableCounterApp.shapeDigest(of: CodableCounterApp.State(count: 7, isIncrementing: false, limitText: "5")) == base)
        #expect(CodableCounterApp.shapeDigest(of: CodableCounterApp.State()) == base)
        // Another app's shapes give another digest.
        #expect(WideShapes.shapeDigest(of: WideShapes.State()) != base)
    }
}

/// A Codable app with a state of another shape (one member) and one action case.
struct WideShapes: CodableSyncApp {
    struct State: Codable, Equatable, Sendable { var total = 0 }
    enum Action: TaggedEnumCodable, Equatable, Sendable {
        case add(amount: Int)
        static let taggedCases = TaggedCases<Action>(.case("add", Action.add, "amount"))
    }
    static let name = "wideshapes"
    static let version = "1"
    var initialState: State { State() }
    func reduce(into state: inout State, action: Action) {
        if case .add(let amount) = action { state.total &+= amount }
    }
}
