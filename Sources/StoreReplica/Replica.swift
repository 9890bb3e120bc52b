#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Observation
import SyncCore
import SyncPOSIX
import SyncLocks
import Synchronization

/// A replica: a local ``Store`` that the hub keeps equal to every other replica's.
///
/// ``attach(app:socketPath:name:middleware:)`` connects, says `hello`, and builds the
/// store from the hub's `welcome` snapshot. From then on a reader thread applies every
/// action the hub sequences, in order, with ``Store/receive(_:)``: subscribers, selectors
/// and streams see remote actions exactly like local ones.
///
/// Dispatching:
/// - ``dispatch(_:)`` sends one action to the hub and returns its seq once the hub has
///   sequenced it and this replica has applied it, or throws the hub's refusal.
/// - ``send(_:)`` sends without waiting and returns the dispatch id, so the outcome can be
///   matched to its ``ReplicaEvent/action(seq:origin:id:action:json:)`` or
///   ``ReplicaEvent/rejected(id:error:)`` event; it throws at once if nothing could be sent.
/// - `replica.store.dispatch(…)` goes through the local middleware first (thunks,
///   logging), then upstream, without waiting; refusals arrive as
///   ``ReplicaEvent/rejected(id:error:)`` events, and an action that could not be sent at
///   all (the connection is gone, or it is larger than the hub accepts) goes to the
///   `onDispatchFailure` handler given to `attach` — by default a line on stderr. Nothing is
///   dropped silently.
///
/// Middleware and thunks run only here, in the dispatching replica, never again on
/// incoming actions, so their side effects happen once. The state changes only when the
/// hub's sequenced action comes back (no optimistic update), so it never has to be undone.
/// So a logging middleware on a replica sees the state *before* the action takes effect
/// (it is applied when the hub's copy arrives); observe ``observeEvents(_:)`` or subscribe
/// to the store to log applied states.
///
/// The connection comes back by itself after a drop (a hub restart, a `slow-consumer`
/// disconnect, a broken socket), per the ``ReconnectPolicy`` given to `attach`: it resumes
/// from the last applied seq, or re-hydrates from a full welcome, and subscribers see one
/// continuous sequence. Every replica has a ``session``: dispatches not yet answered when the
/// link drops stay pending and are re-sent on that session once it is back (after a resume's
/// replay, only those the hub had not sequenced), so each is applied exactly once and its
/// caller gets its seq. Dispatches made while reconnecting queue behind them, up to
/// ``ReconnectPolicy/maxPendingDispatches``. `status()` and `sync()` fail at once while the link
/// is down. If reconnection gives up or the replica is closed, what is still pending fails
/// with ``ReplicaError/disconnected(_:)`` (awaited dispatches) or goes to `onDispatchFailure`
/// (fire-and-forget ones): the hub may or may not have applied them.
///
/// **App versions.** `hello` names the app's fingerprint. A replica of a newer version than
/// the history, which the hub carries, is held until the history is upgraded (`attach`'s
/// `onWaiting`, then ``ConnectionChange/waiting(_:)`` events and ``waiting`` while it
/// reconnects), then welcomed; a hub that cannot hold it (`app-ahead`) is retried with the
/// ``ReconnectPolicy``. When the history is upgraded past this replica's version (an
/// `upgraded` notice, in order after every action before the upgrade) or already runs a newer
/// one (`app-outdated` at `hello`), the replica ends with ``ReplicaError/appOutdated(_:)`` and
/// does not reconnect: each dispatch the hub had not sequenced before the upgrade fails with
/// that error (it was never applied), and a `hello` that resumes learns the outcome of each
/// dispatch in doubt first (`duplicate`: applied, with its seq).
///
/// Given several sockets (hubs on one shared log, `attach(app:socketPath:…)` with
/// `"A,B"`), the replica moves to the next one when its hub goes away, and resumes there:
/// the same history and seqs, so only what it missed is sent.
///
/// The parts: this file holds the replica's state and its construction;
/// `Replica+Attach.swift` the attach entry points; `Replica+Dispatch.swift` dispatching,
/// `status` and `sync`; `Replica+Events.swift` observers, events, closing;
/// `Replica+Connection.swift` the connection's life (read, drop, reconnect, resume);
/// `Replica+Stream.swift` the application of the sequenced stream; `ReplicaLedger.swift` the
/// pure bookkeeping every one of them decides with.
///
/// **Locks, in the only order they are ever taken** (never an earlier one while a later one
/// is held):
/// 1. the store's `drain` (held by a dispatch through the store, and by the reader for a
///    whole read's batch of actions);
/// 2. `shared` (the ledger, continuations, observers);
/// 3. `link` (``UpstreamHolder``: which connection sends);
/// 4. the current ``Upstream``'s state.
///
/// No observer, continuation or `onDispatchFailure` runs under any of them: the reader
/// collects what one read brought under `drain`, then resumes continuations and calls
/// observers after releasing it, and dispatch failures are reported on a serial queue of the
/// replica's. A send never waits for the socket (nothing blocks while `drain` is held): the
/// bound on what waits is ``ReconnectPolicy/maxPendingDispatches``.
///
/// Call ``close()`` when done; the connection lives until then (or until reconnection gives up).
public final class Replica<App: SyncApp>: Sendable, Observable {
    /// The app.
    public let app: App
    /// The local store: read it, subscribe to it, dispatch through it.
    public let store: Store<App>
    /// A task executor on which a task awaiting this replica continues on its reader thread,
    /// with no hop to another thread: `withTaskExecutorPreference(replica.executor) { … }`.
    /// See ``ReplicaExecutor`` for what it costs the reader.
    public let executor = ReplicaExecutor()
    /// This replica's id on the current connection, assigned by the hub (a reconnection gets a new one).
    public var replicaID: Int { currentReplica.load(ordering: .acquiring) }
    /// The run id of the hub on the current connection.
    public var hubID: String { shared.withLock { $0.ledger.hubID } }
    /// The id of the history the local state belongs to (`nil` from a hub that does not say).
    public var history: String? { shared.withLock { $0.ledger.history } }
    /// The seq the first welcome's snapshot was taken at.
    public let welcomeSeq: UInt64
    /// The largest frame payload the hub accepts (from its welcome): larger dispatches are
    /// refused locally with `frame-too-large` and the connection stays up.
    public var maxFrameBytes: Int { link.current.maxPayloadBytes }
    /// The socket path of the hub this replica is attached to now.
    public var socketPath: String { socketPaths[pathIndex.load(ordering: .acquiring) % socketPaths.count] }
    /// The sockets of every hub this replica may attach to (hubs on one shared log), tried in
    /// turn when the current one goes away.
    public let socketPaths: [String]
    /// Which of ``socketPaths`` is the current hub's.
    let pathIndex: Atomic<Int>
    /// How the connection comes back after a drop.
    public let reconnect: ReconnectPolicy
    /// The name given in `hello`.
    let name: String?
    /// This replica's session (`hello` `session`), kept across reconnects: the hub applies
    /// each of its dispatch ids once, so re-sending after a reconnect never applies twice.
    public let session: String
    /// Receives fire-and-forget dispatches that could not be sent or were never answered
    /// (through ``reportFailure(_:_:)``, on ``failureQueue``, never under a lock).
    let failureHandler: @Sendable (ReplicaError, JSON) -> Void
    /// Where dispatch failures are reported, in order, outside every lock.
    let failureQueue: DispatchQueue
    /// How the store's terminal reaches ``submit(id:json:awaited:)``; emptied when the replica ends.
    let submitter: SubmitterBox

