import SyncLocks
import Foundation
import SyncCore
import SyncPOSIX

extension Replica {

    /// Sends `action` to the hub and waits until it is sequenced and applied here.
    ///
    /// Skips local middleware (use `store.dispatch` for thunks and middleware).
    ///
    /// - Parameter action: The action.
    /// - Returns: The seq the hub gave it; the local state already includes it.
    /// - Throws: ``ReplicaError/rejected(_:)`` with the hub's code and message, or
    ///   ``ReplicaError/disconnected(_:)``.
    @discardableResult
    public func dispatch(_ action: App.Action) async throws(ReplicaError) -> UInt64 {
        try await dispatch(wire: wireAction(action))
    }

    /// The action as sent: the app's canonical bytes when it writes them directly, else its JSON.
    func wireAction(_ action: App.Action) -> WireAction { Self.wireAction(action, app: app) }

    /// ``wireAction(_:)`` for the store's terminal, which is built before the replica exists.
    static func wireAction(_ action: App.Action, app: App) -> WireAction {
        app.encodeAction(canonical: action).map { WireAction(canonical: $0) } ?? WireAction(app.encodeAction(action))
    }

    /// Sends a wire action as JSON and waits until it is sequenced and applied here.
    ///
    /// - Parameter json: The action's wire JSON; the hub decodes and validates it.
    /// - Returns: The seq the hub gave it.
    /// - Throws: ``ReplicaError/rejected(_:)`` (`bad-action` or `rejected`), or ``ReplicaError/disconnected(_:)``.
    @discardableResult
    public func dispatch(json: JSON) async throws(ReplicaError) -> UInt64 {
        try await dispatch(wire: WireAction(json))
    }

    /// ``dispatch(json:)`` for an action held as a ``WireAction``.
    func dispatch(wire: WireAction) async throws(ReplicaError) -> UInt64 {
        // A task cancelled before the call sends nothing; cancelled later, only the wait
        // ends: the dispatch stays pending (applied once, or refused).
        let id = link.makeID()
        return try await ReplyWaiter<UInt64>().wait { waiter in
            shared.withLock { $0.acks[id] = waiter }
            if let failure = submit(id: id, action: wire, awaited: true),
               let waiting = shared.withLock({ $0.acks.removeValue(forKey: id) }) {
                waiting.resume(throwing: failure)
            }
        }
    }

    /// Records a dispatch as pending (so it is re-sent on the same session after a reconnect)
    /// and sends it, or queues it while the link is being re-established.
    ///
    /// - Returns: Why it was not accepted (then nothing is pending and nothing will be sent).
    func submit(id: DispatchID, json: JSON, awaited: Bool) -> ReplicaError? {
        submit(id: id, action: WireAction(json), awaited: awaited)
    }

    /// ``submit(id:json:awaited:)`` for an action held as a ``WireAction`` (the canonical bytes
    /// an app wrote directly, sent as they are).
    func submit(id: DispatchID, action: WireAction, awaited: Bool) -> ReplicaError? {
        // Lock order: drain (when called from the store's terminal) → shared → link → upstream.
        // Under the store's dispatch lock nothing may wait (the reader needs that lock to
        // apply the answers), so the pending bound refuses instead; elsewhere the socket's
        // backlog holds the sender back.
        // Nor on the reader thread (a task on ``executor``): while it waited nothing would read
        // the hub's actions, and the hub would drop this replica as a slow consumer.
        let mayWait = !store.isDispatchingOnCurrentThread && !executor.isReaderThread
        switch shared.withLock({ $0.ledger.submit(id: id, action: action, awaited: awaited, bounded: !mayWait) }) {
        case .refuse(let error):
            return error
        case .queue:
            return nil
        case .send:
            let failure: ReplicaError
            switch link.current.sendDispatch(id: id, action: action, mayWait: mayWait) {
            case .sent:
                return nil
            case .tooLarge(let error):
                failure = .rejected(error)
            case .closed(let reason):
                // The link is dropping: kept pending, it is re-sent (on the same session, so
                // applied once) when the link is back, or failed when the replica ends.
                if reconnect.enabled, !shared.withLock({ $0.ledger.closing }) { return nil }
                failure = .disconnected(reason)
            }
            shared.withLock { _ = $0.ledger.unsent(id) }
            return failure
        }
    }

