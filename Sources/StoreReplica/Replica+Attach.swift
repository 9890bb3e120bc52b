import Foundation
import SyncCore
import SyncPOSIX

extension Replica {
    /// Connects to the hub and attaches (blocking until `welcome`, at most a few seconds).
    ///
    /// - Parameters:
    ///   - app: The app; its name and fingerprint must match the hub's.
    ///   - socketPath: The hub's socket, or several separated by commas (hubs on one shared log:
    ///     tried in order, and in turn when reconnecting); `nil` resolves the default (see
    ///     ``SocketPath/resolveList(explicit:)``).
    ///   - name: A name for this replica in the hub's status and logs.
    ///   - middleware: Local middleware, outermost first; thunks need ``Middleware/thunk`` (the default).
    ///   - startReading: Start applying the hub's actions right away (the default). Pass
    ///     `false` to register observers first, then call ``startReading()``: no event is missed.
    ///   - reconnect: How the connection comes back after a drop (default: automatically,
    ///     resuming where it left off); ``ReconnectPolicy/never`` makes the first end final.
    ///   - onDispatchFailure: Called when an action dispatched through ``store``
    ///     (fire-and-forget) could not be sent: the connection is gone, the action is larger
    ///     than the hub accepts, or too many are unanswered. Called after the dispatch returns,
    ///     on a serial queue of the replica's (in order, outside every lock, so it may dispatch
    ///     again). `nil` (the default) writes one line to stderr.
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
                    frameHandler: ReplicaSpecialization.handler(for: App.self) ?? specializedFrameHandler)
    }

    /// `attach(app:socketPath:…)` with the reader's frame handler.
    @usableFromInline
    static func connect(
        app: App, socketPath: String?, name: String?, middleware: [Middleware<App.State, App.Action>],
        startReading: Bool, reconnect: ReconnectPolicy, session: String?,
        onDispatchFailure: (@Sendable (ReplicaError, JSON) -> Void)?, frameHandler: @escaping FrameHandler
    ) throws(ReplicaError) -> Replica {
        let paths = SocketPath.resolveList(explicit: socketPath, app: App.name)
        let connection = try HubConnection(paths: paths)
        return try attach(app: app, over: connection, paths: paths, name: name, middleware: middleware,
                          startReading: startReading, reconnect: reconnect, session: session,
                          welcomeTimeoutMilliseconds: 10_000, onDispatchFailure: onDispatchFailure, frameHandler: frameHandler)
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
        try attach(app: app, over: connection, paths: connection.candidates, name: name, middleware: middleware,
                   startReading: startReading, reconnect: reconnect, session: session, welcomeTimeoutMilliseconds: 10_000,
                   onDispatchFailure: onDispatchFailure, frameHandler: ReplicaSpecialization.handler(for: App.self) ?? specializedFrameHandler)
    }

    /// `attach(over:)` with the time to wait for the welcome and the reader's frame handler.
    @usableFromInline
    static func attach(
        app: App, over connection: HubConnection, paths: [String], name: String?, middleware: [Middleware<App.State, App.Action>],
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
        let replicaObject = Replica(app: app, connection: connection, paths: paths, state: state, welcome: welcome, name: name,
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

}