    /// The current connection's sending side (replaced on reconnection).
    let link: UpstreamHolder
    /// Bytes read past the welcome; taken by the reader when it starts.
    let pendingDecoder: Locked<FrameDecoder?>
    @usableFromInline let shared: Locked<Shared>
    @usableFromInline let lastSeq: Atomic<UInt64>
    /// How long the last digest check took here, in nanoseconds (the state serialised once):
    /// the reader spaces its checks by at least 1 000 times that, so a large state costs this
    /// replica, and the hub, at most about 0.1 % of a core for them.
    @usableFromInline let digestCheckCost = Atomic<Int>(0)
    /// One more than the seq of the newest digest comparison with the hub that agreed (a
    /// verified full welcome, a checkpoint, the reader's own `status`); `0`: none yet. Sent
    /// with every `status` as its `checked` member (``digestReport``), which the hub shows in
    /// this replica's entry of `status.replicas`.
    @usableFromInline let agreedAfter: Atomic<UInt64>
    /// Applies what one read brought: ``handleFrames(_:resumeSynced:)`` compiled for the app
    /// in the module that attached (see ``attach(app:socketPath:name:middleware:startReading:reconnect:session:onDispatchFailure:)``).
    let frameHandler: FrameHandler
    let currentReplica: Atomic<Int>
    /// Wakes a reconnection backoff early (on ``close()``).
    let wakeReconnect = DispatchSemaphore(value: 0)
    /// Set when an `upgraded` notice moved the history to this replica's own version: the
    /// next attachment asks for a full welcome (the migrated state), not a resume.
    let rehydrateAfterUpgrade = Atomic<Bool>(false)
    /// Observation of ``linkState``.
    let registrar = ObservationRegistrar()

