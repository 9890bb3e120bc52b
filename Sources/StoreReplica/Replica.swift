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
/// (fire-and-forget ones): the hub may or may not have applied them. The parts: this file is the API;
/// `Replica+Connection.swift` the connection's life (read, drop, reconnect, resume);
/// `Replica+Stream.swift` the application of the sequenced stream.
///
/// Call ``close()`` when done; the connection lives until then (or until reconnection gives up).
public final class Replica<App: SyncApp>: Sendable, Observable {
    /// The app.
    public let app: App
    /// The local store: read it, subscribe to it, dispatch through it.
    public let store: Store<App>
    /// This replica's id on the current connection, assigned by the hub (a reconnection gets a new one).
    public var replicaID: Int { currentReplica.load(ordering: .acquiring) }
    /// The run id of the hub on the current connection.
    public var hubID: String { shared.withLock { $0.hubID } }
    /// The id of the history the local state belongs to (`nil` from a hub that does not say).
    public var history: String? { shared.withLock { $0.history } }
    /// The seq the first welcome's snapshot was taken at.
    public let welcomeSeq: UInt64
    /// The largest frame payload the hub accepts (from its welcome): larger dispatches are
    /// refused locally with `frame-too-large` and the connection stays up.
    public var maxFrameBytes: Int { link.current.maxPayloadBytes }
    /// The socket path.
    public let socketPath: String
    /// How the connection comes back after a drop.
    public let reconnect: ReconnectPolicy
    /// The name given in `hello`.
    let name: String?
    /// This replica's session (`hello` `session`), kept across reconnects: the hub applies
    /// each of its dispatch ids once, so re-sending after a reconnect never applies twice.
    public let session: String
    /// Receives fire-and-forget dispatches that could not be sent or were never answered.
    let reportFailure: @Sendable (ReplicaError, JSON) -> Void
    /// How the store's terminal reaches ``submit(id:json:awaited:)``; emptied when the replica ends.
    let submitter: SubmitterBox

    /// The current connection's sending side (replaced on reconnection).
    let link: UpstreamHolder
    /// Bytes read past the welcome; taken by the reader when it starts.
    let pendingDecoder: Mutex<FrameDecoder?>
    @usableFromInline let shared: Mutex<Shared>
    @usableFromInline let lastSeq: Atomic<UInt64>
    /// Applies what one read brought: ``handleFrames(_:resumeSynced:)`` compiled for the app
    /// in the module that attached (see ``attach(app:socketPath:name:middleware:startReading:reconnect:session:onDispatchFailure:)``).
    let frameHandler: FrameHandler
    let currentReplica: Atomic<Int>
    /// Wakes a reconnection backoff early (on ``close()``).
    let wakeReconnect = DispatchSemaphore(value: 0)
    /// Observation of ``linkState``.
    let registrar = ObservationRegistrar()

    /// An event observer and its registration id. A struct, not a tuple: the reader reads the
    /// list for every action, and a tuple of generic types costs a locked run-time metadata
    /// look-up each time it is used in unspecialised code.
    @usableFromInline struct Observer: Sendable {
        @usableFromInline let id: Int
        @usableFromInline let callback: @Sendable (ReplicaEvent<App.Action>) -> Void
    }

    @usableFromInline struct Shared {
        @usableFromInline var acks: [DispatchID: CheckedContinuation<UInt64, any Error>] = [:]
        @usableFromInline var statusWaiters: [CheckedContinuation<HubStatus, any Error>] = []
        @usableFromInline var syncWaiters: [CheckedContinuation<UInt64, any Error>] = []
        var closeWaiters: [CheckedContinuation<ReplicaError, Never>] = []
        @usableFromInline var observers: [Observer] = []
        var nextObserver = 1
        var endReason: ReplicaError?
        var linkState: LinkState = .connected
        var closing = false
        var hubID: String
        var history: String?
        /// Dispatches sent (or waiting for the link) and not yet answered, re-sent on the same
        /// session after a reconnect.
        @usableFromInline var pending: [DispatchID: PendingDispatch] = [:]
        var nextPendingOrder = 0
        /// The replica ids this replica has held in the current history (its own actions'
        /// `origin`s, also in a resume's replay).
        @usableFromInline var ownReplicas: Set<Int> = []
        /// How many times a divergence was detected and healed by re-hydration.
        var divergences = 0
        /// Set between a resumed welcome and the end of its replay: the change to report then.
        var resumeCompletion: ConnectionChange?
    }

