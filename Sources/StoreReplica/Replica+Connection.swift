import SyncLocks
import Dispatch
import SyncCore
import SyncPOSIX

extension Replica {
    /// The reader thread: reads and applies the stream; when the link drops, reconnects
    /// (per ``reconnect``) and goes on; when it ends for good, fails what waits and reports.
    func runConnection(decoder initial: FrameDecoder) {
        executor.readerStarted()
        var decoder = initial
        while true {
            let upstream = link.current
            let reason = readLoop(decoder: &decoder, upstream: upstream)
            upstream.closeDescriptor(reason: reason.description)
            guard shouldReconnect(after: reason) else {
                finish(reason)
                executor.readerEnded()
                return
            }
            dropped(reason)
            executor.runQueued()
            // After an upgrade to this replica's own version, the state comes whole from a
            // full welcome (the hub would send one anyway: the upgrade is not an action).
            let rehydrate = rehydrateAfterUpgrade.exchange(false, ordering: .acquiringAndReleasing)
            switch reconnectLoop(after: reason, resume: !reason.isDivergence && !rehydrate) {
            case .success(let next):
                decoder = next
            case .failure(let final):
                finish(final)
                executor.readerEnded()
                return
            }
        }
    }

    private func readLoop(decoder: inout FrameDecoder, upstream: Upstream) -> ReplicaError {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 << 10, alignment: 16)
        defer { buffer.deallocate() }
        var lastCheck = ContinuousClock.now
        var checkedSeq = lastSeq.load(ordering: .relaxed)
        while true {
            var resumeSynced = false
            if let failure = frameHandler(self, &decoder, &resumeSynced) { return failure }
            if resumeSynced { completeResume() }
            // Tasks this read resumed that prefer ``executor`` go on here, with no lock held;
            // if they queued more, the next wait for bytes does not block.
            let moreJobs = executor.runQueued()
            // While actions flow, compare digests with the hub about once per interval: a
            // replica whose reducer differs finds out within about that long, not at the next
            // checkpoint (every 10 000 actions by default).
            let seq = lastSeq.load(ordering: .relaxed)
            if seq != checkedSeq, let interval = Self.digestCheckInterval {
                let now = ContinuousClock.now
                // A large state is checked less often (see `digestCheckCost`).
                let spacing = max(interval, .nanoseconds(digestCheckCost.load(ordering: .relaxed)) * 1_000)
                if now - lastCheck >= spacing {
                    lastCheck = now
                    checkedSeq = seq
                    shared.withLock { $0.statusWaiters.append(nil) }
                    _ = upstream.send(.status(checked: digestReport()))
                }
            }
            // Jobs queued meanwhile (a task that yielded, or that woke another task on the
            // executor) run next, not after the hub's next message: the reader blocks in
            // `read` only when nothing waits to run.
            if moreJobs, !UnixSocket.waitUntil(upstream.fd, timeoutMilliseconds: 0) { continue }
            switch UnixSocket.read(upstream.fd, into: buffer) {
            case .bytes(let count):
                decoder.append(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
            case .wouldBlock:
                _ = UnixSocket.waitUntil(upstream.fd, timeoutMilliseconds: moreJobs ? 0 : -1)
            case .endOfFile:
                // An end of file without an `error` first: the hub process ended without its
                // goodbye (killed, crashed) or the connection was cut.
                return .disconnected(upstream.closedLocally ? "closed by this replica" : "the hub closed the connection without a word (it was killed, crashed, or lost its socket)")
            case .failed(let code):
                return .disconnected(SystemError.describe(errno: code))
            }
        }
    }

    /// Whether an end of the link is worth reconnecting after: the hub went away, restarted,
    /// shut down, or dropped this replica as a slow consumer. Not after this side closed,
    /// nor after a refusal or a protocol breach, which would only repeat.
    private func shouldReconnect(after reason: ReplicaError) -> Bool {
        guard reconnect.enabled, !shared.withLock({ $0.ledger.closing }) else { return false }
        switch reason {
        case .disconnected:
            return true
        case .hub(let error):
            // Not after `superseded`: another process uses this replica's session, and taking
            // it back would only make the two close each other in turn.
            return Self.isTransient(error)
        case .diverged:
            // Healed by a full welcome: the hub's state replaces the local one.
            return true
        case .noHub, .rejected, .protocolViolation, .cancelled:
            return false
        case .appOutdated:
            // The history runs a newer version: every attempt would be refused.
            return false
        }
    }

