import StoreCore
import Testing

@Suite("Reducer and Store")
struct StoreTests {
    @Test("reducers are value-typed, pure functions applied by dispatch")
    func dispatchAppliesReducer() {
        let store = Store(initialState: Count.State(), reducer: Count())
        store.dispatch(.increment)
        store.dispatch(.increment)
        store.dispatch(.decrement)
        store.dispatch(.add(10))
        #expect(store.state == Count.State(count: 11))
    }

    @Test("the state a caller holds is a copy: changing it never changes the store")
    func stateIsReadOnly() {
        let store = Store(initialState: Count.State(), reducer: Count())
        var copy = store.state
        copy.count = 99
        #expect(store.state.count == 0)
        // `store.state = …` does not compile: `state` is get-only (principle 2 by construction).
    }

    @Test("a refused action leaves the state unchanged and reaches onError")
    func throwingReducer() {
        let errors = Recorder<NonNegative.Refused>()
        let store = Store(initialState: 1, reducer: NonNegative(), onError: { error, _ in errors.append(error) })
        store.dispatch(-1)
        store.dispatch(-1)
        #expect(store.state == 0)
        #expect(errors.all == [NonNegative.Refused(count: -1)])
    }

    @Test("closure reducers and type erasure behave like the reducer they wrap")
    func closureReducer() {
        let reduce = Reduce<Int, Int> { state, action in state += action }
        var state = 1
        reduce.reduce(into: &state, action: 2)
        reduce.eraseToAnyReducer().reduce(into: &state, action: 3)
        #expect(state == 6)
        let refuse = TryReduce<Int, Int, NonNegative.Refused> { state, action throws(NonNegative.Refused) in
            guard action >= 0 else { throw NonNegative.Refused(count: action) }
            state += action
        }
        #expect(throws: NonNegative.Refused(count: -1)) { try refuse.reduce(into: &state, action: -1) }
        #expect(state == 6)
    }

    @Test("subscribers are called after every applied action with the new state")
    func subscribe() {
        let store = Store(initialState: Count.State(), reducer: Count())
        let seen = Recorder<Int>()
        let token = store.subscribe { seen.append($0.count) }
        store.dispatch(.increment)
        store.dispatch(.increment)
        #expect(seen.all == [1, 2])
        token.cancel()
        store.dispatch(.increment)
        #expect(seen.all == [1, 2])
        #expect(store.subscriberCount == 0)
    }

    @Test("a released token unsubscribes")
    func tokenDeinitUnsubscribes() {
        let store = Store(initialState: Count.State(), reducer: Count())
        let seen = Recorder<Int>()
        do {
            let token = store.subscribe { seen.append($0.count) }
            store.dispatch(.increment)
            #expect(!token.isCancelled)
        }
        store.dispatch(.increment)
        #expect(seen.all == [1])
        #expect(store.subscriberCount == 0)
    }

    @Test("sendCurrent delivers the current state first")
    func sendCurrent() {
        let store = Store(initialState: Count.State(count: 7), reducer: Count())
        let seen = Recorder<Int>()
        let token = store.subscribe(sendCurrent: true) { seen.append($0.count) }
        store.dispatch(.increment)
        #expect(seen.all == [7, 8])
        _ = token
    }

    @Test("a selector subscription fires only when the selected value changes")
    func selectorSkipsRepeats() {
        let store = Store(initialState: Count.State(), reducer: Count())
        let seen = Recorder<Int>()
        let token = store.subscribe(to: { $0.count }) { seen.append($0) }
        store.dispatch(.noop)
        store.dispatch(.increment)
        store.dispatch(.noop)
        store.dispatch(.add(0))
        store.dispatch(.increment)
        #expect(seen.all == [1, 2])
        _ = token
    }

    @Test("a key-path selector works the same way")
    func keyPathSelector() {
        let store = Store(initialState: Count.State(), reducer: Count())
        let seen = Recorder<Int>()
        let token = store.subscribe(to: \.count) { seen.append($0) }
        store.dispatch(.noop)
        store.dispatch(.increment)
        #expect(seen.all == [1])
        _ = token
    }

    @Test("states() streams the current state and then every new one, in order")
    func stateStream() async {
        let store = Store(initialState: Count.State(), reducer: Count())
        let stream = store.states()
        store.dispatch(.increment)
        store.dispatch(.increment)
        var seen: [Int] = []
        for await state in stream {
            seen.append(state.count)
            if seen.count == 3 { break }
        }
        #expect(seen == [0, 1, 2])
    }

    @Test("values(of:) streams a selected value without repeats, and ends its subscription")
    func valueStream() async {
        let store = Store(initialState: Count.State(), reducer: Count())
        do {
            let stream = store.values(of: { $0.count })
            store.dispatch(.noop)
            store.dispatch(.increment)
            store.dispatch(.noop)
            store.dispatch(.increment)
            var seen: [Int] = []
            for await value in stream {
                seen.append(value)
                if seen.count == 3 { break }
            }
            #expect(seen == [0, 1, 2])
        }
        // Breaking out of the loop ends the stream, which cancels its subscription.
        #expect(store.subscriberCount == 0)
    }
}
