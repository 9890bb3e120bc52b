import SyncCore

/// What a replica knows about its dispatches and its link, as a pure state machine: no lock,
/// no thread, no socket, no continuation — every decision of the reader and of `submit` is a
/// method here, tested alone (`ReplicaLedgerTests`).
///
/// - A dispatch is **pending** from ``submit(id:json:awaited:)`` until the hub answers it: its
///   own `action` (an `origin` this replica held in this history, and its id), a `reject`, or a
///   `duplicate`. Pending dispatches are re-sent, in their original order, after a reconnection.
/// - The **link** is `connected`, `reconnecting(attempt:)` (dispatches only queue, up to
///   ``maxPending``) or `disconnected` (everything is refused).
/// - After a **resumed** welcome the re-sends wait for the replay's end (the `sync` the reader
///   sent, ``resumeCompletion``): the replay may acknowledge some of them, and re-sending a
///   dispatch the hub may have forgotten (its session keeps a bounded window) would apply it
///   twice.
@usableFromInline
struct ReplicaLedger: Sendable {
    /// A dispatch waiting for its answer.
    @usableFromInline
    struct Pending: Sendable, Equatable {
        /// Its place in the order of this replica's dispatches.
        var order: Int
        /// The action as sent (its canonical bytes, or its JSON).
        var action: WireAction
        /// The action's wire JSON.
        var json: JSON { action.json }
        /// Whether someone awaits it (an async `dispatch`); otherwise a failure is reported.
        var awaited: Bool
    }

    /// What `submit` decides.
    enum Submission: Equatable {
        /// Recorded as pending: send it now.
        case send
        /// Recorded as pending: the link is being re-established; it goes with the re-sends.
        case queue
        /// Not recorded: refused for this reason.
        case refuse(ReplicaError)
    }

    private(set) var pending: [DispatchID: Pending] = [:]
    private var nextOrder = 0
    /// The replica ids this replica has held in the current history (its own actions' origins).
    @usableFromInline private(set) var ownReplicas: Set<Int> = []
    /// The history the local state belongs to.
    private(set) var history: String?
    /// The run id of the hub on the current connection.
    private(set) var hubID: String
    private(set) var link: LinkState = .connected
    /// Why the replica ended, once it has.
    private(set) var endReason: ReplicaError?
    /// How many times a divergence was healed by re-hydrating.
    private(set) var divergences = 0
    /// Set between a resumed welcome and the end of its replay: the change to report then.
    private(set) var resumeCompletion: ConnectionChange?
    /// Set by `close()`: no reconnection, and sends fail.
    var closing = false
    /// What the hub holds this replica's `hello` for (`waiting`), or what it could not hold it
    /// for (`app-ahead`), from then until the next welcome or the end.
    private(set) var waiting: WaitingNotice?
    /// The most dispatches pending at once (``ReconnectPolicy/maxPendingDispatches``).
    let maxPending: Int

    init(hubID: String, history: String?, replica: Int, maxPending: Int) {
        self.hubID = hubID
        self.history = history
        self.maxPending = max(1, maxPending)
        ownReplicas = [replica]
    }

    // MARK: Dispatching

    /// Records a dispatch as pending, unless the replica ended or too many already wait.
    ///
    /// - Parameters:
    ///   - id: The dispatch id.
    ///   - json: The action's wire JSON (kept to re-send after a reconnection).
    ///   - awaited: Whether an async `dispatch` awaits it.
    ///   - bounded: Whether ``maxPending`` applies while connected: it does for a sender that
    ///     cannot wait for the socket (the store's terminal, under the dispatch lock); a sender
    ///     that can is held back by the socket instead. While reconnecting it always applies.
    /// - Returns: Send, queue, or why it was refused (then nothing was recorded).
    mutating func submit(id: DispatchID, json: JSON, awaited: Bool, bounded: Bool = true) -> Submission {
        submit(id: id, action: WireAction(json), awaited: awaited, bounded: bounded)
    }

    /// ``submit(id:json:awaited:bounded:)`` for an action held as a ``WireAction``.
    mutating func submit(id: DispatchID, action: WireAction, awaited: Bool, bounded: Bool = true) -> Submission {
        if let endReason { return .refuse(endReason.refusalAfterEnd) }
        if pending.count >= maxPending {
            if case .reconnecting = link {
                return .refuse(.disconnected("\(pending.count) dispatches already wait for the link to the hub to come back (ReconnectPolicy.maxPendingDispatches); this one was not queued — retry later"))
            }
            if bounded {
                return .refuse(.disconnected("\(pending.count) dispatches already wait for the hub's answer (ReconnectPolicy.maxPendingDispatches) and this one was dispatched inside the store's dispatch, which cannot wait; it was not sent — dispatch from outside a subscriber, or wait for some to be acknowledged (sync()), then retry"))
            }
        }
        pending[id] = Pending(order: nextOrder, action: action, awaited: awaited)
        nextOrder += 1
        if case .reconnecting = link { return .queue }
        return .send
    }

