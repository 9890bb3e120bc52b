#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import SyncCore
import SyncPOSIX
import Synchronization

/// The hub's event loop: owns the listening socket and every connection's descriptor, waits
/// for readiness (of the sockets, and of the log when it has a descriptor), reads frames,
/// hands each to ``HubProtocol`` (a pure decision), submits what it decides to the
/// ``RequestPipeline`` and the ``Sequencer``, pumps the sequencer once per pass, releases
/// answers, and writes.
///
/// Single-threaded by design: `serve` runs on one thread and nothing else touches this
/// object, its connections, the sequencer or the log. Debug builds check it: `serve` claims
/// the loop and the sequencer for its thread (``ThreadOwner``), and their entry points stop a
/// call from any other. Not generic: the app is reached
/// through the sequencer's engine, specialised for it.
///
/// **Exclusivity.** The stored `var`s of this class and of the per-action classes under it
/// (``Connection``, ``Sequencer``, ``Proposer``, ``Applier``, ``Backlog``, `MemoryLog`,
/// `HubEngine.States`) are `@exclusivity(unchecked)`: the runtime's dynamic check of each
/// class-property access (a thread-local access set, entered and left about 27 times per
/// action) cost 15 % of the hub's instructions. It is safe to drop because (1) only the
/// loop thread touches these objects (above), so no two threads can overlap; (2) these
/// properties are private or loop-internal, and no code here keeps an `inout` access to one
/// of them open across a call that could reach the same property (the reducer, the only
/// user code, gets the state inout and holds no reference to the hub). Static checks still
/// apply to everything else; a new property on these classes must meet (2) to carry the
/// attribute.
final class HubLoop {
    let configuration: HubConfiguration
    let hubID: String
    let sequencer: Sequencer
    private let facts: HubFacts
    @exclusivity(unchecked) private var policy: AccessPolicy
    private let maxClients: Int
    /// Whether shutdown removed the socket file (it does not when the path now names another file).
    @exclusivity(unchecked) private(set) var socketRemoved = false
    /// Why the loop stopped serving on its own (the log broke), if it did.
    @exclusivity(unchecked) private(set) var brokenLog: StorageError?

    @exclusivity(unchecked) private var connections: [Int32: Connection] = [:]
    /// The connection attached with each session (a newer `hello` with it supersedes).
    @exclusivity(unchecked) private var sessionOwners: [JSONKey: Connection] = [:]
    /// Attached replicas in attach order.
    @exclusivity(unchecked) private var attached: [Connection] = []
    @exclusivity(unchecked) private var pipeline = RequestPipeline()
    private let readBuffer: UnsafeMutableRawBufferPointer
    /// Stop reading from a connection holding more unhandled input than this.
    private let maxBufferedInput: Int
    @exclusivity(unchecked) private var lastWatchdog = ContinuousClock.now
    private let watchdogInterval: Duration?
    /// When refusals of too many clients were last logged (once a second at most).
    @exclusivity(unchecked) private var lastRefusalLog: ContinuousClock.Instant?
    @exclusivity(unchecked) private var refusalsSinceLog = 0
    /// Who is admitted, in words: named once, before serving (NSS look-ups, never on the loop).
    private let admittedDescription: String
    /// User names for refusal lines, looked up off the loop thread.
    private let accountNames = AccountNames()
    /// The thread running ``serve``: debug builds check it where the loop hands work on.
    private var owner = ThreadOwner()

