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
/// - `replica.store.dispatch(…)` goes through the local middleware first (thunks,
///   logging), then upstream, without waiting; refusals arrive as
///   ``ReplicaEvent/rejected(id:error:)`` events.
///
/// Middleware and thunks run only here, in the dispatching replica, never again on
/// incoming actions, so their side effects happen once. The state changes only when the
/// hub's sequenced action comes back (no optimistic update), so it never has to be undone.
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
    /// - Returns: The attached replica.
    /// - Throws: ``ReplicaError`` when there is no hub, or the hub refuses (e.g. `app-mismatch`).
    public static func attach(
        app: App,
        socketPath: String? = nil,
        name: String? = nil,
        middleware: [Middleware<App.State, App.Action>] = [.thunk],
        startReading: Bool = true
    ) throws(ReplicaError) -> Replica {
        let connection = try HubConnection(path: SocketPath.resolve(explicit: socketPath))
        return try attach(app: app, over: connection, name: name, middleware: middleware, startReading: startReading)
    }

    /// Attaches over a connection already open (e.g. after asking it for `status`).
    ///
    /// - Parameters:
    ///   - app: The app.
    ///   - connection: An open connection; the replica takes it over.
    ///   - name: A name for this replica.
    ///   - middleware: Local middleware, outermost first.
    ///   - startReading: Start applying the hub's actions right away; see ``startReading()``.
    /// - Returns: The attached replica.
    /// - Throws: ``ReplicaError`` when the hub refuses or the welcome does not decode.
    public static func attach(
        app: App,
        over connection: HubConnection,
        name: String? = nil,
        middleware: [Middleware<App.State, App.Action>] = [.thunk],
        startReading: Bool = true
    ) throws(ReplicaError) -> Replica {
        try connection.send(.hello(protocolVersion: syncProtocolVersion, app: App.name,
                                   fingerprint: App.fingerprint, name: name))
        let welcome = try connection.receive()
        guard case .welcome(let hub, let replica, let seq, let stateJSON, let digest) = welcome else {
            if case .error(let error) = welcome { throw .hub(error) }
            throw .protocolViolation("expected welcome after hello")
        }
        let state: App.State
        do {
            state = try app.decodeState(stateJSON)
        } catch {
            throw .diverged("the welcome state does not decode: \(error.message)")
        }
        guard app.digest(of: state) == digest else {
            throw .diverged("the welcome state re-encodes to digest \(app.digest(of: state)), the hub says \(digest)")
        }
        let replicaObject = Replica(app: app, connection: connection, state: state, replica: replica, hub: hub,
                                    seq: seq, middleware: middleware)
        if startReading { replicaObject.startReading() }
        return replicaObject
    }

    private init(app: App, connection: HubConnection, state: App.State, replica: Int, hub: String, seq: UInt64,
                 middleware: [Middleware<App.State, App.Action>]) {
        let upstream = Upstream(fd: connection.detachDescriptor())
        self.app = app
        self.upstream = upstream
        self.replicaID = replica
        self.hubID = hub
        self.welcomeSeq = seq
        self.socketPath = connection.path
        self.lastSeq = Atomic(seq)
        self.pendingDecoder = Mutex(connection.decoder)
        self.shared = Mutex(Shared())
        self.store = Store(
            initialState: state, reducer: app, enhancer: .applyMiddleware(middleware), history: nil, onError: nil,
            terminal: { action in
                upstream.send(.dispatch(id: upstream.makeID(), action: app.encodeAction(action)))
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
    /// ``ReplicaError/disconnected(_:)`` (and the registration is undone).
    private func awaitReply<T: Sendable>(
        register: @escaping (inout Shared, CheckedContinuation<T, any Error>) -> Void,
        send: () -> String?,
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
                if let failure = send(), let waiting = shared.withLock({ unregister(&$0) }) {
                    waiting.resume(throwing: ReplicaError.disconnected(failure))
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
    /// writes. It is one `status` round trip: the hub answers a connection's messages in
    /// order and sends every action it sequenced before the answer.
    ///
    /// - Returns: The seq applied here when the barrier completed.
    /// - Throws: ``ReplicaError/disconnected(_:)`` when the connection is gone.
    @discardableResult
    public func sync() async throws(ReplicaError) -> UInt64 {
        _ = try await status()
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
            self?.shared.withLock { $0.observers.removeAll { $0.id == id } }
        }
    }

    /// An `AsyncStream` of events; it finishes after the `disconnected` event.
    ///
    /// - Returns: The stream (unbounded buffer: every action, in order).
    public func events() -> AsyncStream<ReplicaEvent<App.Action>> {
        let (stream, continuation) = AsyncStream.makeStream(of: ReplicaEvent<App.Action>.self)
        let token = observeEvents { event in
            continuation.yield(event)
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
        case .error(let error):
            return .hub(error)
        case .welcome:
            return .protocolViolation("a second welcome")
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
                shared.closeWaiters = []
            }
            return shared
        }
        let failure = ReplicaError.disconnected(reason.description)
        for ack in shared.acks.values { ack.resume(throwing: failure) }
        for waiter in shared.statusWaiters { waiter.resume(throwing: failure) }
        for observer in shared.observers { observer.callback(.disconnected(reason)) }
        for waiter in shared.closeWaiters { waiter.resume(returning: reason) }
    }
}