    /// Forgets a dispatch whose send failed (it is reported to its caller instead).
    @discardableResult
    mutating func unsent(_ id: DispatchID) -> Pending? { pending.removeValue(forKey: id) }

    // MARK: The stream

    /// An `action` arrived: whether it answers one of this replica's pending dispatches.
    @usableFromInline
    mutating func sequenced(origin: Int, id: DispatchID) -> Pending? {
        guard ownReplicas.contains(origin) else { return nil }
        return pending.removeValue(forKey: id)
    }

    /// A `reject` arrived for `id`.
    @usableFromInline @discardableResult
    mutating func rejected(_ id: DispatchID) -> Pending? { pending.removeValue(forKey: id) }

    /// A `duplicate` arrived for `id`.
    @usableFromInline
    mutating func duplicate(_ id: DispatchID) -> Pending? { pending.removeValue(forKey: id) }

    /// Whether `origin` is one of this replica's ids in this history.
    func isOwn(origin: Int) -> Bool { ownReplicas.contains(origin) }

    // MARK: The link

    /// The link dropped (`divergence`: it is dropped on purpose, to re-hydrate).
    mutating func dropped(divergence: Bool) {
        resumeCompletion = nil
        link = .reconnecting(attempt: 1)
        if divergence { divergences += 1 }
    }

    /// The hub holds the `hello` until an upgrade (`fromHub`), or cannot hold it now (`app-ahead`).
    ///
    /// - Parameters:
    ///   - notice: What it waits for.
    ///   - fromHub: Whether the hub sent it; a notice made from `app-ahead` is reported once per wait.
    /// - Returns: Whether to report it.
    mutating func held(_ notice: WaitingNotice, fromHub: Bool) -> Bool {
        guard endReason == nil, fromHub || waiting == nil else { return false }
        waiting = notice
        return true
    }

    /// Another attempt to reconnect begins.
    mutating func reconnecting(attempt: Int) { link = .reconnecting(attempt: attempt) }

    /// A welcome arrived on a new connection.
    ///
    /// - Parameters:
    ///   - hub: The hub's run id.
    ///   - replica: This connection's replica id.
    ///   - history: The welcome's history.
    ///   - resumed: Whether it resumed (the re-sends then wait for the replay's end).
    ///   - change: What to report once the re-sends are done.
    /// - Returns: The pending dispatches made against another history, in order: they are
    ///   no longer pending, and must fail with `history-changed` (never sent to this hub).
    @discardableResult
    mutating func welcomed(hub: String, replica: Int, history newHistory: String?, resumed: Bool,
                           change: ConnectionChange) -> [DispatchID] {
        hubID = hub
        waiting = nil
        var orphaned: [DispatchID] = []
        if let newHistory, newHistory != history {
            // Another history: replica ids of the old one say nothing about this one, and a
            // dispatch decided against the old history's state must not be applied in this
            // one (an in-memory hub restarted empty, a hub pointed at another log).
            if history != nil {
                orphaned = pending.sorted { $0.value.order < $1.value.order }.map(\.key)
                for id in orphaned { pending[id] = nil }
            }
            history = newHistory
            ownReplicas = []
        }
        ownReplicas.insert(replica)
        if resumed { resumeCompletion = change }
        return orphaned
    }

    /// The replay after a resumed welcome ended: the change to report (once).
    mutating func completeResume() -> ConnectionChange? {
        defer { resumeCompletion = nil }
        return resumeCompletion
    }

    /// The pending dispatches to (re)send after `order`, in order; when there are none, the
    /// link is connected (so later dispatches are sent at once, after these).
    mutating func toResend(after order: Int) -> [(order: Int, id: DispatchID, action: WireAction)] {
        let next = pending.filter { $0.value.order > order }
            .sorted { $0.value.order < $1.value.order }
            .map { (order: $0.value.order, id: $0.key, action: $0.value.action) }
        if next.isEmpty { link = .connected }
        return next
    }

    /// The replica ended for good: the dispatches still pending, in order.
    mutating func end(_ reason: ReplicaError) -> [(id: DispatchID, pending: Pending)] {
        endReason = reason
        link = .disconnected(reason)
        waiting = nil
        let left = pending.sorted { $0.value.order < $1.value.order }.map { (id: $0.key, pending: $0.value) }
        pending = [:]
        resumeCompletion = nil
        return left
    }
}