    /// Sends the dispatches made in `body` together: their frames are held until `body`
    /// returns, then written in one system call, on this thread.
    ///
    /// Like a Redis client's pipeline. Without it, dispatches made in a quick row are
    /// coalesced too, but by a writer thread that must wake up for them; a loop that knows
    /// it is sending several (a window freed at once, an import) saves that hand-off:
    ///
    /// ```swift
    /// replica.withBatchedSends {
    ///     for item in items { replica.store.dispatch(.add(item)) }
    /// }   // one write for all of them
    /// ```
    ///
    /// Sends from any thread during `body` wait for its end too, and at most 64 KiB is held:
    /// past that, frames go out as usual. Nothing else changes: each dispatch is still
    /// sequenced on its own, answered on its own, and refused on its own. Nested calls hold
    /// the frames until the outermost returns. So `body` must not wait for the answer to
    /// anything it dispatched (nor for anything another thread sends meanwhile): it has not
    /// left yet.
    ///
    /// - Parameter body: The code that dispatches.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws (the frames it sent are written all the same).
    public func withBatchedSends<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
        let upstream = link.current
        upstream.beginBatch()
        defer { upstream.endBatch() }
        return try body()
    }

    /// Sends `action` to the hub without waiting, skipping local middleware.
    ///
    /// The returned id names this dispatch in the events that follow: the
    /// ``ReplicaEvent/action(seq:origin:id:action:json:)`` whose `origin` is ``replicaID``, or a
    /// ``ReplicaEvent/rejected(id:error:)``.
    ///
    /// - Parameter action: The action.
    /// - Returns: The dispatch id.
    /// - Throws: ``ReplicaError/rejected(_:)`` with `frame-too-large` when the action is larger
    ///   than the hub accepts, ``ReplicaError/disconnected(_:)`` when the connection is gone;
    ///   nothing was sent in either case.
    @discardableResult
    public func send(_ action: App.Action) throws(ReplicaError) -> DispatchID {
        let id = link.makeID()
        if let failure = submit(id: id, action: wireAction(action), awaited: false) { throw failure }
        return id
    }

    /// Sends a wire action without waiting; see ``send(_:)``.
    ///
    /// - Parameter json: The action's wire JSON.
    /// - Returns: The dispatch id.
    /// - Throws: ``ReplicaError`` when nothing could be sent.
    @discardableResult
    public func send(json: JSON) throws(ReplicaError) -> DispatchID {
        let id = link.makeID()
        if let failure = submit(id: id, json: json, awaited: false) { throw failure }
        return id
    }

    /// Whether an action's `origin` is this replica: one of the replica ids it has held in the
    /// current history (each reconnection gets a new one).
    ///
    /// - Parameter origin: The `origin` of a sequenced action.
    /// - Returns: Whether this replica dispatched it.
    public func isOwn(origin: Int) -> Bool { shared.withLock { $0.ledger.isOwn(origin: origin) } }

    /// How many times this replica found its state differing from the hub's (a checkpoint
    /// mismatch, or an action it could not apply) and healed it by re-hydrating.
    public var divergences: Int { shared.withLock { $0.ledger.divergences } }

    /// This replica's newest agreeing digest comparison with the hub, as a `status` request
    /// reports it (`checked`, PROTOCOL.md §12): the seq, and how many times it re-hydrated
    /// after finding a difference. A comparison that differs is never reported, since the
    /// replica leaves that state at once.
    ///
    /// - Returns: The report, or `nil` before any comparison.
    func digestReport() -> DigestCheck? {
        let after = agreedAfter.load(ordering: .relaxed)
        guard after > 0 else { return nil }
        return DigestCheck(seq: after - 1, agreed: true, divergences: divergences)
    }

    /// Asks the hub for its status over this connection.
    ///
    /// - Returns: The status.
    /// - Throws: ``ReplicaError/disconnected(_:)`` when the connection is gone.
    public func status() async throws(ReplicaError) -> HubStatus {
        // Status replies come in request order; the reader resumes the first waiter. If the
        // send fails the connection is ending, and the reader's finish fails every waiter, so
        // nothing is unregistered here (it could not tell which waiter is this call's).
        try await awaitReply(
            register: { $0.statusWaiters.append($1) },
            send: { $0.send(.status(checked: digestReport())) },
            unregister: { _ in nil }
        )
    }

    /// Registers a continuation for a reply, sends the request, and waits.
    ///
    /// If the connection has already ended, or the send fails, the wait ends at once with
    /// ``ReplicaError/disconnected(_:)`` or the local refusal (and the registration is undone).
    /// The request goes out on the link that was current when the wait was registered: if that
    /// link drops meanwhile, the drop fails the wait and the request is never sent on the next
    /// link (where its answer would be taken for a later request's).
    private func awaitReply<T: Sendable>(
        register: @escaping (inout Shared, ReplyWaiter<T>) -> Void,
        send: (Upstream) -> Upstream.Outcome,
        unregister: @escaping (inout Shared) -> ReplyWaiter<T>?
    ) async throws(ReplicaError) -> T {
        // The waiter stays in its queue when cancelled (answers are matched by order); its
        // answer is then dropped.
        try await ReplyWaiter<T>().wait { waiter in
            var upstream: Upstream?
            let ended = shared.withLock { shared -> ReplicaError? in
                if let reason = shared.ledger.endReason { return reason }
                if case .reconnecting(let attempt) = shared.ledger.link {
                    return .disconnected("the link to the hub is being re-established (attempt \(attempt)); ask again once it is back")
                }
                register(&shared, waiter)
                // The link is replaced before the state says connected, so this is the
                // link the registration belongs to.
                upstream = link.current
                return nil
            }
            guard let upstream else {
                waiter.resume(throwing: ended ?? ReplicaError.disconnected("the link to the hub has ended"))
                return
            }
            if let failure = send(upstream).failure, let waiting = shared.withLock({ unregister(&$0) }) {
                waiting.resume(throwing: failure)
            }
        }
    }

    /// Waits until everything this replica sent before the call has been sequenced (or
    /// refused) by the hub and applied here.
    ///
    /// Use it after `store.dispatch` (fire-and-forget, e.g. a thunk) to read your own
    /// writes. It is one `sync` round trip, which costs the hub O(1) whatever the state's
    /// size: the hub answers a connection's messages in order and sends every action it
    /// sequenced before the answer.
    ///
    /// - Returns: The seq applied here when the barrier completed (at least the hub's seq
    ///   when it answered).
    /// - Throws: ``ReplicaError/disconnected(_:)`` when the connection is gone.
    @discardableResult
    public func sync() async throws(ReplicaError) -> UInt64 {
        // Replies come in request order; the reader resumes the first waiter. As for status,
        // a failed send means the connection is ending and the reader fails every waiter.
        _ = try await awaitReply(
            register: { $0.syncWaiters.append($1) },
            send: { $0.send(.sync(id: nil)) },
            unregister: { _ in nil }
        )
        return seq
    }

}