    /// An event observer and its registration id. A struct, not a tuple: the reader reads the
    /// list for every action, and a tuple of generic types costs a locked run-time metadata
    /// look-up each time it is used in unspecialised code.
    @usableFromInline struct Observer: Sendable {
        @usableFromInline let id: Int
        @usableFromInline let callback: @Sendable (ReplicaEvent<App.Action>) -> Void
    }

    /// An applied-action observer (``observeActions(_:)``): no action JSON is made for it.
    @usableFromInline struct ActionObserver: Sendable {
        @usableFromInline let id: Int
        @usableFromInline let callback: @Sendable (AppliedAction<App.Action>) -> Void
    }

    /// The replica's shared mutable part, under one `Locked`: the ledger (pure bookkeeping of
    /// dispatches and the link) and what cannot be pure (continuations, observers).
    @usableFromInline struct Shared {
        /// Dispatches, the link, the history: every decision about them is a method of this.
        @usableFromInline var ledger: ReplicaLedger
        @usableFromInline var acks: [DispatchID: ReplyWaiter<UInt64>] = [:]
        /// Callers of ``status()``, in request order; `nil` is the reader's own digest check
        /// (see ``digestCheckInterval``).
        @usableFromInline var statusWaiters: [ReplyWaiter<HubStatus>?] = []
        @usableFromInline var syncWaiters: [ReplyWaiter<UInt64>] = []
        var closeWaiters: [CheckedContinuation<ReplicaError, Never>] = []
        @usableFromInline var observers: [Observer] = []
        @usableFromInline var actionObservers: [ActionObserver] = []
        var nextObserver = 1
    }

    init(app: App, connection: HubConnection, paths: [String], state: App.State, welcome: Welcome, name: String?,
         session: String, middleware: [Middleware<App.State, App.Action>], reconnect: ReconnectPolicy,
         onDispatchFailure: (@Sendable (ReplicaError, JSON) -> Void)?, frameHandler: @escaping FrameHandler) {
        let link = UpstreamHolder(Self.upstream(for: connection, welcome: welcome))
        self.app = app
        self.frameHandler = frameHandler
        self.link = link
        self.name = name
        self.reconnect = reconnect
        self.currentReplica = Atomic(welcome.replica)
        self.welcomeSeq = welcome.seq
        self.socketPaths = paths.isEmpty ? [connection.path] : paths
        self.pathIndex = Atomic(max(0, paths.firstIndex(of: connection.path) ?? 0))
        self.lastSeq = Atomic(welcome.seq)
        // A replica starts from a full welcome whose state it checked against its digest.
        self.agreedAfter = Atomic(welcome.seq &+ 1)
        self.pendingDecoder = Locked(connection.decoder)
        self.shared = Locked(Shared(ledger: ReplicaLedger(hubID: welcome.hub, history: welcome.history, replica: welcome.replica,
                                                         maxPending: reconnect.maxPendingDispatches)))
        self.session = session
        let report = onDispatchFailure ?? { error, json in
            Console.error("StoreReplica: an action dispatched through the store was not sent (\(error.description)): \(json.canonicalString)")
        }
        let queue = DispatchQueue(label: "StoreSync replica dispatch failures")
        self.failureHandler = report
        self.failureQueue = queue
        // The store's terminal reaches `self` through this box, filled at the end of `init`
        // (nothing can dispatch through the store before `init` returns) and emptied when
        // the replica ends, which breaks the replica → store → terminal → replica cycle. The
        // reader thread keeps the replica alive until then anyway.
        let submitter = SubmitterBox()
        self.submitter = submitter
        self.store = Store(
            initialState: state, reducer: app, enhancer: .applyMiddleware(middleware), history: nil, onError: nil,
            terminal: { action in
                // Runs under the store's drain lock: nothing here waits, and a failure is
                // reported on the failure queue, after the lock.
                // The app's canonical bytes when it writes them directly (no JSON object).
                let wire = Self.wireAction(action, app: app)
                guard let replica = submitter.submitter else {
                    queue.async { report(.disconnected("this replica's link to the hub has ended (closed, or reconnection gave up)"), wire.json) }
                    return
                }
                if let failure = replica.submitUnawaited(id: link.makeID(), action: wire) { queue.async { report(failure, wire.json) } }
            }
        )
        submitter.install(self)
    }