    /// A dispatch waiting for its `action`, `reject` or `duplicate`.
    @usableFromInline struct PendingDispatch {
        var order: Int
        var json: JSON
        /// Whether someone awaits it (``dispatch(json:)``); otherwise a failure is reported.
        var awaited: Bool
    }

    /// Connects to the hub and attaches (blocking until `welcome`, at most a few seconds).
    ///
    /// - Parameters:
    ///   - app: The app; its name and fingerprint must match the hub's.
    ///   - socketPath: The hub's socket; `nil` resolves the default (see ``SocketPath/resolve(explicit:)``).
    ///   - name: A name for this replica in the hub's status and logs.
    ///   - middleware: Local middleware, outermost first; thunks need ``Middleware/thunk`` (the default).
    ///   - startReading: Start applying the hub's actions right away (the default). Pass
    ///     `false` to register observers first, then call ``startReading()``: no event is missed.
    ///   - reconnect: How the connection comes back after a drop (default: automatically,
    ///     resuming where it left off); ``ReconnectPolicy/never`` makes the first end final.
    ///   - onDispatchFailure: Called on the dispatching thread when an action dispatched through
    ///     ``store`` (fire-and-forget) could not be sent: the connection is gone, or the action
    ///     is larger than the hub accepts. `nil` (the default) writes one line to stderr.
    /// - Returns: The attached replica.
    /// - Throws: ``ReplicaError`` when there is no hub, or the hub refuses (e.g. `app-mismatch`).
    @inlinable
    public static func attach(
        app: App,
        socketPath: String? = nil,
        name: String? = nil,
        middleware: [Middleware<App.State, App.Action>] = [.thunk],
        startReading: Bool = true,
        reconnect: ReconnectPolicy = .automatic,
        session: String? = nil,
        onDispatchFailure: (@Sendable (ReplicaError, JSON) -> Void)? = nil
    ) throws(ReplicaError) -> Replica {
        // `@inlinable` so that the reader's per-action path is compiled for `App` in the
        // caller's module (``specializedFrameHandler``), not as generic code.
        try connect(app: app, socketPath: socketPath, name: name, middleware: middleware, startReading: startReading,
                    reconnect: reconnect, session: session, onDispatchFailure: onDispatchFailure,
                    frameHandler: specializedFrameHandler)
    }

    /// `attach(app:socketPath:…)` with the reader's frame handler.
    @usableFromInline
    static func connect(
        app: App, socketPath: String?, name: String?, middleware: [Middleware<App.State, App.Action>],
        startReading: Bool, reconnect: ReconnectPolicy, session: String?,
        onDispatchFailure: (@Sendable (ReplicaError, JSON) -> Void)?, frameHandler: @escaping FrameHandler
    ) throws(ReplicaError) -> Replica {
        let connection = try HubConnection(path: SocketPath.resolve(explicit: socketPath))
        return try attach(app: app, over: connection, name: name, middleware: middleware, startReading: startReading,
                          reconnect: reconnect, session: session, welcomeTimeoutMilliseconds: 10_000,
                          onDispatchFailure: onDispatchFailure, frameHandler: frameHandler)
    }

    /// How the reader applies what one read brought (see ``handleFrames(_:resumeSynced:)``).
    @usableFromInline typealias FrameHandler = @Sendable (Replica, inout FrameDecoder, inout Bool) -> ReplicaError?

    /// ``handleFrames(_:resumeSynced:)`` as a closure made where this is inlined: in a module
    /// that knows the app, the whole per-action path (decode, the store's apply, events) is
    /// specialised for it, with no run-time generic metadata look-ups per action.
    @inlinable static var specializedFrameHandler: FrameHandler {
        { replica, decoder, resumeSynced in replica.handleFrames(&decoder, resumeSynced: &resumeSynced) }
    }

