import Foundation
import SyncCore
import SyncPOSIX

extension Replica {
    /// Connects and attaches without blocking the calling task's thread: the connect and the
    /// `hello`/`welcome` exchange run on a thread of their own while the task is suspended.
    ///
    /// The same as the synchronous `attach(app:socketPath:…)`, with a deadline for the welcome.
    ///
    /// - Parameters:
    ///   - app: The app; its name and fingerprint must match the hub's.
    ///   - socketPath: The hub's socket, or several separated by commas (hubs on one shared log:
    ///     tried in order, and in turn when reconnecting); `nil` resolves the default (see
    ///     ``SocketPath/resolveList(explicit:)``).
    ///   - name: A name for this replica in the hub's status and logs.
    ///   - middleware: Local middleware, outermost first.
    ///   - reconnect: How the connection comes back after a drop (default: automatically).
    ///   - session: This replica's session; `nil` picks a random one.
    ///   - startReading: Start applying the hub's actions right away (the default); `false`
    ///     lets observers register first, then call ``startReading()``.
    ///   - timeout: How long to wait for the hub's welcome; each read of it waits at most this
    ///     long (a hub whose state is large takes longer to send it).
    ///   - onDispatchFailure: Receives fire-and-forget dispatches that could not be sent, on a
    ///     serial queue of the replica's, after the dispatch returns (as for the blocking attach).
    ///   - onWaiting: Called (on the attaching thread) when the hub holds the `hello` until the
    ///     history is upgraded to this replica's version, or once when a hub that cannot hold
    ///     it (`app-ahead`) is retried with `reconnect`'s backoff. The wait then lasts at most
    ///     `timeout` more (cancel the task to end it sooner).
    /// - Returns: The attached replica (reading, unless `startReading` is `false`).
    /// - Throws: ``ReplicaError``: no hub, a refusal (`app-mismatch`, …;
    ///   ``ReplicaError/appOutdated(_:)`` when the history runs a newer version), or no welcome in time.
    @inlinable
    public static func attach(
        app: App,
        socketPath: String? = nil,
        name: String? = nil,
        middleware: [Middleware<App.State, App.Action>] = [.thunk],
        reconnect: ReconnectPolicy = .automatic,
        session: String? = nil,
        startReading: Bool = true,
        timeout: Duration,
        onDispatchFailure: (@Sendable (ReplicaError, JSON) -> Void)? = nil,
        onWaiting: (@Sendable (WaitingNotice) -> Void)? = nil
    ) async throws(ReplicaError) -> Replica {
        // `@inlinable` for the same reason as the synchronous `attach`: the reader's per-action
        // path is specialised for `App` where this is called.
        try await attachAsync(app: app, socketPath: socketPath, name: name, middleware: middleware, reconnect: reconnect,
                              session: session, startReading: startReading, timeout: timeout,
                              onDispatchFailure: onDispatchFailure, onWaiting: onWaiting,
                              frameHandler: ReplicaSpecialization.handler(for: App.self) ?? specializedFrameHandler)
    }

    /// The async `attach` with the reader's frame handler.
    @usableFromInline
    static func attachAsync(
        app: App, socketPath: String?, name: String?, middleware: [Middleware<App.State, App.Action>],
        reconnect: ReconnectPolicy, session: String?, startReading: Bool, timeout: Duration,
        onDispatchFailure: (@Sendable (ReplicaError, JSON) -> Void)?, onWaiting: (@Sendable (WaitingNotice) -> Void)? = nil,
        frameHandler: @escaping FrameHandler
    ) async throws(ReplicaError) -> Replica {
        let paths = SocketPath.resolveList(explicit: socketPath, app: App.name)
        let (seconds, attoseconds) = timeout.components
        // Saturating: a huge timeout is "a very long time", never an overflow.
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000)
        let total = overflow ? Int64.max : scaled.addingReportingOverflow(attoseconds / 1_000_000_000_000_000).partialValue
        let milliseconds = Int32(clamping: max(1, total))
        // Cancelling the task ends the wait at once with `cancelled`; the attach thread then
        // finishes on its own and closes the replica nobody is waiting for.
        return try await ReplyWaiter<Replica>().wait { waiter in
            let thread = Thread {
                do throws(ReplicaError) {
                    let connection = try HubConnection(paths: paths)
                    let replica = try attach(
                        app: app, over: connection, paths: paths, name: name, middleware: middleware, startReading: startReading,
                        reconnect: reconnect, session: session, welcomeTimeoutMilliseconds: milliseconds, holdLimit: timeout,
                        onDispatchFailure: onDispatchFailure, onWaiting: onWaiting, frameHandler: frameHandler)
                    if !waiter.resume(returning: replica) { replica.close() }
                } catch {
                    waiter.resume(throwing: error)
                }
            }
            thread.name = "StoreSync attach"
            thread.start()
        }
    }

    /// The link's life as an `AsyncSequence`: every ``ConnectionChange`` (dropped, reconnecting,
    /// resumed, re-hydrated, diverged) in order; it finishes when the replica ends for good.
    ///
    /// - Returns: The stream (it buffers every change until read).
    public func linkChanges() -> AsyncStream<ConnectionChange> {
        let (stream, continuation) = AsyncStream.makeStream(of: ConnectionChange.self)
        let token = observeEvents { event in
            switch event {
            case .connection(let change): continuation.yield(change)
            case .disconnected: continuation.finish()
            default: break
            }
        }
        continuation.onTermination = { _ in token.cancel() }
        if case .disconnected = linkState { continuation.finish() }
        return stream
    }
}
