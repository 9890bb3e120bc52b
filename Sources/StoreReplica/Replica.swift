#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
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
/// Call ``close()`` when done; the connection lives until then or until the hub goes.
public final class Replica<App: SyncApp>: Sendable {
    /// The app.
    public let app: App
    /// The local store: read it, subscribe to it, dispatch through it.
    public let store: Store<App>
    /// This replica's id, assigned by the hub.
    public let replicaID: Int
    /// The hub's run id.
    public let hubID: String
    /// The seq the welcome snapshot was taken at.
    public let welcomeSeq: UInt64
    /// The largest frame payload the hub accepts (from its welcome): larger dispatches are
    /// refused locally with `frame-too-large` and the connection stays up.
    public let maxFrameBytes: Int
    /// The socket path.
    public let socketPath: String

    private let upstream: Upstream
    /// Bytes read past the welcome; taken by the reader when it starts.
    private let pendingDecoder: Mutex<FrameDecoder?>
    private let shared: Mutex<Shared>
    private let lastSeq: Atomic<UInt64>

    private struct Shared {
        var acks: [DispatchID: CheckedContinuation<UInt64, any Error>] = [:]
        var statusWaiters: [CheckedContinuation<HubStatus, any Error>] = []
        var syncWaiters: [CheckedContinuation<UInt64, any Error>] = []
        var closeWaiters: [CheckedContinuation<ReplicaError, Never>] = []
        var observers: [(id: Int, callback: @Sendable (ReplicaEvent<App.Action>) -> Void)] = []
        var nextObserver = 1
        var endReason: ReplicaError?
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
    ///   - onDispatchFailure: Called on the dispatching thread when an action dispatched through
    ///     ``store`` (fire-and-forget) could not be sent: the connection is gone, or the action
    ///     is larger than the hub accepts. `nil` (the default) writes one line to stderr.
    /// - Returns: The attached replica.
    /// - Throws: ``ReplicaError`` when there is no hub, or the hub refuses (e.g. `app-mismatch`).
    public static func attach(
        app: App,
        socketPath: String? = nil,
        name: String? = nil,
        middleware: [Middleware<App.State, App.Action>] = [.thunk],
        startReading: Bool = true,
        onDispatchFailure: (@Sendable (ReplicaError, JSON) -> Void)? = nil
    ) throws(ReplicaError) -> Replica {
        let connection = try HubConnection(path: SocketPath.resolve(explicit: socketPath))
        return try attach(app: app, over: connection, name: name, middleware: middleware, startReading: startReading,
                          onDispatchFailure: onDispatchFailure)
    }

    /// Attaches over a connection already open (e.g. after asking it for `status`).
    ///
    /// - Parameters:
    ///   - app: The app.
    ///   - connection: An open connection; the replica takes it over.
    ///   - name: A name for this replica.
    ///   - middleware: Local middleware, outermost first.
    ///   - startReading: Start applying the hub's actions right away; see ``startReading()``.
    ///   - onDispatchFailure: Receives fire-and-forget dispatches that could not be sent; `nil`
    ///     writes a line to stderr.
    /// - Returns: The attached replica.
    /// - Throws: ``ReplicaError`` when the hub refuses or the welcome does not decode.
    public static func attach(
        app: App,
        over connection: HubConnection,
        name: String? = nil,
        middleware: [Middleware<App.State, App.Action>] = [.thunk],
        startReading: Bool = true,
        onDispatchFailure: (@Sendable (ReplicaError, JSON) -> Void)? = nil
    ) throws(ReplicaError) -> Replica {
        try connection.send(.hello(protocolVersion: syncProtocolVersion, app: App.name,
                                   fingerprint: App.fingerprint, name: name))
        let reply = try connection.receive()
        guard case .welcome(let welcome) = reply else {
            if case .error(let error) = reply { throw .hub(error) }
            throw .protocolViolation("expected welcome after hello, got \(reply.typeName)")
        }
        let state: App.State
        do throws(AppCodingError) {
            state = try app.decodeState(welcome.state)
        } catch {
            throw .diverged("the welcome state does not decode: \(error.message)")
        }
        guard app.digest(of: state) == welcome.digest else {
            throw .diverged("the welcome state re-encodes to digest \(app.digest(of: state)), the hub says \(welcome.digest)")
        }
        let replicaObject = Replica(app: app, connection: connection, state: state, welcome: welcome,
                                    middleware: middleware, onDispatchFailure: onDispatchFailure)
        if startReading { replicaObject.startReading() }
        return replicaObject
    }

