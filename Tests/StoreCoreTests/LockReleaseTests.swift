import StoreCore
import SyncLocks
import Synchronization
import Testing

/// User code (a callback, a thunk, a token) must never be freed while the store holds a
/// lock: its `deinit` may release another token of the same store, which takes that lock.
@Suite("Releasing user code outside the store's locks")
struct LockReleaseTests {
    /// The reproduction from the review: a subscription whose callback owns another token.
    private func nested(_ store: Store<Count>) -> Subscription {
        let inner = store.subscribe { _ in }
        return store.subscribe { _ in _ = inner }
    }

    @Test("releasing a subscription whose callback owns another token of the same store")
    func nestedTokenRelease() {
        let store = Store(initialState: Count.State(), reducer: Count())
        var outer: Subscription? = nested(store)
        #expect(store.subscriberCount == 2)
        store.dispatch(.increment)
        outer = nil   // trapped with "Recursive call to lock Mutex" before the fix
        #expect(outer == nil)
        #expect(store.subscriberCount == 0)
    }

    @Test("cancelling it explicitly, and a selection used inside a subscribe callback")
    func nestedCancelAndSelection() {
        let store = Store(initialState: Count.State(), reducer: Count())
        let outer = nested(store)
        outer.cancel()
        #expect(store.subscriberCount == 0)

        let selection = store.selection { $0.count }
        let seen = Recorder<Int>()
        var token: Subscription? = store.subscribe { _ in seen.append(selection.value) }
        store.dispatch(.increment)
        #expect(seen.all == [1])
        token = nil
        #expect(token == nil)
        #expect(store.subscriberCount == 1)   // the selection's own subscription remains
    }

    @Test("a queued thunk that owns a token is released outside the lock")
    func queuedThunkOwningToken() {
        let store = Store(initialState: Count.State(), reducer: Count(), enhancer: .applyMiddleware(.thunk))
        // A subscriber dispatches a thunk re-entrantly (it is queued); the thunk owns the only
        // reference to a token, so running and dropping it releases that token.
        let once = Locked(true)
        let token = store.subscribe { _ in
            guard once.withLock({ value in defer { value = false }; return value }) else { return }
            let held = store.subscribe { _ in }
            store.dispatch(Thunk { _ in _ = held })
        }
        store.dispatch(.increment)
        #expect(store.subscriberCount == 1)
        _ = token
    }

    @Test("a selector that reads the store while subscribing does not lock it recursively")
    func selectorReadingStore() {
        let store = Store(initialState: Count.State(), reducer: Count())
        let token = store.subscribe(to: { _ in store.state.count }, sendCurrent: true) { _ in }
        store.dispatch(.increment)
        #expect(store.state.count == 1)
        _ = token
    }
}

/// Applies actions as one received batch (generic: the compiler crashes on the concrete
/// `throws(Never)` closure form here).
private func receiveAll<R: Reducer>(_ store: Store<R>, _ actions: [R.Action]) {
    store.receiveBatch { apply in
        for action in actions { try? apply(action) }
    }
}

@Suite("Batches of received actions")
struct ReceiveBatchTests {
    @Test("a dispatch a subscriber makes during a batch runs before the batch returns, even after its last action")
    func dispatchFromSubscriberDuringBatch() {
        let store = Store(initialState: 0, reducer: Reduce<Int, Int> { state, action in state += action })
        let reacted = Atomic<Bool>(false)
        let token = store.subscribe { state in
            // React once to the batch's last action with a dispatch of our own.
            if state == 3, !reacted.exchange(true, ordering: .relaxed) {
                store.dispatch(10)
            }
        }
        defer { token.cancel() }
        receiveAll(store, [1, 2])
        #expect(store.state == 13, "the reaction ran before receiveBatch returned")
    }
}