    /// Whether a hub's `error` ends only this connection (the hub stopping, dropping a slow
    /// consumer, timing out an idle one, not caught up with a shared log, too busy, or unable
    /// to hold a replica of a newer version until the upgrade), so attaching again (to this
    /// hub or another) makes sense.
    private static func isTransient(_ error: WireError) -> Bool {
        error.code == .shuttingDown || error.code == .slowConsumer || error.code == .timeout
            || error.code == .unavailable || error.code == .tooManyClients || error.code == .appAhead
    }

    /// What an `upgraded` notice ends: this replica, outdated (its terminal reason), unless
    /// the history now runs this replica's own version, which it then attaches to again (a
    /// full welcome brings the migrated state).
    ///
    /// - Parameter notice: The notice.
    /// - Returns: Why the connection ends.
    @usableFromInline
    func upgraded(_ notice: UpgradeNotice) -> ReplicaError {
        guard notice.to != App.fingerprint else {
            rehydrateAfterUpgrade.store(true, ordering: .releasing)
            return .disconnected("the history was upgraded from \(notice.from) to \(notice.to) at seq \(notice.seq), the version this replica runs; attaching again for the upgraded state")
        }
        return .appOutdated(.upgraded(notice, running: App.fingerprint))
    }

    /// The hub holds the `hello` (or, `app-ahead`, cannot hold it and is retried): records it
    /// and tells observers, unless a synthesised notice repeats a wait already reported.
    ///
    /// - Parameters:
    ///   - notice: What it waits for.
    ///   - fromHub: Whether the hub sent it (`waiting`), rather than this side making it from `app-ahead`.
    private func held(_ notice: WaitingNotice, fromHub: Bool) {
        registrar.willSet(self, keyPath: \.waiting)
        let observers = shared.withLock { shared -> [Observer]? in
            shared.ledger.held(notice, fromHub: fromHub) ? shared.observers : nil
        }
        registrar.didSet(self, keyPath: \.waiting)
        if let observers { notify(observers, .connection(.waiting(notice))) }
    }

    /// The notice reported while a hub answered `app-ahead` (it cannot hold this replica's
    /// `hello` now): what this replica waits for, and the hub's message.
    ///
    /// - Parameter error: The hub's error.
    /// - Returns: A notice with seq 0.
    static func aheadNotice(_ error: WireError) -> WaitingNotice {
        WaitingNotice(reason: "upgrade", fingerprint: App.fingerprint, seq: 0,
                      message: "the hub cannot hold this replica's hello now (\(error.rawCode): \(error.message)); retrying")
    }

    /// Fails the status and sync waits (they need this connection's answer) and tells
    /// observers. Dispatches stay pending: they are re-sent on the same session once the
    /// link is back, so each is applied exactly once and their callers get their seq.
    private func dropped(_ reason: ReplicaError) {
        let failure = ReplicaError.disconnected("the link to the hub dropped (\(reason.description)) before it answered; ask again once it is back")
        let seq = lastSeq.load(ordering: .acquiring)
        let (statusWaiters, syncWaiters, observers) = changingLinkState { shared.withLock { shared in
            defer {
                shared.statusWaiters = []
                shared.syncWaiters = []
                shared.ledger.dropped(divergence: reason.isDivergence)
            }
            return (shared.statusWaiters, shared.syncWaiters, shared.observers)
        } }
        for waiter in statusWaiters { waiter?.resume(throwing: failure) }
        for waiter in syncWaiters { waiter.resume(throwing: failure) }
        if case .diverged(let why) = reason {
            Console.error("StoreReplica: diverged from the hub at seq \(seq): \(why); re-hydrating from the hub's state")
            notify(observers, .connection(.diverged(seq: seq, reason: why)))
        } else {
            notify(observers, .connection(.dropped(reason: reason.plainMessage)))
        }
    }

