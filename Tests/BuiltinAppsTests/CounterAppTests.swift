import BuiltinApps
import SyncCore
import SyncLocks
import Synchronization
import Testing

/// Seed 000's counter app, reproduced through a real store with the thunk middleware.
@Suite("CounterApp")
struct CounterAppTests {
    typealias State = CounterApp.State
    typealias Action = CounterApp.Action

    let app = CounterApp()

    /// Every input that reaches a middleware: a plain action, or `nil` for a thunk.
    final class Spy: Sendable {
        private let items = Locked<[Action?]>([])
        var all: [Action?] { items.withLock { $0 } }
        var middleware: Middleware<State, Action> {
            Middleware { _, next, input in
                self.items.withLock { $0.append(input.action) }
                next(input)
            }
        }
    }

    func makeStore(spy: Spy? = nil) -> Store<CounterApp> {
        let middlewares: [Middleware<State, Action>] = (spy.map { [$0.middleware] } ?? []) + [.thunk]
        return Store(initialState: app.initialState, reducer: app, enhancer: .applyMiddleware(middlewares))
    }

    func actionJSON(_ command: AppCommand<State, Action>) -> JSON? {
        if case .action(let json) = command { return json }
        return nil
    }

    // MARK: - Store

    @Test("fingerprint and initial state")
    func fingerprintAndInitialState() {
        #expect(CounterApp.fingerprint == "counter@1")
        #expect(CounterApp.name == "counter")
        #expect(CounterApp.version == "1")
        #expect(app.initialState == State(count: 0, isIncrementing: true, limitText: ""))
        #expect(makeStore().state == State(count: 0, isIncrementing: true, limitText: ""))
    }

    @Test("increment and decrement change the count by one")
    func incrementDecrement() {
        let store = makeStore()
        store.dispatch(.increment)
        #expect(store.state == State(count: 1, isIncrementing: true, limitText: ""))
        store.dispatch(.increment)
        #expect(store.state == State(count: 2, isIncrementing: true, limitText: ""))
        store.dispatch(.decrement)
        #expect(store.state == State(count: 1, isIncrementing: true, limitText: ""))
        store.dispatch(.decrement)
        store.dispatch(.decrement)
        #expect(store.state == State(count: -1, isIncrementing: true, limitText: ""))
    }

    @Test("the isIncrementing binding reads state and dispatches setIncrementing")
    func incrementingBinding() {
        let spy = Spy()
        let store = makeStore(spy: spy)
        let binding = store.binding(\.isIncrementing, send: { .setIncrementing($0) })
        #expect(binding.wrappedValue == true)
        binding.wrappedValue = false
        #expect(store.state == State(count: 0, isIncrementing: false, limitText: ""))
        #expect(binding.wrappedValue == false)
        // A dispatch made elsewhere is reflected by the binding.
        store.dispatch(.setIncrementing(true))
        #expect(binding.wrappedValue == true)
        #expect(spy.all == [.setIncrementing(false), .setIncrementing(true)])
    }

    @Test("the limitText binding reads state and dispatches setLimitText")
    func limitBinding() {
        let spy = Spy()
        let store = makeStore(spy: spy)
        let binding = store.binding(\.limitText, send: { .setLimitText($0) })
        #expect(binding.wrappedValue == "")
        binding.wrappedValue = "5"
        #expect(store.state == State(count: 0, isIncrementing: true, limitText: "5"))
        #expect(binding.wrappedValue == "5")
        store.dispatch(.setLimitText("12"))
        #expect(binding.wrappedValue == "12")
        #expect(spy.all == [.setLimitText("5"), .setLimitText("12")])
    }

    @Test("toggling the direction clears the limit text (seed behaviour)")
    func toggleClearsLimit() {
        let store = makeStore()
        let up = store.binding(\.isIncrementing, send: { .setIncrementing($0) })
        let limit = store.binding(\.limitText, send: { .setLimitText($0) })
        store.dispatch(.increment)
        limit.wrappedValue = "7"
        #expect(store.state == State(count: 1, isIncrementing: true, limitText: "7"))
        up.wrappedValue = false
        #expect(store.state == State(count: 1, isIncrementing: false, limitText: ""))
        #expect(limit.wrappedValue == "")
        limit.wrappedValue = "3"
        #expect(store.state == State(count: 1, isIncrementing: false, limitText: "3"))
        // Setting the same direction again still clears the limit.
        up.wrappedValue = false
        #expect(store.state == State(count: 1, isIncrementing: false, limitText: ""))
    }