    /// Attaches over a connection already open (e.g. after asking it for `status`).
    ///
    /// - Parameters:
    ///   - app: The app.
    ///   - connection: An open connection; the replica takes it over.
    ///   - name: A name for this replica.
    ///   - middleware: Local middleware, outermost first.
    ///   - startReading: Start applying the hub's actions right away; see ``startReading()``.
    ///   - reconnect: How the connection comes back after a drop.
    ///   - session: This replica's session (1–128 bytes); `nil` (the default) picks a random one.
    ///   - onDispatchFailure: Receives fire-and-forget dispatches that could not be sent; `nil`
    ///     writes a line to stderr.
    /// - Returns: The attached replica.
    /// - Throws: ``ReplicaError`` when the hub refuses or the welcome does not decode.
    @inlinable
    public static func attach(
        app: App,
        over connection: HubConnection,
        name: String? = nil,
        middleware: [Middleware<App.State, App.Action>] = [.thunk],
        startReading: Bool = true,
        reconnect: ReconnectPolicy = .automatic,
        session: String? = nil,
        onDispatchFailure: (@Sendable (ReplicaError, JSON) -> Void)? = nil
    ) throws(ReplicaError) -> Replica {
        try attach(app: app, over: connection, name: name, middleware: middleware, startReading: startReading,
                   reconnect: reconnect, session: session, welcomeTimeoutMilliseconds: 10_000,
                   onDispatchFailure: onDispatchFailure, frameHandler: specializedFrameHandler)
    }

    /// `attach(over:)` with the time to wait for the welcome and the reader's frame handler.
    @usableFromInline
    static func attach(
        app: App, over connection: HubConnection, name: String?, middleware: [Middleware<App.State, App.Action>],
        startReading: Bool, reconnect: ReconnectPolicy, session: String?, welcomeTimeoutMilliseconds: Int32,
        onDispatchFailure: (@Sendable (ReplicaError, JSON) -> Void)?, frameHandler: @escaping FrameHandler
    ) throws(ReplicaError) -> Replica {
        let session = session ?? Digest.hex(UInt64.random(in: 0...UInt64.max)) + Digest.hex(UInt64.random(in: 0...UInt64.max))
        guard (1...ClientMessage.maxSessionBytes).contains(session.utf8.count) else {
            throw .protocolViolation("a session is 1 to \(ClientMessage.maxSessionBytes) bytes, got \(session.utf8.count)")
        }
        try connection.send(.hello(protocolVersion: syncProtocolVersion, app: App.name,
                                   fingerprint: App.fingerprint, name: name, session: session))
        let reply = try connection.receive(timeoutMilliseconds: welcomeTimeoutMilliseconds)
        guard case .welcome(let welcome) = reply else {
            if case .error(let error) = reply { throw .hub(error) }
            throw .protocolViolation("expected welcome after hello, got \(reply.typeName)")
        }
        let state = try Self.decodeWelcomeState(welcome, app: app)
        let replicaObject = Replica(app: app, connection: connection, state: state, welcome: welcome, name: name,
                                    session: session, middleware: middleware, reconnect: reconnect,
                                    onDispatchFailure: onDispatchFailure, frameHandler: frameHandler)
        if startReading { replicaObject.startReading() }
        return replicaObject
    }

    /// The state a full welcome carries, checked against its digest.
    static func decodeWelcomeState(_ welcome: Welcome, app: App) throws(ReplicaError) -> App.State {
        guard let json = welcome.state, let digest = welcome.digest else {
            throw .protocolViolation("the hub answered a fresh hello with a welcome without a state")
        }
        let state: App.State
        do throws(AppCodingError) {
            state = try app.decodeState(json)
        } catch {
            throw .diverged("the welcome state does not decode: \(error.message)")
        }
        guard app.digest(of: state) == digest else {
            throw .diverged("the welcome state re-encodes to digest \(app.digest(of: state)), the hub says \(digest)")
        }
        return state
    }

