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
    ///   - onWaiting: Called (on the calling thread) when the hub holds this replica's `hello`:
    ///     the history runs an older version of the app, and the hub carries this one, so the
    ///     replica attaches once the history is upgraded (`replica-cli upgrade`). `attach` then
    ///     keeps waiting for as long as it takes. Also called once when a hub that cannot hold
    ///     it (`app-ahead`) is retried with `reconnect`'s backoff (``ReconnectPolicy/never``:
    ///     `app-ahead` is thrown at once).
    /// - Returns: The attached replica.
    /// - Throws: ``ReplicaError`` when there is no hub, or the hub refuses (e.g. `app-mismatch`;
    ///   ``ReplicaError/appOutdated(_:)`` when the history runs a newer version of the app).
    @inlinable
    public static func attach(
        app: App,
        socketPath: String? = nil,
        name: String? = nil,
        middleware: [Middleware<App.State, App.Action>] = [.thunk],
        startReading: Bool = true,
        reconnect: ReconnectPolicy = .automatic,
        session: String? = nil,
        onDispatchFailure: (@Sendable (ReplicaError, JSON) -> Void)? = nil,
        onWaiting: (@Sendable (WaitingNotice) -> Void)? = nil
    ) throws(ReplicaError) -> Replica {
        // `@inlinable` so that the reader's per-action path is compiled for `App` in the
        // caller's module (``specializedFrameHandler``), not as generic code.
        try connect(app: app, socketPath: socketPath, name: name, middleware: middleware, startReading: startReading,
                    reconnect: reconnect, session: session, onDispatchFailure: onDispatchFailure, onWaiting: onWaiting,
                    frameHandler: ReplicaSpecialization.handler(for: App.self) ?? specializedFrameHandler)
    }

    /// `attach(app:socketPath:…)` with the reader's frame handler.
    @usableFromInline
    static func connect(
        app: App, socketPath: String?, name: String?, middleware: [Middleware<App.State, App.Action>],
        startReading: Bool, reconnect: ReconnectPolicy, session: String?,
        onDispatchFailure: (@Sendable (ReplicaError, JSON) -> Void)?, onWaiting: (@Sendable (WaitingNotice) -> Void)? = nil,
        frameHandler: @escaping FrameHandler
    ) throws(ReplicaError) -> Replica {
        let paths = SocketPath.resolveList(explicit: socketPath, app: App.name)
        let connection = try HubConnection(paths: paths)
        return try attach(app: app, over: connection, paths: paths, name: name, middleware: middleware,
                          startReading: startReading, reconnect: reconnect, session: session,
                          welcomeTimeoutMilliseconds: 10_000, onDispatchFailure: onDispatchFailure, onWaiting: onWaiting,
                          frameHandler: frameHandler)
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
    ///   - onWaiting: Called when the hub holds the `hello` until the history is upgraded to
    ///     this replica's version (`attach` keeps waiting), or once when a hub that cannot hold
    ///     it (`app-ahead`) is retried; see `attach(app:socketPath:…)`.
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
        onDispatchFailure: (@Sendable (ReplicaError, JSON) -> Void)? = nil,
        onWaiting: (@Sendable (WaitingNotice) -> Void)? = nil
    ) throws(ReplicaError) -> Replica {
        try attach(app: app, over: connection, paths: connection.candidates, name: name, middleware: middleware,
                   startReading: startReading, reconnect: reconnect, session: session, welcomeTimeoutMilliseconds: 10_000,
                   onDispatchFailure: onDispatchFailure, onWaiting: onWaiting,
                   frameHandler: ReplicaSpecialization.handler(for: App.self) ?? specializedFrameHandler)
    }

    /// `attach(over:)` with the time to wait for the welcome and the reader's frame handler.
    ///
    /// - Parameters:
    ///   - welcomeTimeoutMilliseconds: The longest wait for each read of the welcome.
    ///   - holdLimit: The longest wait while the hub holds the `hello` (`waiting`), or retries
    ///     of `app-ahead` go on; `nil`: as long as it takes.
    @usableFromInline
    static func attach(
        app: App, over connection: HubConnection, paths: [String], name: String?, middleware: [Middleware<App.State, App.Action>],
        startReading: Bool, reconnect: ReconnectPolicy, session: String?, welcomeTimeoutMilliseconds: Int32,
        holdLimit: Duration? = nil, onDispatchFailure: (@Sendable (ReplicaError, JSON) -> Void)?,
        onWaiting: (@Sendable (WaitingNotice) -> Void)? = nil, frameHandler: @escaping FrameHandler
    ) throws(ReplicaError) -> Replica {
        let session = session ?? Digest.hex(UInt64.random(in: 0...UInt64.max)) + Digest.hex(UInt64.random(in: 0...UInt64.max))
        guard (1...ClientMessage.maxSessionBytes).contains(session.utf8.count) else {
            throw .protocolViolation("a session is 1 to \(ClientMessage.maxSessionBytes) bytes, got \(session.utf8.count)")
        }
        var connection = connection
        var attempt = 0
        var aheadSince: ContinuousClock.Instant?
        let welcome: Welcome
        while true {
            do throws(ReplicaError) {
                try connection.send(.hello(protocolVersion: syncProtocolVersion, app: App.name,
                                           fingerprint: App.fingerprint, name: name, session: session))
                welcome = try awaitWelcome(connection, readMilliseconds: welcomeTimeoutMilliseconds, holdLimit: holdLimit,
                                           stop: { false }, onWaiting: { notice in onWaiting?(notice) }, onOutcome: { _ in })
                break
            } catch .hub(let error) where error.code == .appAhead && reconnect.enabled {
                // The hub cannot hold this replica until the upgrade now (it holds as many as
                // it may): try again with the reconnection policy's backoff, saying so once.
                attempt += 1
                let now = ContinuousClock.now
                let since = aheadSince ?? now
                aheadSince = since
                if let max = reconnect.maxAttempts, attempt > max { throw .hub(error) }
                if let holdLimit, now - since >= holdLimit { throw .hub(error) }
                if attempt == 1 { onWaiting?(aheadNotice(error)) }
                connection.close()
                let (seconds, attoseconds) = reconnect.delay(before: attempt).components
                Thread.sleep(forTimeInterval: Double(seconds) + Double(attoseconds) / 1e18)
                connection = try HubConnection(paths: paths)
            }
        }
        let state = try Self.decodeWelcomeState(welcome, app: app)
        let replicaObject = Replica(app: app, connection: connection, paths: paths, state: state, welcome: welcome, name: name,
                                    session: session, middleware: middleware, reconnect: reconnect,
                                    onDispatchFailure: onDispatchFailure, frameHandler: frameHandler)
        if startReading { replicaObject.startReading() }
        return replicaObject
    }

    /// Waits for the answer to a `hello`: the welcome, after any `waiting` (the hub holds the
    /// `hello` until the history is upgraded to this replica's version) and any outcome of a
    /// dispatch in doubt (`duplicate`, `reject`) the hub sends first.
    ///
    /// - Parameters:
    ///   - connection: The connection the `hello` went out on.
    ///   - readMilliseconds: The longest wait for each read until the hub holds the `hello`.
    ///   - holdLimit: The longest hold after a `waiting` (`nil`: as long as it takes).
    ///   - stop: Checked while held: `true` ends the wait (the replica is closing).
    ///   - onWaiting: Told of each `waiting`.
    ///   - onOutcome: Given each `duplicate` and `reject` before the answer.
    /// - Returns: The welcome.
    /// - Throws: ``ReplicaError/appOutdated(_:)`` for `app-outdated`, ``ReplicaError/hub(_:)``
    ///   for any other `error`, ``ReplicaError/disconnected(_:)`` when the hub goes or is silent.
    static func awaitWelcome(_ connection: HubConnection, readMilliseconds: Int32, holdLimit: Duration?,
                             stop: () -> Bool, onWaiting: (WaitingNotice) -> Void,
                             onOutcome: (HubMessage) -> Void) throws(ReplicaError) -> Welcome {
        var heldSince: ContinuousClock.Instant?
        var heldFor = ""
        while true {
            var slice = readMilliseconds
            if let heldSince {
                // Held: wait in short slices, so a close (or the caller's limit) ends it promptly.
                if stop() { throw .disconnected("closed by this replica") }
                let elapsed = ContinuousClock.now - heldSince
                if let holdLimit {
                    guard elapsed < holdLimit else {
                        throw .disconnected("the hub at \(connection.path) held this replica's hello for \(holdLimit) waiting for the history to be upgraded to \(heldFor), and no upgrade came (replica-cli upgrade moves it)")
                    }
                    let left = (holdLimit - elapsed).components
                    slice = Int32(clamping: max(1, left.seconds * 1_000 + left.attoseconds / 1_000_000_000_000_000))
                }
                slice = min(slice < 0 ? 250 : slice, 250)
            }
            guard let message = try connection.nextMessage(timeoutMilliseconds: slice) else {
                if heldSince != nil { continue }
                throw .disconnected("no answer from the hub at \(connection.path) within \(readMilliseconds) ms; is it a StoreSync hub?")
            }
            switch message {
            case .welcome(let welcome):
                return welcome
            case .waiting(let notice):
                heldSince = heldSince ?? ContinuousClock.now
                heldFor = notice.fingerprint
                onWaiting(notice)
            case .error(let error) where error.code == .appOutdated:
                throw .appOutdated(AppOutdated(fingerprint: App.fingerprint, notice: nil, error: error))
            case .error(let error):
                throw .hub(error)
            case .duplicate, .reject:
                onOutcome(message)
            default:
                throw .protocolViolation("expected welcome after hello, got \(message.typeName)")
            }
        }
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