    @Test("step with no limit always steps in the current direction")
    func stepWithoutLimit() {
        let store = makeStore()
        for _ in 0..<5 { store.dispatch(CounterApp.step) }
        #expect(store.state == State(count: 5, isIncrementing: true, limitText: ""))
        store.dispatch(.setIncrementing(false))
        for _ in 0..<8 { store.dispatch(CounterApp.step) }
        #expect(store.state == State(count: -3, isIncrementing: false, limitText: ""))
    }

    @Test("step stops at exactly the limit, up to 3 then down to -2")
    func stepStopsAtLimit() {
        let store = makeStore()
        let up = store.binding(\.isIncrementing, send: { .setIncrementing($0) })
        let limit = store.binding(\.limitText, send: { .setLimitText($0) })
        limit.wrappedValue = "3"
        store.dispatch(CounterApp.step)
        #expect(store.state == State(count: 1, isIncrementing: true, limitText: "3"))
        store.dispatch(CounterApp.step)
        #expect(store.state == State(count: 2, isIncrementing: true, limitText: "3"))
        store.dispatch(CounterApp.step)
        #expect(store.state == State(count: 3, isIncrementing: true, limitText: "3"))
        for _ in 0..<10 { store.dispatch(CounterApp.step) }
        #expect(store.state == State(count: 3, isIncrementing: true, limitText: "3"))

        up.wrappedValue = false
        #expect(store.state == State(count: 3, isIncrementing: false, limitText: ""))
        limit.wrappedValue = "-2"
        #expect(store.state == State(count: 3, isIncrementing: false, limitText: "-2"))
        for expected in [2, 1, 0, -1, -2] {
            store.dispatch(CounterApp.step)
            #expect(store.state == State(count: expected, isIncrementing: false, limitText: "-2"))
        }
        for _ in 0..<10 { store.dispatch(CounterApp.step) }
        #expect(store.state == State(count: -2, isIncrementing: false, limitText: "-2"))
    }

    @Test("step does nothing when the count is already past the limit")
    func stepPastLimit() {
        let store = makeStore()
        for _ in 0..<5 { store.dispatch(.increment) }
        store.dispatch(.setLimitText("3"))
        store.dispatch(CounterApp.step)
        #expect(store.state == State(count: 5, isIncrementing: true, limitText: "3"))
        store.dispatch(.setIncrementing(false))
        store.dispatch(.setLimitText("9"))
        store.dispatch(CounterApp.step)
        #expect(store.state == State(count: 5, isIncrementing: false, limitText: "9"))
    }

    @Test("a non-numeric limit means no limit")
    func nonNumericLimit() {
        let store = makeStore()
        store.dispatch(.setLimitText("abc"))
        for _ in 0..<4 { store.dispatch(CounterApp.step) }
        #expect(store.state == State(count: 4, isIncrementing: true, limitText: "abc"))
        store.dispatch(.setIncrementing(false))
        store.dispatch(.setLimitText("abc"))
        for _ in 0..<6 { store.dispatch(CounterApp.step) }
        #expect(store.state == State(count: -2, isIncrementing: false, limitText: "abc"))
    }

