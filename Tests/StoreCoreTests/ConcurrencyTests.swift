import StoreCore
import Testing
import Synchronization
import Dispatch

@Suite("Re-entrancy and threads")
struct ConcurrencyTests {
    @Test("a dispatch from a subscriber is queued and runs after the current one, in order")
    func subscriberDispatchQueued() {
        let store = Store(initialState: Count.State(), reducer: Count())
        let seen = Recorder<String>()
        let token = store.subscribe { [weak store] state in
            seen.append("saw \(state.count)")
            if state.count == 1 {
                store?.dispatch(.add(10))
                store?.dispatch(.add(100))
                seen.append("after nested dispatch, still \(store?.state.count ?? -1)")
            }
        }
        store.dispatch(.increment)
        #expect(seen.all == ["saw 1", "after nested dispatch, still 1", "saw 11", "saw 111"])
        #expect(store.state.count == 111)
        _ = token
    }

    @Test("a dispatch from middleware is queued behind the current one")
    func middlewareDispatchQueued() {
        let order = Recorder<String>()
        let echo = Middleware<Count.State, Count.Action> { context, next, input in
            if case .action(.increment) = input {
                context.send(.add(5))
                order.append("queued add, count \(context.getState().count)")
            }
            next(input)
            order.append("applied \(context.getState().count)")
        }
        let store = Store(initialState: Count.State(), reducer: Count(), enhancer: .applyMiddleware(echo))
        store.dispatch(.increment)
        #expect(order.all == ["queued add, count 0", "applied 1", "applied 6"])
    }

    @Test("dispatches from many threads are serialised: nothing is lost")
    func manyThreads() async {
        let store = Store(initialState: Count.State(), reducer: Count(), enhancer: .applyMiddleware(.thunk))
        let calls = Atomic<Int>(0)
        let token = store.subscribe { _ in calls.add(1, ordering: .relaxed) }
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    for _ in 0..<1_000 { store.dispatch(.increment) }
                }
            }
        }
        #expect(store.state.count == 8_000)
        #expect(calls.load(ordering: .relaxed) == 8_000)
        _ = token
    }

    @Test("when dispatch returns on another thread, its action has been applied")
    func dispatchIsSynchronousAcrossThreads() async {
        // Each thread owns one slot that no other thread touches, so "my last dispatch is
        // visible when dispatch returns" can only hold if dispatch really is synchronous:
        // a dispatch that returned early (queued, or still being applied by another thread)
        // would leave the slot behind.
        let store = Store(initialState: [Int](repeating: 0, count: 4), reducer: Slots())
        let token = store.subscribe { state in
            // A slow subscriber on one thread must not let another thread's dispatch return early.
            if state.reduce(0, +) % 100 == 0 { for _ in 0..<1_000 { _ = store.reducer } }
        }
        await withTaskGroup(of: Int.self) { group in
            for slot in 0..<4 {
                group.addTask {
                    var lagging = 0
                    for expected in 1...500 {
                        store.dispatch(slot)
                        if store.state[slot] != expected { lagging += 1 }
                    }
                    return lagging
                }
            }
            for await lagging in group { #expect(lagging == 0) }
        }
        #expect(store.state == [500, 500, 500, 500])
        _ = token
    }
}

/// Four counters; an action names the one to increment.
private struct Slots: Reducer {
    func reduce(into state: inout [Int], action: Int) { state[action] += 1 }
}