    private init(app: App, connection: HubConnection, state: App.State, welcome: Welcome, name: String?, session: String,
                 middleware: [Middleware<App.State, App.Action>], reconnect: ReconnectPolicy,
                 onDispatchFailure: (@Sendable (ReplicaError, JSON) -> Void)?, frameHandler: @escaping FrameHandler) {
        let link = UpstreamHolder(Self.upstream(for: connection, welcome: welcome))
        self.app = app
        self.frameHandler = frameHandler
        self.link = link
        self.name = name
        self.reconnect = reconnect
        self.currentReplica = Atomic(welcome.replica)
        self.welcomeSeq = welcome.seq
        self.socketPath = connection.path
        self.lastSeq = Atomic(welcome.seq)
        self.pendingDecoder = Mutex(connection.decoder)
        var shared = Shared(hubID: welcome.hub, history: welcome.history)
        shared.ownReplicas = [welcome.replica]
        self.shared = Mutex(shared)
        self.session = session
        let report = onDispatchFailure ?? { error, json in
            Console.error("StoreReplica: an action dispatched through the store was not sent (\(error.description)): \(json.canonicalString)")
        }
        self.reportFailure = report
        // The store's terminal reaches `self` through this box, filled at the end of `init`
        // (nothing can dispatch through the store before `init` returns) and emptied when
        // the replica ends, which breaks the replica → store → terminal → replica cycle. The
        // reader thread keeps the replica alive until then anyway.
        let submitter = SubmitterBox()
        self.submitter = submitter
        self.store = Store(
            initialState: state, reducer: app, enhancer: .applyMiddleware(middleware), history: nil, onError: nil,
            terminal: { action in
                let json = app.encodeAction(action)
                guard let replica = submitter.submitter else {
                    report(.disconnected("this replica's link to the hub has ended (closed, or reconnection gave up)"), json)
                    return
                }
                if let failure = replica.submitUnawaited(id: link.makeID(), json: json) { report(failure, json) }
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
    public var isConnected: Bool { shared.withLock { $0.linkState == .connected } }

    /// Where the link to the hub stands: connected, reconnecting (with the attempt number), or ended.
    ///
    /// Observable: a `withObservationTracking` (or a SwiftUI view) that reads it is told when
    /// it changes (on the replica's reader thread).
    public var linkState: LinkState {
        registrar.access(self, keyPath: \.linkState)
        return shared.withLock { $0.linkState }
    }

    /// Runs `body`, which changes ``linkState`` under the lock, telling observers around it.
    func changingLinkState<T>(_ body: () -> T) -> T {
        registrar.willSet(self, keyPath: \.linkState)
        defer { registrar.didSet(self, keyPath: \.linkState) }
        return body()
    }

    // MARK: - Dispatch

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
        try await dispatch(json: app.encodeAction(action))
    }

    /// Sends a wire action as JSON and waits until it is sequenced and applied here.
    ///
    /// - Parameter json: The action's wire JSON; the hub decodes and validates it.
    /// - Returns: The seq the hub gave it.
    /// - Throws: ``ReplicaError/rejected(_:)`` (`bad-action` or `rejected`), or ``ReplicaError/disconnected(_:)``.
    @discardableResult
    public func dispatch(json: JSON) async throws(ReplicaError) -> UInt64 {
        let id = link.makeID()
        do {
            return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<UInt64, any Error>) in
                shared.withLock { $0.acks[id] = continuation }
                if let failure = submit(id: id, json: json, awaited: true),
                   let waiting = shared.withLock({ $0.acks.removeValue(forKey: id) }) {
                    waiting.resume(throwing: failure)
                }
            }
        } catch let error as ReplicaError {
            throw error
        } catch {
            throw .disconnected(String(describing: error))
        }
    }

