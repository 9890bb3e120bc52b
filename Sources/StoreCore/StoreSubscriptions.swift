import SyncLocks
import Synchronization

extension Store {
    /// Calls `callback` with the new state after every applied action.
    ///
    /// Callbacks run on the dispatching thread, in subscription order, after the state
    /// has changed. A dispatch made from a callback is queued (see ``Store``).
    ///
    /// - Parameters:
    ///   - sendCurrent: Also call `callback` once, right away, with the current state.
    ///   - callback: Receives each new state.
    /// - Returns: The token; the subscription lasts until it is cancelled or released.
    @inlinable public func subscribe(
        sendCurrent: Bool = false,
        _ callback: @escaping @Sendable (State) -> Void
    ) -> Subscription {
        add(sendCurrent: sendCurrent, callback) { id, _ in Subscriber(id: id, callback: callback) }
    }

    /// Registers a subscriber built from its id and the current state, atomically with
    /// respect to dispatches, and returns its token.
    @inlinable func add(
        sendCurrent: Bool,
        _ sendCurrentValue: @Sendable (State) -> Void,
        _ make: (UInt64, State) -> Subscriber
    ) -> Subscription {
        withDrain {
            // Holding the dispatch lock, the state cannot change until the subscriber is in;
            // `make` (which runs the caller's selector) runs outside `core`, so a selector that
            // reads the store does not lock it recursively.
            let (id, current) = core.withLock { core -> (UInt64, State) in
                defer { core.nextSubscriberID += 1 }
                return (core.nextSubscriberID, core.state)
            }
            let subscriber = make(id, current)
            core.withLock { $0.subscribers.append(subscriber) }
            if sendCurrent { sendCurrentValue(current) }
            return Subscription { [weak self] in self?.unsubscribe(id) }
        }
    }

    /// Calls `onChange` only when the selected value changes (skip-repeats).
    ///
    /// This answers seed 002's caveat: a view that shows one field re-renders when that
    /// field changes, not on every action. Prefer a closure selector on hot paths; a key
    /// path works too (`store.subscribe(to: \.count) { … }`).
    ///
    /// - Parameters:
    ///   - selector: Picks the value out of the state; must be pure and cheap.
    ///   - sendCurrent: Also call `onChange` once, right away, with the current value.
    ///   - onChange: Receives each new, different value.
    /// - Returns: The token; the subscription lasts until it is cancelled or released.
    @inlinable
    public func subscribe<Value: Equatable & Sendable>(
        to selector: @escaping @Sendable (State) -> Value,
        sendCurrent: Bool = false,
        onChange: @escaping @Sendable (Value) -> Void
    ) -> Subscription {
        // Inlinable so the comparison is specialised for `Value` in the caller's module:
        // unspecialised, each selector costs generic metadata look-ups per action.
        add(sendCurrent: sendCurrent, { onChange(selector($0)) }) { id, state in
            SelectorSubscriber(id: id, selector: selector, last: selector(state), onChange: onChange)
        }
    }

    /// How many states (or selected values) a stream keeps by default for a consumer that
    /// is slower than the store: past it the oldest are skipped, never the newest, so the
    /// stream always ends up at the current state and memory stays bounded.
    public static var defaultStreamBuffer: Int { 64 }

    /// An `AsyncStream` of states: the current one first, then one per applied action.
    ///
    /// - Parameter bufferingPolicy: What to keep when the consumer is slower than the
    ///   store. The default keeps the newest ``defaultStreamBuffer`` states (a consumer
    ///   further behind skips the oldest; the latest is never dropped); `.bufferingNewest(1)`
    ///   keeps only the latest, which suits a UI; `.unbounded` keeps every state, at the cost
    ///   of unbounded memory if the consumer stalls.
    /// - Returns: The stream; it ends its subscription when the consumer stops iterating.
    public func states(
        bufferingPolicy: AsyncStream<State>.Continuation.BufferingPolicy = .bufferingNewest(defaultStreamBuffer)
    ) -> AsyncStream<State> {
        let (stream, continuation) = AsyncStream.makeStream(of: State.self, bufferingPolicy: bufferingPolicy)
        let token = subscribe(sendCurrent: true) { continuation.yield($0) }
        continuation.onTermination = { _ in token.cancel() }
        return stream
    }

    /// An `AsyncStream` of a selected value: the current one first, then each change.
    ///
    /// - Parameters:
    ///   - selector: Picks the value out of the state.
    ///   - bufferingPolicy: What to keep when the consumer is slower than the store; by
    ///     default the newest ``defaultStreamBuffer`` values (the latest is never dropped).
    /// - Returns: The stream; repeats are skipped.
    public func values<Value: Equatable & Sendable>(
        of selector: @escaping @Sendable (State) -> Value,
        bufferingPolicy: AsyncStream<Value>.Continuation.BufferingPolicy = .bufferingNewest(defaultStreamBuffer)
    ) -> AsyncStream<Value> {
        let (stream, continuation) = AsyncStream.makeStream(of: Value.self, bufferingPolicy: bufferingPolicy)
        let token = subscribe(to: selector, sendCurrent: true) { continuation.yield($0) }
        continuation.onTermination = { _ in token.cancel() }
        return stream
    }

    @usableFromInline func unsubscribe(_ id: UInt64) {
        let removed = core.withLock { core -> Subscriber? in
            guard let index = core.subscribers.firstIndex(where: { $0.id == id }) else { return nil }
            core.subscribers[index].cancelled.store(true, ordering: .relaxed)
            return core.subscribers.remove(at: index)
        }
        // Released here, after the lock: the callback's captures may own another token of
        // this store, whose release takes the same lock (and would trap inside it).
        withExtendedLifetime(removed) {}
    }

    /// The number of live subscriptions (for tests and diagnostics).
    public var subscriberCount: Int { core.withLock { $0.subscribers.count } }
}
