import StoreCore
import Testing

/// The seeds' sign-up example: several slices, each with its own reducer and actions.
struct SignUp {
    struct Profile: Sendable, Equatable { var name = ""; var email = "" }
    enum ProfileAction: Sendable { case setName(String), setEmail(String) }
    struct ProfileReducer: Reducer {
        func reduce(into state: inout Profile, action: ProfileAction) {
            switch action {
            case .setName(let name): state.name = name
            case .setEmail(let email): state.email = email
            }
        }
    }
    struct Terms: Sendable, Equatable { var accepted = false }
    enum TermsAction: Sendable { case accept }
    struct State: Sendable, Equatable { var profile = Profile(); var terms = Terms(); var steps = 0 }
    enum Action: Sendable { case profile(ProfileAction), terms(TermsAction), step }

    static let reducer = CombineReducers<State, Action, Never>(
        Scope(state: \.profile, action: { if case .profile(let a) = $0 { a } else { nil } }, child: ProfileReducer())
            .eraseToAnyReducer(),
        Scope(state: \.terms, action: { if case .terms(let a) = $0 { a } else { nil } },
              child: Reduce<Terms, TermsAction> { terms, _ in terms.accepted = true })
            .eraseToAnyReducer(),
        Reduce<State, Action> { state, _ in state.steps += 1 }.eraseToAnyReducer()
    )
}

@Suite("Composition")
struct CompositionTests {
    @Test("each scoped reducer changes only its slice, for only its actions")
    func scopedSlices() {
        let store = Store(initialState: SignUp.State(), reducer: SignUp.reducer)
        store.dispatch(.profile(.setName("Ada")))
        #expect(store.state == SignUp.State(profile: .init(name: "Ada"), terms: .init(), steps: 1))
        store.dispatch(.terms(.accept))
        #expect(store.state == SignUp.State(profile: .init(name: "Ada"), terms: .init(accepted: true), steps: 2))
        store.dispatch(.step)
        #expect(store.state == SignUp.State(profile: .init(name: "Ada"), terms: .init(accepted: true), steps: 3))
    }

    @Test("a failing child stops the combination and its error surfaces")
    func failurePropagates() {
        struct Parent: Sendable, Equatable { var value = 0 }
        let combined = CombineReducers<Parent, Int, NonNegative.Refused>(
            Scope(state: \.value, action: { $0 }, child: NonNegative()).eraseToAnyReducer()
        )
        var state = Parent()
        #expect(throws: NonNegative.Refused(count: -3)) { try combined.reduce(into: &state, action: -3) }
        #expect(state == Parent())
    }
}