    private init(app: App, connection: HubConnection, state: App.State, welcome: Welcome,
                 middleware: [Middleware<App.State, App.Action>],
                 onDispatchFailure: (@Sendable (ReplicaError, JSON) -> Void)?) {
        // A hub that does not say its limit accepts anything one frame can carry.
        let limit = welcome.maxFrameBytes.map { max(1, min($0, Frame.maxPayloadBytes)) } ?? Frame.maxPayloadBytes
        let upstream = Upstream(fd: connection.detachDescriptor(), maxPayloadBytes: limit)
        self.app = app
        self.upstream = upstream
        self.replicaID = welcome.replica
        self.hubID = welcome.hub
        self.welcomeSeq = welcome.seq
        self.maxFrameBytes = limit
        self.socketPath = connection.path
        self.lastSeq = Atomic(welcome.seq)
        self.pendingDecoder = Mutex(connection.decoder)
        self.shared = Mutex(Shared())
        let report = onDispatchFailure ?? { error, json in
            Console.error("StoreReplica: an action dispatched through the store was not sent (\(error.description)): \(json.canonicalString)")
        }
        self.store = Store(
            initialState: state, reducer: app, enhancer: .applyMiddleware(middleware), history: nil, onError: nil,
            terminal: { action in
                let json = app.encodeAction(action)
                if let failure = upstream.send(.dispatch(id: upstream.makeID(), action: json)).failure {
                    report(failure, json)
                }
            }
        )
    }

    /// The seq of the last action applied here.
    public var seq: UInt64 { lastSeq.load(ordering: .acquiring) }