    @Test("the step thunk dispatches only plain increment and decrement")
    func stepDispatchesPlainActions() {
        let spy = Spy()
        let store = makeStore(spy: spy)
        store.dispatch(.setLimitText("2"))
        for _ in 0..<4 { store.dispatch(CounterApp.step) }
        #expect(store.state == State(count: 2, isIncrementing: true, limitText: "2"))
        store.dispatch(.setIncrementing(false))
        store.dispatch(.setLimitText("1"))
        for _ in 0..<3 { store.dispatch(CounterApp.step) }
        #expect(store.state == State(count: 1, isIncrementing: false, limitText: "1"))
        // `nil` is a thunk reaching the spy; each step that moved is followed by its plain action.
        #expect(spy.all == [
            .setLimitText("2"),
            nil, .increment,
            nil, .increment,
            nil,
            nil,
            .setIncrementing(false),
            .setLimitText("1"),
            nil, .decrement,
            nil,
            nil,
        ])
    }

    // MARK: - Wire codec

    static let allActions: [Action] = [
        .increment, .decrement, .setIncrementing(true), .setIncrementing(false),
        .setLimitText(""), .setLimitText("5"), .setLimitText("-2"), .setLimitText("abc \"quoted\" ü"),
    ]

    @Test("encodeAction and decodeAction round trip", arguments: allActions)
    func actionRoundTrip(_ action: Action) throws {
        #expect(try app.decodeAction(app.encodeAction(action)) == action)
        let text = app.encodeAction(action).canonicalString
        #expect(try app.decodeAction(JSON(parsing: text)) == action)
    }

    @Test("actions have exact JSON forms", arguments: [
        (Action.increment, #"{"type":"increment"}"#),
        (.decrement, #"{"type":"decrement"}"#),
        (.setIncrementing(true), #"{"type":"setIncrementing","value":true}"#),
        (.setIncrementing(false), #"{"type":"setIncrementing","value":false}"#),
        (.setLimitText("5"), #"{"type":"setLimitText","text":"5"}"#),
    ])
    func actionJSONForms(_ action: Action, _ text: String) throws {
        let expected = try JSON(parsing: text)
        #expect(app.encodeAction(action) == expected)
        #expect(app.encodeAction(action).canonicalString == expected.canonicalString)
        #expect(try app.decodeAction(expected) == action)
    }

    @Test("canonical action text sorts members")
    func canonicalActionText() {
        #expect(app.encodeAction(.increment).canonicalString == #"{"type":"increment"}"#)
        #expect(app.encodeAction(.setIncrementing(true)).canonicalString == #"{"type":"setIncrementing","value":true}"#)
        #expect(app.encodeAction(.setLimitText("5")).canonicalString == #"{"text":"5","type":"setLimitText"}"#)
    }

    @Test("encodeState gives the exact canonical JSON")
    func encodeState() {
        #expect(app.encodeState(app.initialState).canonicalString == #"{"count":0,"isIncrementing":true,"limitText":""}"#)
        #expect(app.encodeState(State(count: -7, isIncrementing: false, limitText: "x"))
            .canonicalString == #"{"count":-7,"isIncrementing":false,"limitText":"x"}"#)
    }

    @Test("decodeState inverts encodeState", arguments: [
        State(), State(count: 42, isIncrementing: false, limitText: "-2"), State(count: -9_007_199_254_740_992, isIncrementing: true, limitText: "abc"),
    ])
    func stateRoundTrip(_ state: State) throws {
        #expect(try app.decodeState(app.encodeState(state)) == state)
        #expect(try app.decodeState(JSON(parsing: app.encodeState(state).canonicalString)) == state)
    }

    @Test("decodeState refuses missing or ill-typed members", arguments: [
        #"{"isIncrementing":true,"limitText":""}"#,
        #"{"count":0,"limitText":""}"#,
        #"{"count":0,"isIncrementing":true}"#,
        #"{"count":0.5,"isIncrementing":true,"limitText":""}"#,
        #"{"count":"0","isIncrementing":true,"limitText":""}"#,
        #"{"count":0,"isIncrementing":1,"limitText":""}"#,
        #"{"count":0,"isIncrementing":true,"limitText":5}"#,
        #"[0,true,""]"#,
        #"null"#,
    ])
    func decodeStateErrors(_ text: String) throws {
        let json = try JSON(parsing: text)
        #expect(throws: AppCodingError(#"a counter state is {"count":int,"isIncrementing":bool,"limitText":string}"#)) {
            try app.decodeState(json)
        }
    }

    @Test("decodeAction refuses unknown types, ill-typed members and non-objects", arguments: [
        (#"{"type":"jump"}"#, #"unknown counter action "jump"; expected increment, decrement, setIncrementing or setLimitText"#),
        (#"{"type":"INCREMENT"}"#, #"unknown counter action "INCREMENT"; expected increment, decrement, setIncrementing or setLimitText"#),
        (#"{"type":"setIncrementing","value":"yes"}"#, #"action member "value" must be a boolean, not string"#),
        (#"{"type":"setIncrementing","value":1}"#, #"action member "value" must be a boolean, not number"#),
        (#"{"type":"setIncrementing"}"#, #"action "setIncrementing" needs a boolean member "value""#),
        (#"{"type":"setLimitText","text":5}"#, #"action member "text" must be a string, not number"#),
        (#"{"type":"setLimitText","text":null}"#, #"action member "text" must be a string, not null"#),
        (#"{"type":"setLimitText"}"#, #"action "setLimitText" needs a string member "text""#),
        (#"{"type":1}"#, #"an action needs a string member "type""#),
        (#"{}"#, #"an action needs a string member "type""#),
        (#"["increment"]"#, #"an action must be a JSON object, not array"#),
        (#""increment""#, #"an action must be a JSON object, not string"#),
    ])
    func decodeActionErrors(_ text: String, _ message: String) throws {
        let json = try JSON(parsing: text)
        #expect(throws: AppCodingError(message)) { try app.decodeAction(json) }
    }

    // MARK: - Shorthand

    @Test("shorthand words give the wire actions", arguments: [
        ("increment", Action.increment), ("inc", .increment), ("+", .increment),
        ("decrement", .decrement), ("dec", .decrement), ("-", .decrement),
        ("up", .setIncrementing(true)), ("down", .setIncrementing(false)),
        ("limit 5", .setLimitText("5")), ("  limit   -2  ", .setLimitText("-2")),
        ("limit", .setLimitText("")), ("limit two words", .setLimitText("two words")),
    ])
    func shorthand(_ line: String, _ expected: Action) throws {
        let json = try #require(actionJSON(try app.command(line)))
        #expect(json == app.encodeAction(expected))
        #expect(try app.decodeAction(json) == expected)
    }

    @Test("step is local work: the step thunk")
    func stepCommand() throws {
        for line in ["step", "update"] {
            let command = try app.command(line)
            guard case .local(let thunk) = command else {
                Issue.record("\(line) should be .local")
                continue
            }
            let spy = Spy()
            let store = makeStore(spy: spy)
            store.dispatch(.setLimitText("1"))
            store.dispatch(thunk)
            store.dispatch(thunk)
            #expect(store.state == State(count: 1, isIncrementing: true, limitText: "1"))
            #expect(spy.all == [.setLimitText("1"), nil, .increment, nil])
        }
    }

    @Test("a JSON line is passed through as the action")
    func jsonLine() throws {
        let json = try #require(actionJSON(try app.command(#"{"type":"setLimitText","text":"9"}"#)))
        #expect(json == ["type": "setLimitText", "text": "9"])
        #expect(try app.decodeAction(json) == .setLimitText("9"))
    }

    @Test("garbage throws AppCodingError")
    func garbage() throws {
        let error = try #require(throws: AppCodingError.self) { try app.command("jump around") }
        #expect(error.message.hasPrefix("unknown command \""))
        #expect(throws: AppCodingError(#"an action is a JSON object with a string "type", e.g. {"type":"increment"}"#)) {
            try app.command("[1,2]")
        }
        #expect(throws: AppCodingError(#"an action is a JSON object with a string "type", e.g. {"type":"increment"}"#)) {
            try app.command(#"{"kind":"increment"}"#)
        }
        #expect(throws: AppCodingError.self) { try app.command("") }
    }
}

@Test("a line that starts like JSON but is broken gets the parser's message")
func brokenJSONLine() throws {
    let error = try #require(throws: AppCodingError.self) { try CounterApp().command(#"{"type":"#) }
    #expect(error.message.hasPrefix("not a valid JSON action: invalid JSON at byte"))
}