    private func notify(_ observers: [Observer], _ event: ReplicaEvent<App.Action>) {
        for observer in observers { observer.callback(event) }
    }

    /// Tries to attach again until it works, the policy gives up, or the replica is closed.
    ///
    /// - Returns: The new connection's decoder (holding what followed its welcome), or why it ended.
    private func reconnectLoop(after reason: ReplicaError, resume: Bool) -> Result<FrameDecoder, ReplicaError> {
        var last = reason
        var attempt = 0
        while true {
            attempt += 1
            if let max = reconnect.maxAttempts, attempt > max {
                return .failure(.disconnected("gave up reconnecting after \(max) attempts: \(last.description)"))
            }
            let observers = changingLinkState {
                shared.withLock { shared in
                    shared.ledger.reconnecting(attempt: attempt)
                    return shared.observers
                }
            }
            notify(observers, .connection(.reconnecting(attempt: attempt)))
            // Tasks on ``executor`` that this resumed (a `linkChanges()` consumer) run before
            // the backoff, not after the outage.
            executor.runQueued()
            let delay = reconnect.delay(before: attempt)
            let (seconds, attoseconds) = delay.components
            let nanoseconds = max(0, Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000))
            _ = wakeReconnect.wait(timeout: .now() + .nanoseconds(nanoseconds))
            if shared.withLock({ $0.ledger.closing }) { return .failure(.disconnected("closed by this replica")) }
            // Hubs on one shared log take turns: the first attempt goes to the same hub, each
            // later one to the next socket.
            if attempt > 1, socketPaths.count > 1 {
                pathIndex.store((pathIndex.load(ordering: .relaxed) + 1) % socketPaths.count, ordering: .releasing)
            }
            do throws(ReplicaError) {
                return .success(try attachAgain(resume: resume))
            } catch {
                executor.runQueued()
                last = error
                // The history runs a newer version than this replica: retrying cannot help.
                if case .appOutdated = error { return .failure(error) }
                if case .hub(let wire) = error, wire.code == .appAhead { held(Self.aheadNotice(wire), fromHub: false) }
                if case .hub(let wire) = error, !Self.isTransient(wire) {
                    // The hub refuses this replica (another app, another protocol): retrying cannot help.
                    return .failure(error)
                }
                if case .diverged = error { return .failure(error) }
            }
        }
    }

    /// One attempt: connect, `hello` with `resume` (unless the state is to be replaced) and
    /// the session, take over the new connection, and re-send the pending dispatches.
    private func attachAgain(resume wantsResume: Bool) throws(ReplicaError) -> FrameDecoder {
        let connection = try HubConnection(path: socketPath)
        let resume = wantsResume ? history.map { ResumePoint(history: $0, seq: lastSeq.load(ordering: .acquiring)) } : nil
        // The dispatches still waiting for an answer: should the history have been upgraded past
        // this version meanwhile, the hub tells the fate of each before it refuses the hello
        // (`in_doubt`), so none is left unknown.
        let inDoubt = shared.withLock { shared in
            shared.ledger.pending.sorted { $0.value.order < $1.value.order }.prefix(ClientMessage.maxInDoubt).map(\.key)
        }
        try connection.send(.hello(protocolVersion: syncProtocolVersion, app: App.name, fingerprint: App.fingerprint,
                                   name: name, resume: resume, session: session, inDoubt: inDoubt))
        // A hub may hold the hello (this replica runs a newer version than the history) until
        // an upgrade, for as long as it takes, or until this replica is closed.
        let welcome = try Self.awaitWelcome(
            connection, readMilliseconds: 10_000, holdLimit: nil,
            stop: { [self] in shared.withLock { $0.ledger.closing } },
            onWaiting: { [self] notice in held(notice, fromHub: true) },
            onOutcome: { [self] message in settledBeforeWelcome(message) })
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
            agreedAfter.store(welcome.seq &+ 1, ordering: .relaxed)
            change = .rehydrated(seq: welcome.seq)
        }
        let new = Self.upstream(for: connection, welcome: welcome)
        let old = link.replace(with: new)
        old.closeDescriptor(reason: "replaced by a new connection")
        currentReplica.store(welcome.replica, ordering: .releasing)
        // The welcome ends a wait for an upgrade, if there was one (``waiting`` is observable).
        registrar.willSet(self, keyPath: \.waiting)
        defer { registrar.didSet(self, keyPath: \.waiting) }
        let (closing, orphaned) = shared.withLock { shared -> (Bool, [(DispatchID, ReplicaLedger.Pending?, ReplyWaiter<UInt64>?)]) in
            let before = shared.ledger.pending
            let ids = shared.ledger.welcomed(hub: welcome.hub, replica: welcome.replica, history: welcome.history,
                                             resumed: welcome.resumed, change: change)
            let orphaned = ids.map { id in (id, before[id], shared.acks.removeValue(forKey: id)) }
            return (shared.ledger.closing, orphaned)
        }
        // Dispatches made against the old history: never sent to this one (outside the lock).
        if !orphaned.isEmpty {
            let error = ReplicaError.rejected(WireError(.historyChanged, "the hub now serves another history (\(welcome.history ?? "?")) than the one this dispatch was made against; it was not sent, so it was not applied. Look at the new state and dispatch again if it still applies"))
            for (_, entry, ack) in orphaned {
                if let ack {
                    ack.resume(throwing: error)
                } else if let entry, !entry.awaited {
                    reportFailure(error, entry.json)
                }
            }
        }
        if closing {
            // close() ran while this attempt was under way: it closed the old link only.
            new.closeLocally()
            new.shutdown()
            throw .disconnected("closed by this replica")
        }
        if welcome.resumed {
            // The replay comes first: it acknowledges the pending dispatches the hub had
            // already sequenced. A `sync` marks its end; the reader re-sends what is still
            // pending only then (``completeResume()``), so a dispatch is never re-sent after
            // the hub has forgotten it (at most --dedup-window ids per session are kept).
            _ = new.send(.sync(id: Self.resumeSyncID))
            return connection.decoder
        }
        resendPending(change)
        return connection.decoder
    }

    /// A `duplicate` or `reject` the hub sent before its answer to a `hello` that resumed this
    /// replica's session (an outdated replica learns the outcome of each dispatch it has in
    /// doubt before the refusal): answers that dispatch as the stream would.
    private func settledBeforeWelcome(_ message: HubMessage) {
        switch message {
        case .duplicate(let id, let seq):
            let ack = shared.withLock { shared -> ReplyWaiter<UInt64>? in
                shared.ledger.duplicate(id) != nil ? shared.acks.removeValue(forKey: id) : nil
            }
            ack?.resume(returning: seq)
        case .reject(let id, let error):
            // As in the stream: the caller that awaits it gets the refusal, observers an event.
            let (ack, observers) = shared.withLock { shared in
                shared.ledger.rejected(id)
                return (shared.acks.removeValue(forKey: id), shared.observers)
            }
            ack?.resume(throwing: Self.refusal(error))
            notify(observers, .rejected(id: id, error: error))
        default:
            break
        }
    }

    /// The error a dispatch refused by the hub fails with: ``ReplicaError/appOutdated(_:)``
    /// for `app-outdated` (the history was upgraded before it was sequenced), else
    /// ``ReplicaError/rejected(_:)``.
    ///
    /// - Parameter error: The hub's `reject`.
    /// - Returns: The caller's error.
    @usableFromInline
    static func refusal(_ error: WireError) -> ReplicaError {
        guard error.code == .appOutdated else { return .rejected(error) }
        return .appOutdated(AppOutdated(fingerprint: App.fingerprint, notice: nil, error: error))
    }

    /// The `sync` id that marks the end of a resume's replay.
    @usableFromInline static var resumeSyncID: DispatchID { .string("storesync-resume") }

    /// How often, at most, the reader asks the hub for its digest while actions flow, to
    /// compare with its own at the same seq (`status`, answered in order); a difference is a
    /// divergence, healed by re-hydrating like a failed checkpoint. Costs the hub one digest
    /// of its state per replica per interval while actions flow; for a large state the
    /// interval grows (at least 1 000 times what one digest takes here).
    static var digestCheckInterval: Duration? { .seconds(1) }

    /// After a resume's replay (its `sync` came back): re-sends what is still pending and
    /// reports the link as back.
    private func completeResume() {
        guard let change = shared.withLock({ $0.ledger.completeResume() }) else { return }
        resendPending(change)
    }

    /// Re-sends the pending dispatches in order, then marks the link connected and tells
    /// observers. Same ids, same session: what the hub already sequenced is answered
    /// `duplicate`. Until every pending dispatch is re-sent, new ones queue behind them (the
    /// link still counts as reconnecting), so each replica's dispatches keep their order.
    private func resendPending(_ change: ConnectionChange) {
        let upstream = link.current
        var sentThrough = -1
        while true {
            let (next, observers) = changingLinkState { shared.withLock { shared in
                (shared.ledger.toResend(after: sentThrough), shared.observers)
            } }
            if next.isEmpty {
                notify(observers, .connection(change))
                break
            }
            for (order, id, action) in next {
                sentThrough = order
                if case .tooLarge(let error) = upstream.sendDispatch(id: id, action: action) {
                    failPending(id, .rejected(error))
                }
            }
        }
    }

    /// Fails one pending dispatch: its awaiting caller, or the failure report.
    private func failPending(_ id: DispatchID, _ error: ReplicaError) {
        let (entry, ack) = shared.withLock { shared in
            (shared.ledger.unsent(id), shared.acks.removeValue(forKey: id))
        }
        if let ack {
            ack.resume(throwing: error)
        } else if let entry, !entry.awaited {
            reportFailure(error, entry.json)
        }
    }

    /// The connection ended for good: fail every wait and report it.
    func finish(_ reason: ReplicaError) {
        link.current.closeDescriptor(reason: reason.description)
        registrar.willSet(self, keyPath: \.waiting)
        defer { registrar.didSet(self, keyPath: \.waiting) }
        let (ended, unanswered) = changingLinkState { () -> (Shared, [(id: DispatchID, pending: ReplicaLedger.Pending)]) in
            self.shared.withLock { shared in
                let left = shared.ledger.end(reason)
                defer {
                    shared.acks = [:]
                    shared.statusWaiters = []
                    shared.syncWaiters = []
                    shared.closeWaiters = []
                }
                return (shared, left)
            }
        }
        // The store's terminal no longer reaches this replica (the reference is released here,
        // outside every lock).
        withExtendedLifetime(self.submitter.clear()) {}
        let failure = ReplicaError.disconnected(reason.description)
        if case .appOutdated(let outdated) = reason {
            // The hub never applies them: not sequenced before the upgrade (or the refusal).
            let notApplied = ReplicaError.appOutdated(outdated.forDispatch)
            for ack in ended.acks.values { ack.resume(throwing: notApplied) }
            for entry in unanswered where !entry.pending.awaited { reportFailure(notApplied, entry.pending.json) }
        } else {
            for ack in ended.acks.values { ack.resume(throwing: failure) }
            // Fire-and-forget dispatches never answered: the hub may or may not have applied them.
            let neverAnswered = ReplicaError.disconnected("the link to the hub ended (\(reason.description)) before the hub answered this dispatch; it may or may not have been applied")
            for entry in unanswered where !entry.pending.awaited {
                reportFailure(neverAnswered, entry.pending.json)
            }
        }
        for waiter in ended.statusWaiters { waiter?.resume(throwing: failure) }
        for waiter in ended.syncWaiters { waiter.resume(throwing: failure) }
        for observer in ended.observers { observer.callback(.disconnected(reason)) }
        for waiter in ended.closeWaiters { waiter.resume(returning: reason) }
    }
}