    init(sequencer: Sequencer, configuration: HubConfiguration, hubID: String) {
        self.sequencer = sequencer
        self.configuration = configuration
        self.hubID = hubID
        self.facts = HubFacts(appName: sequencer.engine.appName, fingerprint: sequencer.engine.fingerprint,
                              history: sequencer.history)
        self.policy = AccessPolicy(hubUID: geteuid(), allowedUIDs: configuration.allowedUIDs, group: configuration.socketGroup)
        self.admittedDescription = policy.description
        self.maxClients = configuration.effectiveMaxClients
        self.maxBufferedInput = configuration.maxFrameBytes + HubConfiguration.Defaults.inputSlackBytes
        self.watchdogInterval = configuration.notifySystemd ? Systemd.watchdogInterval : nil
        self.readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: HubConfiguration.Defaults.inputSlackBytes,
                                                                 alignment: 16)
    }

    deinit { readBuffer.deallocate() }

    /// The seq of the last applied action.
    var seq: UInt64 { sequencer.appliedSeq }

    /// Who may attach, for the start-up line.
    var accessDescription: String { admittedDescription }

    /// The connection limit in force.
    var clientLimit: Int { maxClients }

    // MARK: - Event loop

    /// Runs the loop until a stop is requested (or the log breaks), then shuts down.
    ///
    /// - Throws: ``SystemError`` when `poll` itself fails; every connection is closed and the
    ///   socket released first, so nothing leaks.
    func serve(listener: ListeningSocket, wake: Int32, stopFD: Int32?,
               stopRequested: borrowing Atomic<Bool>) throws(SystemError) {
        var failure: SystemError?
        var pollSet: [pollfd] = []
        var order: [Connection] = []
        // The connections whose frames this pass handled: written first, so a dispatcher's
        // own action (its acknowledgement) leaves before the other replicas' copies.
        var spoke: [Connection] = []
        var idle: [Connection] = []
        // From here on this thread alone drives the loop and the sequencer (checked in debug builds).
        owner.claim()
        sequencer.owner.claim()
        while !stopRequested.load(ordering: .relaxed) {
            pollSet.removeAll(keepingCapacity: true)
            order.removeAll(keepingCapacity: true)
            var now = ContinuousClock.now
            if let until = acceptPausedUntil, now >= until { acceptPausedUntil = nil }
            // While accepting is paused (out of descriptors), poll ignores the listener (fd -1).
            pollSet.append(pollfd(fd: acceptPausedUntil == nil ? listener.fd : -1, events: Int16(POLLIN), revents: 0))
            pollSet.append(pollfd(fd: wake, events: Int16(POLLIN), revents: 0))
            pollSet.append(pollfd(fd: stopFD ?? -1, events: Int16(POLLIN), revents: 0))
            let readiness = sequencer.log.readiness
            pollSet.append(pollfd(fd: readiness?.fd ?? -1,
                                  events: Int16(POLLIN) | (readiness?.wantsWrite == true ? Int16(POLLOUT) : 0), revents: 0))
            let fixed = pollSet.count
            var timers = acceptPausedUntil != nil || sequencer.unavailableReason != nil
            var framesWaiting = false
            let judging = sequencer.isJudging
            for connection in connections.values {
                var events: Int16 = 0
                if connection.isClosing {
                    timers = true
                } else if connection.ending {
                    // Waiting for its last answers: nothing more is read from it.
                    checkWelcomeDeadline(connection, now: now, timers: &timers)
                } else {
                    // Input is bounded: past one frame and one read of unhandled bytes, or a
                    // backlog of unread replies, the hub stops reading until it drains.
                    if !connection.inputEnded, connection.decoder.bufferedByteCount <= maxBufferedInput,
                       connection.output.privateBytes <= HubConfiguration.Defaults.replyBacklogBytes {
                        events |= Int16(POLLIN)
                    }
                    if connection.moreFrames, judging { framesWaiting = true }
                    // Not attached yet, or half a frame buffered: it must make progress in time.
                    if case .greeting = connection.state {
                        timers = true
                        if now - connection.lastFrameAt > configuration.idleTimeout { idle.append(connection) }
                    } else if let since = connection.partialSince {
                        timers = true
                        if now - since > configuration.idleTimeout { idle.append(connection) }
                    }
                    if connection.awaitingWelcome != nil { timers = true }
                    checkWelcomeDeadline(connection, now: now, timers: &timers)
                }
                if owes(connection) { events |= Int16(POLLOUT) }
                // Nothing wanted from it now: left out of the poll (a negative descriptor), since
                // poll reports POLLHUP whatever was asked, and a peer that hung up while its
                // frames wait would wake the loop at once, again and again.
                pollSet.append(pollfd(fd: events == 0 ? -1 : connection.fd, events: events, revents: 0))
                order.append(connection)
            }
            for connection in idle where !connection.isClosing {
                fail(connection, WireError(.timeout, "no complete hello, status or sync (or half a frame held) for \(configuration.idleTimeout) (--idle-timeout); connect again and send a whole frame"))
            }
            idle.removeAll(keepingCapacity: true)
            // Proposals judged in the last round of the previous pass are committed by the
            // next pass's pump: it runs at once.
            var timeout: Int32 = framesWaiting || sequencer.hasUnflushedProposals ? 0 : (timers ? 100 : -1)
            if let deadline = sequencer.log.nextDeadline { timeout = Self.sooner(timeout, until: deadline, now: now) }
            if let watchdogInterval { timeout = Self.sooner(timeout, until: lastWatchdog + watchdogInterval, now: now) }
            let ready = poll(&pollSet, nfds_t(pollSet.count), timeout)
            if ready < 0 {
                if currentErrno() == EINTR { continue }
                failure = SystemError.lastCall("poll")
                break
            }
            now = .now
            if pollSet[1].revents != 0 { drainPipe(wake) }
            if pollSet[2].revents != 0 { break }
            if pollSet[0].revents != 0 { acceptAll(listener.fd) }
            for (index, connection) in order.enumerated() {
                guard connections[connection.fd] === connection, !connection.isClosing else { continue }
                let revents = pollSet[index + fixed].revents
                if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0, !connection.inputEnded, !connection.ending,
                   pollSet[index + fixed].events & Int16(POLLIN) != 0 {
                    guard readFrom(connection) else { continue }
                } else if !connection.moreFrames || connection.ending {
                    continue
                }
                handleFrames(connection)
                spoke.append(connection)
            }
            pump(now: now)
            if brokenLog != nil { break }
            admitWaitingReplicas(now: now)
            writeAll(first: spoke)
            spoke.removeAll(keepingCapacity: true)
            reapClosing(now: now)
            if let watchdogInterval, now - lastWatchdog >= watchdogInterval {
                lastWatchdog = now
                Systemd.notify("WATCHDOG=1")
            }
        }
        shutdown(listener: listener)
        if let failure { throw failure }
    }

    /// Fails a connection that has not read its full `welcome` by `--welcome-timeout`.
    private func checkWelcomeDeadline(_ connection: Connection, now: ContinuousClock.Instant, timers: inout Bool) {
        guard let deadline = connection.welcomeDeadline else { return }
        timers = true
        if connection.output.writtenTotal >= connection.welcomeEnd {
            connection.welcomeDeadline = nil
        } else if now >= deadline {
            fail(connection, WireError(.slowConsumer, "the welcome (\(connection.output.privateBytes) bytes still unread) was not read within \(configuration.welcomeTimeout) (--welcome-timeout); read the socket, then attach again"))
        }
    }

    /// A poll timeout (ms, -1 forever) no later than `deadline`.
    private static func sooner(_ timeout: Int32, until deadline: ContinuousClock.Instant, now: ContinuousClock.Instant) -> Int32 {
        let left = max(0, Int(nanoseconds: deadline - now) / 1_000_000 + 1)
        let milliseconds = Int32(clamping: left)
        return timeout < 0 ? milliseconds : min(timeout, milliseconds)
    }

    private func drainPipe(_ fd: Int32) {
        var scratch = [UInt8](repeating: 0, count: 64)
        while scratch.withUnsafeMutableBytes({ read(fd, $0.baseAddress, $0.count) }) > 0 {}
    }

    // MARK: - The sequencer's pass

    /// Runs the sequencer's pass (the log's group commit and what it reports), judges again
    /// what was voided, and releases the answers the applied seq now allows.
    private func pump(now: ContinuousClock.Instant) {
        owner.check()
        for _ in 0..<4 {
            let result = sequencer.pump(now: now)
            if let broken = result.broken {
                brokenLog = broken
                configuration.logger.notice("\(broken.message)")
                return
            }
            if let voidedFrom = result.voidedFrom { pipeline.void(from: voidedFrom) }
            // On a shared log, attached replicas hear when the hub stops and starts taking
            // dispatches (a client that does not know the message ignores it). A hub with a
            // log of its own says nothing new: its refusals and `status` tell, as they always did.
            if sequencer.log.isShared, let reason = result.becameUnavailable {
                broadcast(.log(available: false, reason: reason, seq: sequencer.appliedSeq))
            } else if sequencer.log.isShared, result.becameAvailable {
                broadcast(.log(available: true, reason: nil, seq: sequencer.appliedSeq))
            }
            let before = sequencer.inFlightCount
            if sequencer.isJudging, pipeline.hasUnjudged {
                pipeline.judgeWaiting(skip: { [connections] connection in connections[connection.fd] !== connection || connection.isClosing },
                                      judge: judge, deliverNow: deliverNow)
            }
            release()
            // Proposals made while judging again are committed in this same pass (after the
            // fourth round, by the next pass, which then runs without waiting).
            guard sequencer.inFlightCount > before || (sequencer.inFlightCount > 0 && !sequencer.log.isShared) else { break }
        }
    }

    /// Delivers every answer whose actions are applied, each gated right after the frame of
    /// the last action judged before it.
    private func release() {
        pipeline.release(upTo: sequencer.appliedSeq) { connection, judgment, after in
            deliver(judgment, to: connection, after: after)
        }
    }

    // MARK: - Accepting

    /// Set while new connections are not accepted because accepting failed (e.g. the process
    /// is out of file descriptors): the listener stays readable, so polling it would spin.
    @exclusivity(unchecked) private var acceptPausedUntil: ContinuousClock.Instant?
    /// Whether the last accept failed (so the failure is logged once, not every 100 ms).
    @exclusivity(unchecked) private var acceptFailing = false
    /// The number of connections admitted so far: each new ``Connection`` gets the next value
    /// as its ``Connection/acceptOrder``, so of two connections of one session the hub can
    /// tell which the client opened last, whatever order their hellos arrive in.
    @exclusivity(unchecked) private var admittedCount: UInt64 = 0

    private func acceptAll(_ listener: Int32) {
        while true {
            do {
                guard let fd = try UnixSocket.accept(listener) else { return }
                if acceptFailing {
                    acceptFailing = false
                    configuration.logger.notice("accepting connections again")
                }
                guard let peer = PeerCredentials.of(fd) else {
                    refuse(fd, WireError(.forbidden, "the hub cannot tell which user connected (no peer credentials); connection refused"))
                    continue
                }
                guard policy.admits(peer, groups: { PeerCredentials.groups(of: fd) }) else {
                    // The name is looked up off this thread (a slow NSS must not stall the loop).
                    let logger = configuration.logger, admitted = admittedDescription
                    accountNames.withName(peer.uid) { name in
                        logger.info("refused uid \(peer.uid) (\(name)) pid \(peer.pid): not admitted (admitted: \(admitted))")
                    }
                    refuse(fd, WireError(.forbidden, "uid \(peer.uid) may not use this hub (it admits \(admittedDescription)); ask its operator to run it with --allow-uid \(peer.uid) or --socket-group"))
                    continue
                }
                guard connections.count < maxClients else {
                    refusalsSinceLog += 1
                    if lastRefusalLog.map({ ContinuousClock.now - $0 >= .seconds(1) }) ?? true {
                        configuration.logger.info("refused \(refusalsSinceLog) connection(s): \(connections.count) clients already (--max-clients \(maxClients))")
                        lastRefusalLog = .now
                        refusalsSinceLog = 0
                    }
                    refuse(fd, WireError(.tooManyClients, "this hub already serves \(connections.count) clients, its limit (--max-clients \(maxClients)); try again later, or ask its operator to raise the limit"))
                    continue
                }
                admittedCount += 1
                connections[fd] = Connection(fd: fd, maxFrameBytes: configuration.maxFrameBytes, peer: peer,
                                             acceptOrder: admittedCount)
            } catch {
                // Connected clients carry on; new ones wait in the listen backlog meanwhile,
                // and accepting is retried every 100 ms.
                if !acceptFailing {
                    acceptFailing = true
                    configuration.logger.notice("cannot accept new connections: \(error.message); waiting clients stay queued and accepting is retried every 100 ms (raise the open-files limit, ulimit -n, or lower --max-clients)")
                }
                acceptPausedUntil = .now + .milliseconds(100)
                return
            }
        }
    }

    /// Tells a connection it is refused and closes it at once (the socket's buffer is empty,
    /// so the one small frame goes out without waiting).
    private func refuse(_ fd: Int32, _ error: WireError) {
        if let frame = try? Frame.encode(HubMessage.error(error)) {
            _ = frame.withUnsafeBytes { UnixSocket.write(fd, $0, dontWait: true) }
        }
        UnixSocket.close(fd)
    }

    // MARK: - Reading and handling frames

    /// The most frames handled for one connection per loop pass, so that a client
    /// pipelining many frames cannot keep the loop from everyone else.
    private static let framesPerPass = 256

    /// How long a replica resuming ahead of this hub (on a shared log) waits for it to catch up.
    static let catchUpDeadline: Duration = .seconds(10)

    /// Hands the welcome of every replica that waited for this hub to catch up to the
    /// pipeline once it has; refuses (`unavailable`) those whose deadline passed.
    private func admitWaitingReplicas(now: ContinuousClock.Instant) {
        for connection in connections.values {
            guard let waiting = connection.awaitingWelcome, !connection.isClosing else { continue }
            if sequencer.appliedSeq >= waiting.resume.seq {
                connection.awaitingWelcome = nil
                submit(connection, .welcome(replica: waiting.replica, resume: waiting.resume))
                connection.moreFrames = true
            } else if now >= waiting.deadline {
                connection.awaitingWelcome = nil
                fail(connection, WireError(.unavailable, "this hub has applied seq \(sequencer.appliedSeq), behind the seq \(waiting.resume.seq) this replica resumes from, and did not catch up within \(Self.catchUpDeadline); attach to another hub of the same log, or again later"))
            }
        }
    }

    /// Reads what one connection has sent into its decoder.
    ///
    /// - Returns: Whether the connection is still open.
    private func readFrom(_ connection: Connection) -> Bool {
        let room = min(readBuffer.count, max(4096, maxBufferedInput - connection.decoder.bufferedByteCount))
        switch UnixSocket.read(connection.fd, into: UnsafeMutableRawBufferPointer(rebasing: readBuffer[0..<room])) {
        case .bytes(let count):
            connection.decoder.append(UnsafeRawBufferPointer(rebasing: readBuffer[0..<count]))
            if connection.partialSince == nil { connection.partialSince = .now }
            connection.moreFrames = true
        case .wouldBlock:
            break
        case .endOfFile:
            // The client is done sending (closed, or half-closed with SHUT_WR). Frames already
            // buffered are still handled; then it gets what is queued for it, and a close.
            connection.inputEnded = true
            connection.moreFrames = true
        case .failed:
            drop(connection, reason: "disconnected")
            return false
        }
        return true
    }

    /// Handles up to `framesPerPass` complete frames buffered for one connection.
    private func handleFrames(_ connection: Connection) {
        owner.check()
        guard !connection.ending else { return }
        guard sequencer.isJudging, connection.awaitingWelcome == nil else {
            // The sequencer is settling (proposals voided): frames wait in the buffer.
            connection.moreFrames = true
            return
        }
        connection.moreFrames = false
        var budget = Self.framesPerPass
        // Progress for --idle-timeout: one clock read per batch of frames, not per frame.
        defer {
            if budget < Self.framesPerPass {
                connection.lastFrameAt = .now
                connection.partialSince = connection.decoder.bufferedByteCount > 0 ? connection.lastFrameAt : nil
            }
        }
        let facts = self.facts
        // Read once per batch, and again only after a decision that may change it: a
        // dispatch never does (a failure closes the connection, which `isClosing` shows).
        var state = connection.state
        var isAttached = state.isAttached
        // After a refused frame (`end`), the frames behind it are discarded (PROTOCOL.md §4).
        while !connection.isClosing, !connection.ending, connections[connection.fd] === connection {
            guard budget > 0 else {
                connection.moreFrames = true
                return
            }
            budget -= 1
            let decision: HubDecision?
            do throws(FrameError) {
                // Zero-copy: the payload is decided on where it lies in the decoder's buffer.
                decision = try connection.decoder.decodeNext { payload in
                    HubProtocol.decideCanonicalDispatch(payload, attached: isAttached)
                        ?? HubProtocol.decideParsing(payload, state: state, facts: facts)
                }
            } catch {
                switch error {
                case .emptyFrame:
                    end(connection, WireError(.badFrame, "a frame's length must be at least 1; got 0"))
                case .tooLarge(let length, let limit):
                    end(connection, WireError(.frameTooLarge, "frame of \(length) bytes exceeds this hub's limit of \(limit) bytes (--max-frame-bytes); split the action or raise the limit"))
                }
                return
            }
            guard let decision else {
                // No complete frame: this attempt is not progress.
                budget += 1
                if connection.inputEnded { end(connection, nil) }
                return
            }
            carryOut(decision, for: connection)
            if case .dispatch = decision {} else {
                state = connection.state
                isAttached = state.isAttached
            }
        }
    }

    /// Ends a connection's input: nothing more is read or handled, and it closes (after
    /// `error`, when one is given) once every request before this point is answered.
    private func end(_ connection: Connection, _ error: WireError?) {
        connection.ending = true
        connection.moreFrames = false
        submit(connection, .end(error))
    }

    /// Carries out what the protocol decided for one frame.
    private func carryOut(_ decision: HubDecision, for connection: Connection) {
        switch decision {
        case .fail(let error):
            end(connection, error)
        case .status:
            submit(connection, .status)
        case .sync(let id):
            submit(connection, .sync(id: id))
        case .history(let from, let to, let id):
            submit(connection, .history(from: from, to: to, id: id))
        case .dispatch(let id, let action):
            submit(connection, .dispatch(id: id, action: action))
        case .reject(let id, let error):
            submit(connection, .refused(id: id, error))
        case .hello(let hello):
            // One connection per session, and the newest connection wins. "Newest" is the
            // order the hub accepted the connections in, not the order their hellos are
            // handled in: a client that gave up on a slow hello, reconnected and said hello
            // again may have the abandoned hello handled after the new one, and that stale
            // hello must not take the session from the connection the client now uses.
            let sessionKey = hello.session.map { JSONKey($0) }
            let holder = sessionKey.flatMap { sessionHolder($0, other: connection) }
            if let holder, let session = hello.session, holder.acceptOrder > connection.acceptOrder {
                // Refused like any other hello (in its turn, and before a replica id is taken):
                // the newer connection keeps the session.
                end(connection, WireError(.superseded, "a newer connection (accepted after this one) already attached with this session (\(ControlCharacters.escaped(session))); this one is closed"))
                return
            }
            guard let replica = sequencer.takeReplicaID() else {
                end(connection, WireError(.unavailable, "this hub cannot reserve a replica id now (its log is unreachable); try again shortly"))
                return
            }
            if let sessionKey, let session = hello.session {
                // A replica that reconnected before its old connection was noticed as gone
                // takes the session over.
                if let holder {
                    fail(holder, WireError(.superseded, "another connection attached with this session (\(ControlCharacters.escaped(session))); this one is closed"))
                }
                sessionOwners[sessionKey] = connection
            }
            connection.state = .attached(replica: replica, name: hello.name, session: hello.session)
            connection.session = hello.session.map { sequencer.session(named: $0) }
            if let resume = hello.resume, sequencer.log.isShared, resume.seq > sequencer.appliedSeq {
                // A replica that saw more of the shared log than this hub has applied: it waits
                // (never a state older than one it has shown), and so do its later frames.
                connection.awaitingWelcome = (replica, resume, .now + Self.catchUpDeadline)
                return
            }
            submit(connection, .welcome(replica: replica, resume: hello.resume))
        }
    }

    /// The open connection, other than `connection`, that holds the session `key` (it said
    /// `hello` with it and is neither closed nor closing), if any.
    ///
    /// - Parameters:
    ///   - key: The session.
    ///   - connection: The connection asking (never its own holder here).
    /// - Returns: The holder, or `nil` when the session is free.
    private func sessionHolder(_ key: JSONKey, other connection: Connection) -> Connection? {
        guard let holder = sessionOwners[key], holder !== connection, connections[holder.fd] === holder,
              !holder.isClosing else { return nil }
        return holder
    }

    private func submit(_ connection: Connection, _ request: RequestPipeline.Request) {
        if let answer = outageAnswer(connection, request), connection.held == 0 || answer.overtakes {
            deliverNow(connection, answer)
            return
        }
        pipeline.submit(connection, request, judging: sequencer.isJudging, judge: judge, deliverNow: deliverNow)
    }

    /// While the log cannot take anything, the answers that need neither the log nor the
    /// speculative state — a new dispatch refused `unavailable`, `status` and `welcome` from
    /// the applied state — go out at once, even while the sequencer waits for proposals in
    /// doubt (it judges nothing then). `nil` when the request must take its turn.
    private func outageAnswer(_ connection: Connection, _ request: RequestPipeline.Request) -> RequestPipeline.Judgment? {
        guard let reason = sequencer.unavailableReason else { return nil }
        switch request {
        case .dispatch(let id, _):
            // A dispatch the session already has is answered `duplicate` in its turn.
            guard connection.attachedReplica != nil, sequencer.sequencedSeq(of: id, session: connection.session) == nil else { return nil }
            return .reject(id, WireError(.unavailable, reason))
        case .status:
            return .status(sequencer.appliedSnapshot())
        case .welcome(let replica, let resume):
            if let resume, sequencer.canResume(after: resume.seq) { return .resumed(replica: replica, seq: resume.seq) }
            return .full(replica: replica, snapshot: sequencer.appliedSnapshot())
        case .history(let from, let to, let id):
            // Only applied actions are kept: it can be answered now, from them.
            return .history(from: from, to: to, id: id)
        case .refused, .sync, .end:
            return nil
        }
    }

    /// Delivers an answer that is not held: after what the connection has been sent so far.
    private func deliverNow(_ connection: Connection, _ judgment: RequestPipeline.Judgment) {
        deliver(judgment, to: connection, after: sequencer.appliedSeq)
    }

    /// Judges one request against the speculative state: the answer and the seq it follows.
    ///
    /// While the log cannot take anything (``Sequencer/unavailableReason``), a refusal,
    /// `status` and `welcome` may go at once (`immediate`), answered from the applied state,
    /// since a proposal in flight may stay in doubt until the log is back.
    private func judge(_ connection: Connection, _ request: RequestPipeline.Request) -> RequestPipeline.Judged {
        let outage = sequencer.unavailableReason != nil
        let proposed = sequencer.proposedSeq, applied = sequencer.appliedSeq
        switch request {
        case .refused(let id, let error):
            return (.reject(id, error), proposed, false)
        case .dispatch(let id, let action):
            guard let origin = connection.attachedReplica else {
                return (.reject(id, WireError(.notAttached, "the connection is no longer attached")), proposed, false)
            }
            switch sequencer.dispatch(action, id: id, origin: origin, originName: connection.state.name, session: connection.session) {
            case .proposed(let seq): return (.proposed, seq, false)
            case .refused(let error) where error.code == .unavailable: return (.reject(id, error), applied, true)
            case .refused(let error): return (.reject(id, error), proposed, false)
            case .duplicate(let seq): return (.duplicate(id, seq), max(seq, proposed), false)
            }
        case .status:
            if outage { return (.status(sequencer.appliedSnapshot()), applied, true) }
            return (.status(sequencer.speculativeSnapshot()), proposed, false)
        case .sync(let id):
            return (.synced(id, proposed), proposed, false)
        case .history(let from, let to, let id):
            // After every action judged before it: those are in the backlog when it is built.
            return (.history(from: from, to: to, id: id), proposed, false)
        case .welcome(let replica, let resume):
            // Resumed only from this very history (the protocol checked), never from the
            // future, and only while the backlog still holds every action after it.
            if let resume, sequencer.canResume(after: resume.seq) {
                return (.resumed(replica: replica, seq: resume.seq), outage ? applied : proposed, outage)
            }
            if outage { return (.full(replica: replica, snapshot: sequencer.appliedSnapshot()), applied, true) }
            return (.full(replica: replica, snapshot: sequencer.speculativeSnapshot()), proposed, false)
        case .end(let error):
            return (.end(error), proposed, false)
        }
    }

    // MARK: - Delivering answers

    /// Queues one released answer for its connection.
    private func deliver(_ judgment: RequestPipeline.Judgment, to connection: Connection, after seq: UInt64) {
        guard connections[connection.fd] === connection, !connection.isClosing else { return }
        // Right after the frame of `seq` (the backlog's end when that frame is the newest, or
        // has left the window, which cannot happen within one pass).
        let gate = seq >= backlog.lastSeq ? backlog.end : (backlog.position(after: seq) ?? backlog.end)
        switch judgment {
        case .proposed:
            break
        case .reject(let id, let error):
            send(.reject(id: id, error: error), to: connection, after: gate)
        case .duplicate(let id, let seq):
            send(.duplicate(id: id, seq: seq), to: connection, after: gate)
        case .synced(let id, let seq):
            send(.synced(seq: seq, id: id), to: connection, after: gate)
        case .history(let from, let to, let id):
            connection.output.queue(historyReply(from: from, to: to, id: id, upTo: min(seq, backlog.lastSeq)), after: gate)
        case .status(let snapshot):
            send(.status(statusMessage(snapshot)), to: connection, after: gate)
        case .resumed(let replica, let seq):
            attach(connection, replica: replica, resumedAt: seq, snapshot: nil)
        case .full(let replica, let snapshot):
            attach(connection, replica: replica, resumedAt: nil, snapshot: snapshot)
        case .end(let error?):
            fail(connection, error)
        case .end(nil):
            finishAfterFlush(connection)
        }
    }

    /// Starts the stream for a connection whose `hello` was answered: its welcome, gated after
    /// exactly the actions it covers, then every action after it.
    private func attach(_ connection: Connection, replica: Int, resumedAt: UInt64?, snapshot: Sequencer.Snapshot?) {
        let seq = resumedAt ?? snapshot?.seq ?? 0
        guard let position = seq >= backlog.lastSeq ? backlog.end : backlog.position(after: seq) else {
            fail(connection, WireError(.slowConsumer, "the actions after seq \(seq) left the hub's backlog while this connection attached; attach again"))
            return
        }
        if let resumedAt {
            let welcome = Welcome.resumed(hub: hubID, replica: replica, seq: resumedAt, history: sequencer.history,
                                          maxFrameBytes: configuration.maxFrameBytes)
            // The welcome, then the missed frames straight from the backlog, then whatever follows.
            send(.welcome(welcome), to: connection, after: position)
        } else if let snapshot {
            do throws(FrameError) {
                let (prefix, suffix) = try welcomeFrame(replica: replica, snapshot: snapshot)
                connection.output.queue(prefix, after: position)
                connection.output.queue(shared: snapshot.stateBytes, after: position, counted: false)
                connection.output.queue(suffix, after: position)
                connection.welcomeEnd = connection.output.queuedTotal
                connection.welcomeDeadline = .now + configuration.welcomeTimeout
            } catch {
                // A frame's length is 32 bits: a state this large cannot be sent in one welcome.
                fail(connection, WireError(.frameTooLarge, "the state is \(snapshot.stateBytes.count) bytes, more than one frame can carry (4 GiB); it cannot be sent to a new replica"))
                return
            }
        }
        connection.output.cursor = position
        connection.output.follows = true
        attached.append(connection)
        let peer = "uid \(connection.peer.uid), pid \(connection.peer.pid)"
        if let resumedAt {
            configuration.logger.info("\(connection.label) resumed at seq \(resumedAt) (\(sequencer.appliedSeq - min(resumedAt, sequencer.appliedSeq)) actions replayed; \(peer))")
        } else {
            configuration.logger.info("\(connection.label) attached at seq \(seq) (\(peer))")
        }
    }

    /// A full `welcome` frame around the shared state bytes: its header and members before
    /// the state, and the closing brace after it.
    private func welcomeFrame(replica: Int, snapshot: Sequencer.Snapshot) throws(FrameError) -> (prefix: [UInt8], suffix: [UInt8]) {
        try Welcome.frame(hub: hubID, history: sequencer.history, replica: replica, seq: snapshot.seq, digest: snapshot.digest,
                          maxFrameBytes: configuration.maxFrameBytes, stateByteCount: snapshot.stateBytes.count)
    }

    /// The `status` answer for a snapshot.
    private func statusMessage(_ snapshot: Sequencer.Snapshot) -> HubStatus {
        let replicas = attached.compactMap { peer -> ReplicaInfo? in
            guard let replica = peer.state.replica else { return nil }
            return ReplicaInfo(replica: replica, name: peer.state.name, queuedBytes: peer.output.pending(end: backlog.end),
                               lag: Int(clamping: sequencer.appliedSeq &- min(sequencer.appliedSeq, writtenSeq(of: peer))),
                               uid: Int(peer.peer.uid), pid: Int(peer.peer.pid))
        }
        let storage = sequencer.logStatus
        var members: [JSONKey: JSON] = [
            "data_dir": storage.dataDirectory.map { .string($0) } ?? .null,
            "journal_bytes": JSON(storage.journalBytes), "segments": JSON(storage.segments),
            "snapshot_seq": JSON(storage.snapshotSeq), "last_fsync_us": JSON(storage.lastFsyncMicroseconds),
            "fsync": storage.fsync.map { .string($0.rawValue) } ?? .null, "commits": JSON(storage.commits),
        ]
        if let reason = sequencer.unavailableReason { members["unavailable"] = .string(reason) }
        var status = HubStatus(protocolVersion: syncProtocolVersion, app: facts.appName, fingerprint: facts.fingerprint,
                               hub: hubID, seq: snapshot.seq, digest: snapshot.digest, replicas: replicas,
                               maxFrameBytes: configuration.maxFrameBytes, history: sequencer.history,
                               storage: .object(members))
        if case .object(var shared)? = storage.shared {
            shared["applied_seq"] = JSON(sequencer.appliedSeq)
            status.log = .object(shared)
        }
        return status
    }

    // MARK: - Output

    /// The shared stream of applied frames.
    private var backlog: Backlog { sequencer.backlog }

    /// Whether anything is owed to a connection.
    private func owes(_ connection: Connection) -> Bool { connection.output.owesAnything(end: backlog.end) }

    /// The seq of the last action written whole to a connection's socket.
    private func writtenSeq(of connection: Connection) -> UInt64 {
        guard let cursor = connection.output.cursor else { return sequencer.appliedSeq }
        return backlog.seq(before: cursor)
    }

    /// Sends one message to every attached connection, after everything applied so far.
    ///
    /// - Parameter message: The message.
    private func broadcast(_ message: HubMessage) {
        for connection in attached where !connection.isClosing && !connection.ending { send(message, to: connection) }
    }

    /// Sends one message to one connection, after everything applied so far.
    ///
    /// - Parameters:
    ///   - message: The message.
    ///   - connection: The connection.
    ///   - after: The position in the shared stream the message follows (default: its end).
    private func send(_ message: HubMessage, to connection: Connection, after: UInt64? = nil) {
        do throws(FrameError) {
            connection.output.queue(try Frame.encode(message), after: after ?? backlog.end)
        } catch {
            // Only a message carrying client-chosen text could get here (it never does in
            // practice: such text arrived in a frame of at most --max-frame-bytes).
            configuration.logger.notice("cannot frame a \(message.typeName) message for \(connection.label): \(error.description)")
        }
    }

    /// The most actions one `history` reply carries, and the most bytes of them (a page: the
    /// client asks again from the next seq).
    static let historyPageActions = 4_096
    static let historyPageBytes = 1 << 20

    /// A framed `history` reply: the actions `from`…`to` (at most up to `seq`, the last one
    /// applied before the request), as their `action` messages from the backlog, one page at
    /// most; or the refusal when they are not all kept.
    private func historyReply(from: UInt64, to: UInt64?, id: DispatchID?, upTo seq: UInt64) -> [UInt8] {
        let wanted = min(to ?? seq, seq)
        let oldest = backlog.count > 0 ? backlog.lastSeq - UInt64(backlog.count) + 1 : seq + 1
        func refusal(_ message: String) -> [UInt8] {
            Self.framed(HistoryReply.refusalPayload(from: from, id: id, seq: seq, to: to ?? seq, message: message))
        }
        guard from <= seq, from <= wanted else {
            return refusal("the hub is at seq \(seq); seq \(from) is not sequenced yet — ask again once it is (sync, or watch the actions)")
        }
        guard backlog.count > 0, from >= oldest, let start = backlog.position(after: from - 1) else {
            return refusal("the hub no longer keeps seq \(from): its resume window holds seq \(oldest)…\(seq) (at least the last \(HubConfiguration.Defaults.retainedActions) actions, more within --backlog-bytes); older actions are in its data directory: hubd --export DIR")
        }
        // At most a page is copied out of the backlog, however wide the range asked.
        let pageEnd = min(wanted, from + UInt64(Self.historyPageActions) - 1)
        let end = pageEnd >= backlog.lastSeq ? backlog.end : (backlog.position(after: pageEnd) ?? backlog.end)
        let frames = backlog.copy(from: start, to: end)
        var actions: [UInt8] = []
        var last = from - 1
        var count = 0
        var offset = 0
        // The backlog's frames are `action` frames, each maybe followed by its `checkpoint`.
        // An action frame is told from a checkpoint by its first members alone: its `id`
        // (an integer, a negative one, or a string with escapes or any Unicode) is copied
        // with the rest, never read, so every action of the range is in the reply whatever
        // its dispatcher chose as id.
        while offset + Frame.headerSize <= frames.count, count < Self.historyPageActions, actions.count < Self.historyPageBytes {
            let length = frames.withUnsafeBufferPointer { Frame.announcedLength(in: $0, at: offset) }
            let payload = frames[(offset + Frame.headerSize)..<min(frames.count, offset + Frame.headerSize + length)]
            offset += Frame.headerSize + length
            guard let seq = payload.withUnsafeBytes({ HubMessage.actionSeq($0) }) else { continue }
            if count > 0 { actions.append(UInt8(ascii: ",")) }
            actions += payload
            last = seq
            count += 1
        }
        return Self.framed(HistoryReply.payload(from: from, id: id, seq: seq, to: last, actionPayloads: actions))
    }

    /// A `history` payload with its length header.
    private static func framed(_ payload: [UInt8]) -> [UInt8] {
        var frame: [UInt8] = []
        frame.reserveCapacity(Frame.headerSize + payload.count)
        // Cannot throw: the payload is not empty, and it is at most a page (under
        // `historyPageBytes` of actions, plus one frame of at most --max-frame-bytes, 1 GiB at
        // most) and the envelope: under the header's 4 GiB.
        try? Frame.append(payload: payload, to: &frame)
        return frame
    }

    /// Sends `error` and closes the connection once it is flushed; other clients carry on.
    private func fail(_ connection: Connection, _ error: WireError) {
        configuration.logger.info("closing \(connection.label): \(error.rawCode): \(ControlCharacters.escaped(error.message))")
        send(.error(error), to: connection)
        detach(connection)
        connection.output.stopFollowing(at: backlog.end)
        connection.welcomeDeadline = nil
        // A slow consumer is given as long as a welcome to read the rest of its frame and the error.
        let grace = error.code == .slowConsumer ? max(configuration.welcomeTimeout, .seconds(2)) : .seconds(2)
        connection.state = connection.state.closing(by: .now + grace)
    }

    /// Frees backlog memory no reader needs: bytes before both the resume window and every
    /// connection's position.
    private func compactBacklog() {
        var keep = backlog.heldStart
        let end = backlog.end
        for connection in connections.values {
            guard let cursor = connection.output.cursor, cursor < keep,
                  let limit = connection.output.sharedLimit(end: end), cursor < limit else { continue }
            guard backlog.inMemory(cursor) else {
                // Cannot happen (compaction never passes a reader); a stream with a gap would
                // be corrupt, so the connection is closed instead.
                drop(connection, reason: "lost its place in the backlog")
                continue
            }
            keep = cursor
        }
        backlog.compact(keepingFrom: keep)
    }

    /// A replica too far behind: it gets the rest of the frame it was half-way through, then
    /// `slow-consumer`, and leaves the shared stream (holding none of the backlog).
    private func fallOut(_ connection: Connection, lagBytes: Int) {
        var carry: [UInt8] = []
        if let cursor = connection.output.cursor {
            let frameEnd = backlog.frameEnd(containing: cursor)
            if frameEnd > cursor, backlog.inMemory(cursor) {
                carry = backlog.copy(from: cursor, to: frameEnd)
            }
        }
        connection.output.leaveStream(carry: carry)
        fail(connection, WireError(.slowConsumer, "\(lagBytes) bytes were waiting for this replica, more than this hub's limit of \(configuration.maxQueuedBytesPerReplica) (--max-queue-bytes); read faster, or attach again (with resume) to catch up"))
    }

    /// One write per connection with queued bytes: everything pending, gathered.
    /// Writes what every connection is owed, `first` before the others.
    ///
    /// The connections that sent frames this pass go first: an unloaded round trip is then
    /// one write from the hub to the dispatcher (whose reader wakes at once), not one behind
    /// every other replica's copy.
    ///
    /// - Parameter first: Connections to write before the rest (each is written once).
    private func writeAll(first: [Connection]) {
        owner.check()
        writePass &+= 1
        for connection in first where connections[connection.fd] === connection { flush(connection) }
        for connection in connections.values { flush(connection) }
        compactBacklog()
    }

    /// Numbers `writeAll` calls, so each connection is written once per call.
    @exclusivity(unchecked) private var writePass: UInt64 = 0

    /// Writes what one connection is owed, and drops it from the broadcast when it lags too far.
    private func flush(_ connection: Connection) {
        guard connection.writePass != writePass else { return }
        connection.writePass = writePass
        guard owes(connection) else { return }
        write(connection)
        guard connections[connection.fd] === connection else { return }
        let pending = connection.output.countedPending(end: backlog.end)
        if !connection.isClosing, pending > configuration.maxQueuedBytesPerReplica {
            // No more broadcasts; the error follows the frame being written.
            fallOut(connection, lagBytes: pending)
        }
    }

    /// The most pieces gathered into one `sendmsg`.
    private static let piecesPerWrite = 64

    /// Writes as much of what a connection is owed as its socket takes, in one system call.
    private func write(_ connection: Connection) {
        let result = connection.output.withOutput(backlog: backlog, maxPieces: Self.piecesPerWrite) { vectors in
            vectors.isEmpty ? UnixSocket.IOResult.bytes(0) : UnixSocket.write(connection.fd, gathering: vectors)
        }
        switch result {
        case .bytes(let count):
            connection.output.consume(count)
        case .wouldBlock:
            break
        case .endOfFile, .failed:
            drop(connection, reason: "disconnected")
        }
    }

    private func reapClosing(now: ContinuousClock.Instant) {
        for connection in Array(connections.values) {
            guard case .closing(_, _, let deadline) = connection.state else { continue }
            if !owes(connection) || now >= deadline { close(connection) }
        }
    }

    // MARK: - Closing

    private func detach(_ connection: Connection) {
        guard connection.state.replica != nil else { return }
        attached.removeAll { $0 === connection }
        if case .attached(_, _, let session?) = connection.state, sessionOwners[JSONKey(session)] === connection {
            sessionOwners[JSONKey(session)] = nil
        }
    }

    /// Stops broadcasting to a client that finished sending and closes it once its queue is written.
    private func finishAfterFlush(_ connection: Connection) {
        if connection.state.replica != nil {
            configuration.logger.info("\(connection.label) disconnected")
        }
        detach(connection)
        connection.output.stopFollowing(at: backlog.end)
        connection.state = connection.state.closing(by: .now + .seconds(2))
    }

    private func drop(_ connection: Connection, reason: String) {
        if connection.state.replica != nil, !connection.isClosing {
            configuration.logger.info("\(connection.label) \(reason)")
        }
        detach(connection)
        close(connection)
    }

    private func close(_ connection: Connection) {
        guard connections[connection.fd] === connection else { return }
        connections[connection.fd] = nil
        UnixSocket.close(connection.fd)
    }

    /// Stop accepting, remove the socket, flush what is applied then `shutting-down` (up to
    /// 2 s), close everything, and leave a final snapshot.
    private func shutdown(listener: ListeningSocket) {
        if configuration.notifySystemd { Systemd.notify("STOPPING=1\nSTATUS=stopping at seq \(sequencer.appliedSeq)") }
        // Removes the socket file only if it is still the one this hub bound.
        socketRemoved = listener.close()
        if brokenLog == nil {
            _ = sequencer.pump(now: .now)
            release()
        }
        for connection in connections.values where !connection.isClosing {
            let message = brokenLog == nil
                ? "the hub is shutting down at seq \(sequencer.appliedSeq); reconnect (with resume) once it is back"
                : "the hub stopped at seq \(sequencer.appliedSeq) because its log cannot be written safely; reconnect (with resume) once it is restarted"
            send(.error(WireError(.shuttingDown, message)), to: connection)
        }
        // One deadline for everyone: write what each socket takes, then wait in a single
        // poll for any of them to take more, until all is written or 2 s have passed.
        let deadline = ContinuousClock.now + .seconds(2)
        while true {
            for connection in connections.values where owes(connection) { write(connection) }
            let pending = connections.values.filter { owes($0) }
            let remaining = deadline - ContinuousClock.now
            guard !pending.isEmpty, remaining > .zero else { break }
            var waitSet = pending.map { pollfd(fd: $0.fd, events: Int16(POLLOUT), revents: 0) }
            let milliseconds = Int32(clamping: max(1, Int(nanoseconds: remaining) / 1_000_000))
            _ = poll(&waitSet, nfds_t(waitSet.count), milliseconds)
        }
        for connection in Array(connections.values) { close(connection) }
        attached.removeAll()
        if brokenLog == nil {
            sequencer.close()
        } else {
            sequencer.log.close()
        }
    }
}

extension Int {
    /// The whole nanoseconds in a duration (saturating).
    init(nanoseconds duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = Int(clamping: seconds) &* 1_000_000_000 &+ Int(attoseconds / 1_000_000_000)
    }
}
