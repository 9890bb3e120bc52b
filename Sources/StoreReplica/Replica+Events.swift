import SyncLocks
import Foundation
import SyncCore
import SyncPOSIX

extension Replica {

    /// Calls `callback` on the reader thread for each event, in order, after the action is applied.
    ///
    /// - Parameter callback: Receives each event; keep it short.
    /// - Returns: The token; events stop when it is cancelled or released.
    public func observeEvents(_ callback: @escaping @Sendable (ReplicaEvent<App.Action>) -> Void) -> Subscription {
        let id = shared.withLock { shared -> Int in
            defer { shared.nextObserver += 1 }
            shared.observers.append(Observer(id: shared.nextObserver, callback: callback))
            return shared.nextObserver
        }
        return Subscription { [weak self] in
            // The removed callback is released after the lock: its captures may include
            // another token of this replica, whose release takes the same lock.
            let removed = self?.shared.withLock { shared -> [Observer] in
                guard let index = shared.observers.firstIndex(where: { $0.id == id }) else { return [] }
                return [shared.observers.remove(at: index)]
            }
            withExtendedLifetime(removed) {}
        }
    }

    /// Calls `callback` on the reader thread for each action applied here, in seq order, after
    /// it is applied: its seq, origin, dispatch id and the decoded action. Cheaper than
    /// ``observeEvents(_:)`` when the action's JSON is not needed: no `JSON` value is made for
    /// it (with only these observers, an app with a canonical decoder, such as the json app,
    /// reads each action straight from the bytes).
    ///
    /// - Parameter callback: Receives each applied action; keep it short.
    /// - Returns: The token; reports stop when it is cancelled or released.
    public func observeActions(_ callback: @escaping @Sendable (AppliedAction<App.Action>) -> Void) -> Subscription {
        let id = shared.withLock { shared -> Int in
            defer { shared.nextObserver += 1 }
            shared.actionObservers.append(ActionObserver(id: shared.nextObserver, callback: callback))
            return shared.nextObserver
        }
        return Subscription { [weak self] in
            // Released after the lock, as in observeEvents.
            let removed = self?.shared.withLock { shared -> [ActionObserver] in
                guard let index = shared.actionObservers.firstIndex(where: { $0.id == id }) else { return [] }
                return [shared.actionObservers.remove(at: index)]
            }
            withExtendedLifetime(removed) {}
        }
    }

    /// The default bound of ``events(limit:)``.
    public static var defaultEventLimit: Int { 65_536 }

    /// An `AsyncStream` of events; it finishes after the `disconnected` event.
    ///
    /// The stream buffers at most `limit` events for a consumer that falls behind. It never
    /// skips one: if the consumer falls further behind, the stream ends after the last event
    /// that fit (the replica itself carries on; iterate faster, raise the limit, or use
    /// ``observeEvents(_:)``).
    ///
    /// - Parameter limit: The most events held for the consumer.
    /// - Returns: The stream: every event, in order, up to the bound.
    public func events(limit: Int = defaultEventLimit) -> AsyncStream<ReplicaEvent<App.Action>> {
        let (stream, continuation) = AsyncStream.makeStream(
            of: ReplicaEvent<App.Action>.self, bufferingPolicy: .bufferingOldest(max(1, limit)))
        let token = observeEvents { event in
            if case .dropped = continuation.yield(event) {
                continuation.finish()
                return
            }
            if case .disconnected = event { continuation.finish() }
        }
        continuation.onTermination = { _ in token.cancel() }
        if let reason = shared.withLock({ $0.ledger.endReason }) {
            continuation.yield(.disconnected(reason))
            continuation.finish()
        }
        return stream
    }

    /// Waits until the connection ends.
    ///
    /// - Returns: Why it ended.
    public func waitUntilDisconnected() async -> ReplicaError {
        await withCheckedContinuation { (continuation: CheckedContinuation<ReplicaError, Never>) in
            let ended = shared.withLock { shared -> ReplicaError? in
                if let reason = shared.ledger.endReason { return reason }
                shared.closeWaiters.append(continuation)
                return nil
            }
            if let ended { continuation.resume(returning: ended) }
        }
    }

    /// Closes the connection (and stops reconnecting); pending dispatches fail with
    /// ``ReplicaError/disconnected(_:)``.
    public func close() {
        shared.withLock { $0.ledger.closing = true }
        let upstream = link.current
        upstream.closeLocally()
        upstream.shutdown()
        wakeReconnect.signal()
        // A reader that never started now starts, reads end-of-file, and cleans up.
        startReading()
    }

    // MARK: - Reader

    /// Starts applying the hub's actions (once; later calls do nothing).
    ///
    /// Only needed after `attach(…, startReading: false)`. Actions the hub sequenced in the
    /// meantime wait in the socket and are applied, and reported to observers, in order.
    public func startReading() {
        guard let decoder = pendingDecoder.withLock({ value -> FrameDecoder? in
            defer { value = nil }
            return value
        }) else { return }
        let thread = Thread { [self] in
            setCurrentThreadName("storesync-read")   // for top -H, perf and /proc
            self.runConnection(decoder: decoder)
        }
        thread.name = "storesync-read"
        thread.start()
    }
}
