import BuiltinApps
import SyncCore
import Testing

/// Keys, pointers and ids compare by Unicode scalars in every built-in app, so a replica in
/// another language (which never normalizes) computes the same state and digest.
@Suite("Built-in apps: strings that differ only in normalization stay distinct")
struct ScalarIdentityTests {
    static let precomposed = "\u{E9}"
    static let decomposed = "e\u{301}"

    @Test("json app: set /é then set /e\u{301} keeps two members")
    func jsonAppKeys() throws {
        let app = JSONApp()
        var state = app.initialState
        for (key, value) in [(Self.precomposed, 1), (Self.decomposed, 2)] {
            let action = try app.decodeAction(["type": "set", "path": .string("/" + key), "value": JSON(value)])
            try app.reduce(into: &state, action: action)
        }
        #expect(state.objectValue?.count == 2)
        #expect(state[Self.precomposed] == 1 && state[Self.decomposed] == 2)
        // The digest a client that keeps both keys (any non-Swift JSON library) computes.
        let expected = try JSON(parsing: #"{"\#(Self.decomposed)":2,"\#(Self.precomposed)":1}"#)
        #expect(app.digest(of: state) == Digest.of(expected))
    }

    @Test("todos app: ids that differ only in normalization are two todos")
    func todoIDs() throws {
        let app = TodosApp()
        var state = app.initialState
        try app.reduce(into: &state, action: .add(id: Self.precomposed, title: "one", createdAt: 1))
        try app.reduce(into: &state, action: .add(id: Self.decomposed, title: "two", createdAt: 2))
        #expect(state.todos.count == 2)
        try app.reduce(into: &state, action: .toggle(id: Self.decomposed))
        #expect(state.todos.map(\.completed) == [false, true])
        #expect(throws: TodosApp.Failure.self) {
            try app.reduce(into: &state, action: .add(id: Self.decomposed, title: "dup", createdAt: 3))
        }
        // A welcome with both ids decodes; the same id twice is still refused.
        let encoded = app.encodeState(state)
        #expect(try app.decodeState(encoded) == state)
    }

    @Test("states that differ only in normalization are not equal (skip-repeats fires)")
    func stateEquality() {
        #expect(CounterApp.State(limitText: Self.precomposed) != CounterApp.State(limitText: Self.decomposed))
        #expect(TodosApp.Todo(id: Self.precomposed, title: "t", createdAt: 0)
            != TodosApp.Todo(id: Self.decomposed, title: "t", createdAt: 0))
    }
}
