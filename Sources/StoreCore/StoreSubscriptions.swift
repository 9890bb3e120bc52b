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
    public func subscribe(
        sendCurrent: Bool = false,
        _ callback: @escaping @Sendable (State) -> Void
    ) -> Subscription {
        withDrain {
            let (id, current) = core.withLock { core -> (UInt64, State) in
                let id = core.nextSubscriberID
                core.nextSubscriberID += 1
                core.subscribers.append(Subscriber(id: id, callback: callback))
                return (id, core.state)
            }
            if sendCurrent { callback(current) }
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
    public func subscribe<Value: Equatable & Sendable>(
        to selector: @escaping @Sendable (State) -> Value,
        sendCurrent: Bool = false,
        onChange: @escaping @Sendable (Value) -> Void
    ) -> Subscription {
        withDrain {
            let box = SelectionBox(last: selector(core.withLock { $0.state }))
            if sendCurrent { onChange(box.last) }
            return subscribe { state in
                let value = selector(state)
                if value != box.last {
                    box.last = value
                    onChange(value)
                }
            }
        }
    }

    /// An `AsyncStream` of states: the current one first, then one per applied action.
    ///
    /// - Parameter bufferingPolicy: What to keep when the consumer is slower than the
    ///   store. The default keeps every state, in order; `.bufferingNewest(1)` keeps only
    ///   the latest, which suits a UI.
    /// - Returns: The stream; it ends its subscription when the consumer stops iterating.
    public func states(
        bufferingPolicy: AsyncStream<State>.Continuation.BufferingPolicy = .unbounded
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
    ///   - bufferingPolicy: What to keep when the consumer is slower than the store.
    /// - Returns: The stream; repeats are skipped.
    public func values<Value: Equatable & Sendable>(
        of selector: @escaping @Sendable (State) -> Value,
        bufferingPolicy: AsyncStream<Value>.Continuation.BufferingPolicy = .unbounded
    ) -> AsyncStream<Value> {
        let (stream, continuation) = AsyncStream.makeStream(of: Value.self, bufferingPolicy: bufferingPolicy)
        let token = subscribe(to: selector, sendCurrent: true) { continuation.yield($0) }
        continuation.onTermination = { _ in token.cancel() }
        return stream
    }

    func unsubscribe(_ id: UInt64) {
        core.withLock { core in
            if let index = core.subscribers.firstIndex(where: { $0.id == id }) {
                core.subscribers[index].cancelled.store(true, ordering: .relaxed)
                core.subscribers.remove(at: index)
            }
        }
    }

    /// The number of live subscriptions (for tests and diagnostics).
    public var subscriberCount: Int { core.withLock { $0.subscribers.count } }
}

/// The last value a selector subscription delivered.
///
/// `@unchecked Sendable` is safe here: `last` is written once in `subscribe(to:…)` and
/// then only from that subscription's callback. Both run while the calling thread holds
/// the store's dispatch lock (`withDrain`), which serialises every callback of the store,
/// so no two threads ever touch `last` at the same time, and the lock's acquire/release
/// orders each access after the previous one.
final class SelectionBox<Value>: @unchecked Sendable {
    var last: Value
    init(last: Value) { self.last = last }
}