    /// Whether the connection is still open.
    public var isConnected: Bool { shared.withLock { $0.endReason == nil } }

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
        let id = upstream.makeID()
        return try await awaitReply(
            register: { $0.acks[id] = $1 },
            send: { upstream.send(.dispatch(id: id, action: json)) },
            unregister: { $0.acks.removeValue(forKey: id) }
        )
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
        let id = upstream.makeID()
        if let failure = upstream.send(.dispatch(id: id, action: json)).failure { throw failure }
        return id
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
            send: { upstream.send(.status) },
            unregister: { _ in nil }
        )
    }

    /// Registers a continuation for a reply, sends the request, and waits.
    ///
    /// If the connection has already ended, or the send fails, the wait ends at once with
    /// ``ReplicaError/disconnected(_:)`` or the local refusal (and the registration is undone).
    private func awaitReply<T: Sendable>(
        register: @escaping (inout Shared, CheckedContinuation<T, any Error>) -> Void,
        send: () -> Upstream.Outcome,
        unregister: @escaping (inout Shared) -> CheckedContinuation<T, any Error>?
    ) async throws(ReplicaError) -> T {
        do {
            return try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                let ended = shared.withLock { shared -> ReplicaError? in
                    if let reason = shared.endReason { return reason }
                    register(&shared, continuation)
                    return nil
                }
                if let ended {
                    continuation.resume(throwing: ReplicaError.disconnected(ended.description))
                    return
                }
                if let failure = send().failure, let waiting = shared.withLock({ unregister(&$0) }) {
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
            send: { upstream.send(.sync(id: nil)) },
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
            shared.observers.append((shared.nextObserver, callback))
            return shared.nextObserver
        }
        return Subscription { [weak self] in
            // The removed callback is released after the lock: its captures may include
            // another token of this replica, whose release takes the same lock.
            let removed = self?.shared.withLock { shared -> [(id: Int, callback: @Sendable (ReplicaEvent<App.Action>) -> Void)] in
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

    /// Closes the connection; pending dispatches fail with ``ReplicaError/disconnected(_:)``.
    public func close() {
        upstream.closeLocally()
        upstream.shutdown()
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
            let reason = self.readLoop(decoder: decoder)
            self.finish(reason)
        }
        thread.name = "StoreSync replica \(replicaID) reader"
        thread.start()
    }

    private func readLoop(decoder initial: FrameDecoder) -> ReplicaError {
        var decoder = initial
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 << 10, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            if let failure = handleFrames(&decoder) { return failure }
            switch UnixSocket.read(upstream.fd, into: buffer) {
            case .bytes(let count):
                decoder.append(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            case .wouldBlock:
                _ = UnixSocket.waitUntil(upstream.fd, timeoutMilliseconds: -1)
            case .endOfFile:
                return .disconnected(upstream.closedLocally ? "closed by this replica" : "the hub closed the connection")
            case .failed(let code):
                return .disconnected(SystemError.describe(errno: code))
            }
        }
    }

    /// Handles every complete frame buffered in `decoder`, applying actions in one hold of
    /// the store's dispatch lock; returns a reason to stop, or `nil` to read more.
    private func handleFrames(_ decoder: inout FrameDecoder) -> ReplicaError? {
        var failure: ReplicaError?
        store.receiveBatch { apply in
            while failure == nil {
                do throws(FrameError) {
                    guard let outcome = try decoder.decodeNext({ payload in handle(payload, apply: apply) }) else { return }
                    failure = outcome
                } catch {
                    failure = .protocolViolation(error.description)
                }
            }
        }
        return failure
    }

    /// Handles one frame from the hub; returns a reason to stop, or `nil` to go on.
    private func handle(_ frame: UnsafeRawBufferPointer,
                        apply: (App.Action) throws(App.Failure) -> Void) -> ReplicaError? {
        let message: HubMessage
        do {
            message = try HubMessage(json: JSON(parsing: frame))
        } catch let error as WireError {
            return .protocolViolation(error.message)
        } catch {
            return .protocolViolation(String(describing: error))
        }
        switch message {
        case .action(let seq, let origin, let id, let json):
            let expected = lastSeq.load(ordering: .relaxed) + 1
            guard seq == expected else {
                return .protocolViolation("expected seq \(expected), got \(seq)")
            }
            let action: App.Action
            do {
                action = try app.decodeAction(json)
            } catch {
                return .diverged("sequenced action \(seq) does not decode here: \(error.message)")
            }
            do throws(App.Failure) {
                try apply(action)
            } catch {
                return .diverged("this replica's reducer refused sequenced action \(seq): \(app.describe(error))")
            }
            lastSeq.store(seq, ordering: .releasing)
            let (ack, observers) = shared.withLock { shared in
                (origin == replicaID ? shared.acks.removeValue(forKey: id) : nil, shared.observers)
            }
            ack?.resume(returning: seq)
            let event = ReplicaEvent<App.Action>.action(seq: seq, origin: origin, id: id, action: action, json: json)
            for observer in observers { observer.callback(event) }
        case .reject(let id, let error):
            let (ack, observers) = shared.withLock { ($0.acks.removeValue(forKey: id), $0.observers) }
            ack?.resume(throwing: ReplicaError.rejected(error))
            for observer in observers { observer.callback(.rejected(id: id, error: error)) }
        case .status(let status):
            let waiter = shared.withLock { $0.statusWaiters.isEmpty ? nil : $0.statusWaiters.removeFirst() }
            waiter?.resume(returning: status)
        case .synced:
            let waiter = shared.withLock { $0.syncWaiters.isEmpty ? nil : $0.syncWaiters.removeFirst() }
            waiter?.resume(returning: lastSeq.load(ordering: .relaxed))
        case .error(let error):
            return .hub(error)
        case .welcome:
            return .protocolViolation("a second welcome")
        case .unknown:
            // The extension rule: a newer hub may send message types this library does not know.
            break
        }
        return nil
    }

    private func finish(_ reason: ReplicaError) {
        upstream.closeDescriptor(reason: reason.description)
        let shared = shared.withLock { shared -> Shared in
            shared.endReason = reason
            defer {
                shared.acks = [:]
                shared.statusWaiters = []
                shared.syncWaiters = []
                shared.closeWaiters = []
            }
            return shared
        }
        let failure = ReplicaError.disconnected(reason.description)
        for ack in shared.acks.values { ack.resume(throwing: failure) }
        for waiter in shared.statusWaiters { waiter.resume(throwing: failure) }
        for waiter in shared.syncWaiters { waiter.resume(throwing: failure) }
        for observer in shared.observers { observer.callback(.disconnected(reason)) }
        for waiter in shared.closeWaiters { waiter.resume(returning: reason) }
    }
}
