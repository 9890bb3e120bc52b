import StoreCore
import Testing
import Observation
import Synchronization

struct Form: Reducer {
    struct State: Sendable, Equatable { var text = ""; var on = false; var edits = 0 }
    enum Action: Sendable, Equatable { case setText(String), setOn(Bool) }
    func reduce(into state: inout State, action: Action) {
        switch action {
        case .setText(let text): state.text = text
        case .setOn(let on): state.on = on
        }
        state.edits += 1
    }
}

@Suite("Bindings")
struct BindingTests {
    @Test("a binding reads the store and its writes dispatch the action")
    func twoWay() {
        let dispatched = Recorder<Form.Action>()
        let spy = Middleware<Form.State, Form.Action> { _, next, input in
            if let action = input.action { dispatched.append(action) }
            next(input)
        }
        let store = Store(initialState: Form.State(), reducer: Form(), enhancer: .applyMiddleware(spy))
        let text = store.binding(\.text, send: { .setText($0) })
        let toggle = store.binding(\.on, send: { .setOn($0) })
        #expect(text.wrappedValue == "")
        text.wrappedValue = "hello"
        toggle.wrappedValue = true
        #expect(text.wrappedValue == "hello")
        #expect(toggle.wrappedValue)
        #expect(dispatched.all == [.setText("hello"), .setOn(true)])
        #expect(store.state.edits == 2)
    }

    @Test("a write the middleware swallows does not change the bound value")
    func swallowedWrite() {
        let readOnly = Middleware<Form.State, Form.Action> { _, _, _ in }
        let store = Store(initialState: Form.State(), reducer: Form(), enhancer: .applyMiddleware(readOnly))
        let text = store.binding(\.text, send: { .setText($0) })
        text.wrappedValue = "ignored"
        #expect(text.wrappedValue == "")
    }
}

@Suite("History")
struct HistoryTests {
    @Test("history is off by default")
    func offByDefault() {
        let store = Store(initialState: Count.State(), reducer: Count())
        store.dispatch(.increment)
        #expect(store.history.isEmpty)
        #expect(!store.jump(to: 0))
        #expect(store.replay() == nil)
    }

    @Test("replay at the starting point returns the starting state")
    func replayAtStart() {
        let store = Store(initialState: Count.State(count: 5), reducer: Count(), history: .bounded(4))
        #expect(store.replay() == Count.State(count: 5))
        store.dispatch(.increment)
        #expect(store.jump(to: 0))
        #expect(store.replay() == Count.State(count: 5))
    }

    @Test("records (action, state after), jumps, replays, and stays bounded")
    func record() {
        let store = Store(initialState: Count.State(), reducer: Count(), history: .bounded(4))
        let seen = Recorder<Int>()
        let token = store.subscribe { seen.append($0.count) }
        store.dispatch(.increment)
        store.dispatch(.add(10))
        #expect(store.history.map(\.action) == [nil, .increment, .add(10)])
        #expect(store.history.map(\.state.count) == [0, 1, 11])
        #expect(store.replay() == Count.State(count: 11))

        #expect(store.jump(to: 1))
        #expect(store.state.count == 1)
        #expect(store.historyCursor == 1)
        #expect(store.replay() == Count.State(count: 1))
        #expect(seen.all == [1, 11, 1])

        // A new action after a jump drops the entries past the cursor.
        store.dispatch(.add(5))
        #expect(store.history.map(\.state.count) == [0, 1, 6])

        // Bounded: the oldest entries go; the first kept entry is the new starting point.
        store.dispatch(.increment)
        store.dispatch(.increment)
        #expect(store.history.map(\.state.count) == [1, 6, 7, 8])
        #expect(store.replay() == Count.State(count: 8))
        #expect(!store.jump(to: 4))
        _ = token
    }
}

@Suite("Observation")
struct ObservationTests {
    @Test("reading state inside withObservationTracking registers a change on dispatch")
    func storeIsObservable() {
        let store = Store(initialState: Count.State(), reducer: Count())
        let changed = Atomic<Int>(0)
        withObservationTracking {
            _ = store.state
        } onChange: {
            changed.add(1, ordering: .relaxed)
        }
        #expect(changed.load(ordering: .relaxed) == 0)
        store.dispatch(.increment)
        #expect(changed.load(ordering: .relaxed) == 1)
    }

    @Test("a batch of received actions is one change for Observation; subscribers still hear each action, and what they dispatch runs")
    func batchIsOneChange() {
        // A reducer that can refuse (a batch's `apply` of a `Never`-failing one trips a
        // Swift 6.3 compiler crash in a test's closure).
        let store = Store(initialState: 0, reducer: NonNegative())
        let changed = Atomic<Int>(0)
        func track() {
            withObservationTracking { _ = store.state } onChange: { changed.add(1, ordering: .relaxed) }
        }
        track()
        let heard = Recorder<Int>()
        let token = store.subscribe { state in
            heard.append(state)
            if state == 3 { store.dispatch(10) }
        }
        store.receiveBatch { apply in
            for _ in 0..<5 { try? apply(1) }
            try? apply(-100)   // refused: nothing changes, nobody hears it
        }
        // The subscriber's dispatch at 3 ran right after that action, inside the batch.
        #expect(heard.all == [1, 2, 3, 13, 14, 15])
        #expect(store.state == 15)
        #expect(changed.load(ordering: .relaxed) == 1)
        // An empty batch announces nothing; the next real one is seen by a new tracking.
        track()
        store.receiveBatch { _ in }
        #expect(changed.load(ordering: .relaxed) == 1)
        store.receiveBatch { apply in try? apply(-1) }
        #expect(changed.load(ordering: .relaxed) == 2)
        #expect(store.state == 14)
        token.cancel()
    }

    @Test("a tracking registered in the middle of a batch (a view re-rendering) hears of the batch's later actions")
    func trackingDuringBatch() {
        let store = Store(initialState: 0, reducer: NonNegative())
        let changed = Atomic<Int>(0)
        let seen = Recorder<Int>()
        func track() {
            withObservationTracking { seen.append(store.state) } onChange: { changed.add(1, ordering: .relaxed) }
        }
        track()
        store.receiveBatch { apply in
            try? apply(1)
            track()          // sees 1, mid-batch
            try? apply(1)
            try? apply(1)
        }
        #expect(seen.all == [0, 1])
        #expect(changed.load(ordering: .relaxed) == 2, "the second tracking must hear of the actions after it")
        // Registered after the batch's last action but before its end: told at the end.
        track()
        store.receiveBatch { apply in
            try? apply(1)
            track()
        }
        #expect(changed.load(ordering: .relaxed) == 4)
        #expect(store.state == 4)
    }

    @Test("a selection notifies observers only when its value changes")
    func selectionObservesOnlyChanges() {
        let store = Store(initialState: Count.State(), reducer: Count())
        let count = store.selection { $0.count }
        let changed = Atomic<Int>(0)
        func track() {
            withObservationTracking { _ = count.value } onChange: { changed.add(1, ordering: .relaxed) }
        }
        track()
        store.dispatch(.noop)
        #expect(changed.load(ordering: .relaxed) == 0)
        store.dispatch(.increment)
        #expect(changed.load(ordering: .relaxed) == 1)
        #expect(count.value == 1)
    }
}
