import Dispatch
import SyncCore
import SyncPOSIX

extension Replica {
    /// The reader thread: reads and applies the stream; when the link drops, reconnects
    /// (per ``reconnect``) and goes on; when it ends for good, fails what waits and reports.
    func runConnection(decoder initial: FrameDecoder) {
        var decoder = initial
        while true {
            let upstream = link.current
            let reason = readLoop(decoder: &decoder, upstream: upstream)
            upstream.closeDescriptor(reason: reason.description)
            guard shouldReconnect(after: reason) else {
                finish(reason)
                return
            }
            dropped(reason)
            switch reconnectLoop(after: reason) {
            case .success(let next):
                decoder = next
            case .failure(let final):
                finish(final)
                return
            }
        }
    }

    private func readLoop(decoder: inout FrameDecoder, upstream: Upstream) -> ReplicaError {
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

    /// Whether an end of the link is worth reconnecting after: the hub went away, restarted,
    /// shut down, or dropped this replica as a slow consumer. Not after this side closed,
    /// nor after a refusal or a protocol breach, which would only repeat.
    private func shouldReconnect(after reason: ReplicaError) -> Bool {
        guard reconnect.enabled, !shared.withLock({ $0.closing }) else { return false }
        switch reason {
        case .disconnected:
            return true
        case .hub(let error):
            return error.code == .shuttingDown || error.code == .slowConsumer
        case .noHub, .rejected, .protocolViolation, .diverged:
            return false
        }
    }

    /// Fails every wait that needs an answer from the dropped connection, and tells observers.
    private func dropped(_ reason: ReplicaError) {
        let failure = ReplicaError.disconnected("the link to the hub dropped (\(reason.description)) before it answered; a dispatch may or may not have been applied — check the state once reconnected")
        let (acks, statusWaiters, syncWaiters, observers) = shared.withLock { shared in
            defer {
                shared.acks = [:]
                shared.statusWaiters = []
                shared.syncWaiters = []
                shared.linkState = .reconnecting(attempt: 1)
            }
            return (shared.acks, shared.statusWaiters, shared.syncWaiters, shared.observers)
        }
        for ack in acks.values { ack.resume(throwing: failure) }
        for waiter in statusWaiters { waiter.resume(throwing: failure) }
        for waiter in syncWaiters { waiter.resume(throwing: failure) }
        notify(observers, .connection(.dropped(reason: reason.description)))
    }

    private func notify(_ observers: [(id: Int, callback: @Sendable (ReplicaEvent<App.Action>) -> Void)],
                        _ event: ReplicaEvent<App.Action>) {
        for observer in observers { observer.callback(event) }
    }

    /// Tries to attach again until it works, the policy gives up, or the replica is closed.
    ///
    /// - Returns: The new connection's decoder (holding what followed its welcome), or why it ended.
    private func reconnectLoop(after reason: ReplicaError) -> Result<FrameDecoder, ReplicaError> {
        var last = reason
        var attempt = 0
        while true {
            attempt += 1
            if let max = reconnect.maxAttempts, attempt > max {
                return .failure(.disconnected("gave up reconnecting after \(max) attempts: \(last.description)"))
            }
            let observers = shared.withLock { shared in
                shared.linkState = .reconnecting(attempt: attempt)
                return shared.observers
            }
            notify(observers, .connection(.reconnecting(attempt: attempt)))
            let delay = reconnect.delay(before: attempt)
            let (seconds, attoseconds) = delay.components
            let nanoseconds = max(0, Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
            _ = wakeReconnect.wait(timeout: .now() + .nanoseconds(nanoseconds))
            if shared.withLock({ $0.closing }) { return .failure(.disconnected("closed by this replica")) }
            do throws(ReplicaError) {
                return .success(try attachAgain())
            } catch {
                last = error
                if case .hub(let wire) = error, wire.code != .shuttingDown, wire.code != .slowConsumer {
                    // The hub refuses this replica (another app, another protocol): retrying cannot help.
                    return .failure(error)
                }
                if case .diverged = error { return .failure(error) }
            }
        }
    }

    /// One attempt: connect, `hello` with `resume`, and take over the new connection.
    private func attachAgain() throws(ReplicaError) -> FrameDecoder {
        let connection = try HubConnection(path: socketPath)
        let resume = history.map { ResumePoint(history: $0, seq: lastSeq.load(ordering: .acquiring)) }
        try connection.send(.hello(protocolVersion: syncProtocolVersion, app: App.name, fingerprint: App.fingerprint,
                                   name: name, resume: resume))
        let reply = try connection.receive()
        guard case .welcome(let welcome) = reply else {
            if case .error(let error) = reply { throw .hub(error) }
            throw .protocolViolation("expected welcome after hello, got \(reply.typeName)")
        }
        let change: ConnectionChange
        if welcome.resumed {
            guard let resume, welcome.seq == resume.seq else {
                throw .protocolViolation("the hub resumed at seq \(welcome.seq), this replica asked for \(resume?.seq ?? 0)")
            }
            change = .resumed(seq: welcome.seq)
        } else {
            // Another history, a gap the hub cannot fill, or a hub behind this replica: the
            // hub's state replaces the local one (state never silently goes back in time
            // within a history: a full welcome is a reset, reported as such).
            let state = try Self.decodeWelcomeState(welcome, app: app)
            store.replaceState(state)
            lastSeq.store(welcome.seq, ordering: .releasing)
            change = .rehydrated(seq: welcome.seq)
        }
        let old = link.replace(with: Self.upstream(for: connection, welcome: welcome))
        old.closeDescriptor(reason: "replaced by a new connection")
        currentReplica.store(welcome.replica, ordering: .releasing)
        let observers = shared.withLock { shared in
            shared.hubID = welcome.hub
            if let history = welcome.history { shared.history = history }
            shared.linkState = .connected
            return shared.observers
        }
        notify(observers, .connection(change))
        return connection.decoder
    }

    /// The connection ended for good: fail every wait and report it.
    func finish(_ reason: ReplicaError) {
        link.current.closeDescriptor(reason: reason.description)
        let shared = shared.withLock { shared -> Shared in
            shared.endReason = reason
            shared.linkState = .disconnected(reason)
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