    /// Records a dispatch as pending (so it is re-sent on the same session after a reconnect)
    /// and sends it, or queues it while the link is being re-established.
    ///
    /// - Returns: Why it was not accepted (then nothing is pending and nothing will be sent).
    func submit(id: DispatchID, json: JSON, awaited: Bool) -> ReplicaError? {
        let limit = reconnect.maxPendingDispatches
        let plan = shared.withLock { shared -> SubmitPlan in
            if let reason = shared.endReason { return .refused(.disconnected(reason.description)) }
            if case .reconnecting = shared.linkState, shared.pending.count >= limit {
                return .refused(.disconnected("\(shared.pending.count) dispatches already wait for the link to the hub to come back (ReconnectPolicy.maxPendingDispatches); this one was not queued — retry later"))
            }
            shared.pending[id] = PendingDispatch(order: shared.nextPendingOrder, json: json, awaited: awaited)
            shared.nextPendingOrder += 1
            if case .reconnecting = shared.linkState { return .queued }
            return .send
        }
        switch plan {
        case .refused(let error):
            return error
        case .queued:
            return nil
        case .send:
            let failure: ReplicaError
            switch link.current.send(.dispatch(id: id, action: json)) {
            case .sent:
                return nil
            case .tooLarge(let error):
                failure = .rejected(error)
            case .closed(let reason):
                // The link is dropping: kept pending, it is re-sent (on the same session, so
                // applied once) when the link is back, or failed when the replica ends.
                if reconnect.enabled, !shared.withLock({ $0.closing }) { return nil }
                failure = .disconnected(reason)
            }
            shared.withLock { _ = $0.pending.removeValue(forKey: id) }
            return failure
        }
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
        try send(json: app.encodeAction(action))
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
    public func isOwn(origin: Int) -> Bool { shared.withLock { $0.ownReplicas.contains(origin) } }

    /// How many times this replica found its state differing from the hub's (a checkpoint
    /// mismatch, or an action it could not apply) and healed it by re-hydrating.
    public var divergences: Int { shared.withLock { $0.divergences } }

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
            send: { $0.send(.status) },
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
        register: @escaping (inout Shared, CheckedContinuation<T, any Error>) -> Void,
        send: (Upstream) -> Upstream.Outcome,
        unregister: @escaping (inout Shared) -> CheckedContinuation<T, any Error>?
    ) async throws(ReplicaError) -> T {
        do {
            return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                var upstream: Upstream?
                let ended = shared.withLock { shared -> ReplicaError? in
                    if let reason = shared.endReason { return reason }
                    if case .reconnecting(let attempt) = shared.linkState {
                        return .disconnected("the link to the hub is being re-established (attempt \(attempt)); ask again once it is back")
                    }
                    register(&shared, continuation)
                    // The link is replaced before the state says connected, so this is the
                    // link the registration belongs to.
                    upstream = link.current
                    return nil
                }
                guard let upstream else {
                    continuation.resume(throwing: ReplicaError.disconnected((ended ?? .disconnected("the link to the hub has ended")).description))
                    return
                }
                if let failure = send(upstream).failure, let waiting = shared.withLock({ unregister(&$0) }) {
                    waiting.resume(throwing: failure)
                }
            }
        } catch let error as ReplicaError {
            throw error
        } catch {
            throw .disconnected(String(describing: error))
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

    // MARK: - Events

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
        if let reason = shared.withLock({ $0.endReason }) {
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
                if let reason = shared.endReason { return reason }
                shared.closeWaiters.append(continuation)
                return nil
            }
            if let ended { continuation.resume(returning: ended) }
        }
    }

    /// Closes the connection (and stops reconnecting); pending dispatches fail with
    /// ``ReplicaError/disconnected(_:)``.
    public func close() {
        shared.withLock { $0.closing = true }
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
        let thread = Thread { [self] in self.runConnection(decoder: decoder) }
        thread.name = "StoreSync replica \(replicaID) reader"
        thread.start()
    }
}

/// The current connection's sending side, replaced when the replica reconnects.
///
/// Dispatch ids come from here, not from one connection, so they stay unique for the
/// replica's whole life.
final class UpstreamHolder: Sendable {
    private let upstream: Mutex<Upstream>
    /// Starts at a random point: a replica that reuses a session (an explicit `session:` kept
    /// across process restarts) does not send the ids an earlier instance sent, which the hub
    /// would answer `duplicate` instead of applying.
    private let nextID = Atomic<Int>(Int.random(in: 1...(1 << 40)))

    init(_ upstream: Upstream) { self.upstream = Mutex(upstream) }

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

/// What `submit` does with a dispatch.
private enum SubmitPlan {
    case send, queued, refused(ReplicaError)
}

/// What the store's terminal calls to send a fire-and-forget dispatch: the replica.
protocol DispatchSubmitter: AnyObject, Sendable {
    /// Records the dispatch as pending and sends it (see `Replica.submit(id:json:awaited:)`).
    func submitUnawaited(id: DispatchID, json: JSON) -> ReplicaError?
}

/// Lets the store's terminal (built before the replica exists) reach the replica: set once
/// at the end of `init`, emptied when the replica ends, read on every fire-and-forget dispatch.
final class SubmitterBox: Sendable {
    private let value = Mutex<(any DispatchSubmitter)?>(nil)

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
    func submitUnawaited(id: DispatchID, json: JSON) -> ReplicaError? { submit(id: id, json: json, awaited: false) }
}