    /// The sending side for a connection that has just been welcomed.
    static func upstream(for connection: HubConnection, welcome: Welcome) -> Upstream {
        // A hub that does not say its limit accepts anything one frame can carry.
        let limit = welcome.maxFrameBytes.map { max(1, min($0, Frame.maxPayloadBytes)) } ?? Frame.maxPayloadBytes
        return Upstream(fd: connection.detachDescriptor(), maxPayloadBytes: limit)
    }

    /// The seq of the last action applied here.
    public var seq: UInt64 { lastSeq.load(ordering: .acquiring) }

    /// Whether the link to the hub is up (not reconnecting, not ended).
    public var isConnected: Bool { shared.withLock { $0.ledger.link == .connected } }

    /// Reports a fire-and-forget dispatch that failed, on ``failureQueue`` (never under a lock).
    func reportFailure(_ error: ReplicaError, _ json: JSON) {
        let handler = failureHandler
        failureQueue.async { handler(error, json) }
    }

    /// Where the link to the hub stands: connected, reconnecting (with the attempt number), or ended.
    ///
    /// Observable: a `withObservationTracking` (or a SwiftUI view) that reads it is told when
    /// it changes (on the replica's reader thread).
    public var linkState: LinkState {
        registrar.access(self, keyPath: \.linkState)
        return shared.withLock { $0.ledger.link }
    }

    /// What the hub holds this replica for, while it does: the history runs an older version
    /// of the app than this replica, and the hub welcomes it once the history is upgraded
    /// (a ``ConnectionChange/waiting(_:)`` event said so). Also set while a hub that cannot
    /// hold it (`app-ahead`) is retried. `nil` otherwise; cleared by the next welcome.
    ///
    /// Observable, like ``linkState``. A replica being attached for the first time is not
    /// there yet: `attach`'s `onWaiting` reports that wait.
    public var waiting: WaitingNotice? {
        registrar.access(self, keyPath: \.waiting)
        return shared.withLock { $0.ledger.waiting }
    }

    /// Runs `body`, which changes ``linkState`` under the lock, telling observers around it.
    func changingLinkState<T>(_ body: () -> T) -> T {
        registrar.willSet(self, keyPath: \.linkState)
        defer { registrar.didSet(self, keyPath: \.linkState) }
        return body()
    }

}

/// The current connection's sending side, replaced when the replica reconnects.
///
/// Dispatch ids come from here, not from one connection, so they stay unique for the
/// replica's whole life.
final class UpstreamHolder: Sendable {
    private let upstream: Locked<Upstream>
    /// Starts at a random point: a replica that reuses a session (an explicit `session:` kept
    /// across process restarts) does not send the ids an earlier instance sent, which the hub
    /// would answer `duplicate` instead of applying.
    private let nextID = Atomic<Int>(Int.random(in: 1...(1 << 40)))

    init(_ upstream: Upstream) { self.upstream = Locked(upstream) }

    /// The sending side of the current connection.
    var current: Upstream { upstream.withLock { $0 } }

    /// Installs the sending side of a new connection; returns the old one.
    func replace(with new: Upstream) -> Upstream {
        upstream.withLock { value in
            let old = value
            value = new
            return old
        }
    }

    /// A fresh dispatch id, unique for this replica.
    func makeID() -> DispatchID { .number(nextID.add(1, ordering: .relaxed).oldValue) }
}

/// What the store's terminal calls to send a fire-and-forget dispatch: the replica.
protocol DispatchSubmitter: AnyObject, Sendable {
    /// Records the dispatch as pending and sends it (see `Replica.submit(id:action:awaited:)`).
    func submitUnawaited(id: DispatchID, action: WireAction) -> ReplicaError?
}

/// Lets the store's terminal (built before the replica exists) reach the replica: set once
/// at the end of `init`, emptied when the replica ends, read on every fire-and-forget dispatch.
final class SubmitterBox: Sendable {
    private let value = Locked<(any DispatchSubmitter)?>(nil)

    /// The replica, while it has not ended.
    var submitter: (any DispatchSubmitter)? { value.withLock { $0 } }

    /// Installs the replica.
    func install(_ submitter: any DispatchSubmitter) { value.withLock { $0 = submitter } }

    /// Empties the box; returns what it held, for the caller to release outside any lock.
    func clear() -> (any DispatchSubmitter)? {
        value.withLock { current in
            defer { current = nil }
            return current
        }
    }
}

extension Replica: DispatchSubmitter {
    func submitUnawaited(id: DispatchID, action: WireAction) -> ReplicaError? { submit(id: id, action: action, awaited: false) }
}
