import SyncCore
import SyncPOSIX

/// The hub's decisions, as a value with no socket: connections and their phases, the
/// protocol over their frames, the ``RequestPipeline``, the ``Sequencer``'s use, and what
/// each connection is owed.
///
/// Driven as a swift-nio channel handler is: the reactor (``HubLoop``) hands it each
/// ``LoopEvent`` with the time, and carries out the ``LoopAction``s it returns; it reads no
/// clock and touches no descriptor. Bytes in are `input` events; bytes out are read from
/// ``withOutput(of:maxPieces:_:)`` and reported back as `wrote` events. Tests drive it with
/// bytes and a manual clock (`EmbeddedHub`), as swift-nio's `EmbeddedChannel` does.
///
/// A connection is torn down in one place, ``tearDown(_:_:)``, with its ``Teardown``.
///
/// On the loop thread only (its owner checks the thread in debug builds).
struct HubCore {
    let configuration: HubConfiguration
    let hubID: String
    let sequencer: Sequencer
    /// The app version the history runs and every version the hub carries (changed by an upgrade).
    private(set) var facts: HubFacts
    /// How many upgrades the history went through since the hub started (an attachment made
    /// under an earlier count is outdated).
    private(set) var version = 0
    /// The hub's effective user id: it and root may ask for an upgrade.
    let hubUID: UInt32
    /// The most `hello`s held for an upgrade at once; more are refused `app-ahead` (tests lower it).
    var maxHeldHellos = 256
    private var policy: AccessPolicy
    /// The connection limit in force.
    let maxClients: Int
    /// Who is admitted, in words: named once, before serving (NSS look-ups, never on the loop).
    let admittedDescription: String
    /// User names for refusal lines, looked up off the loop thread.
    private let accountNames = AccountNames()
    /// Stop reading from a connection holding more unhandled input than this.
    let maxBufferedInput: Int
    // The state below is internal, not private, only because the core's extensions in
    // `HubCore+Answers.swift` and `HubCore+Output.swift` use it: nothing outside the core does.

    /// Every open connection, by descriptor.
    var connections: [Int32: Connection] = [:]
    /// The connection attached with each session (a newer `hello` with it supersedes).
    var sessionOwners: [JSONKey: Connection] = [:]
    /// Attached replicas whose stream started (their welcome is queued), in attach order:
    /// `status` lists them, and a `log` message goes to each.
    var streaming: [Connection] = []
    private var pipeline = RequestPipeline()
    /// Why the core stopped serving on its own (the log broke), if it did.
    private(set) var brokenLog: StorageError?
    /// When refusals of too many clients were last logged (once a second at most).
    private var lastRefusalLog: ContinuousClock.Instant?
    private var refusalsSinceLog = 0
    /// The number of connections admitted so far: each new ``Connection`` gets the next value
    /// as its ``Connection/acceptOrder``.
    private var admittedCount: UInt64 = 0
    /// Numbers write passes, so each connection is written once per pass.
    var writePass: UInt64 = 0
    /// The connections whose frames this pass handled: written first, so a dispatcher's own
    /// action (its acknowledgement) leaves before the other replicas' copies.
    var spoke: [Connection] = []
    /// Set by `shutdown`: writes no longer judge slow consumers.
    var stopping = false
    /// The time of the event being handled.
    private(set) var now: ContinuousClock.Instant
    /// The actions of the event being handled.
    var actions: [LoopAction] = []
    /// Found by the last `tick`: something is timed (a greeting, half a frame, a welcome to be
    /// read, a closing connection), so the next `poll` waits at most 100 ms.
    private(set) var timersPending = false
    /// The connections to write after the last `pass` or `shutdown`, in order (``writeOrder(into:)``):
    /// the reactor reads it, writes each, and reports `wrote` for each, then `written`.
    private(set) var writeList: [Connection] = []
    /// Found by the last `tick`: frames wait in a buffer to be handled now.
    private(set) var framesWaiting = false

    /// Creates the core over a sequencer that has opened its log.
    ///
    /// - Parameters:
    ///   - sequencer: The sequencer.
    ///   - configuration: The hub's configuration.
    ///   - hubID: This hub's id (in `welcome` and `status`).
    ///   - hubUID: The hub's effective user id (admitted, with root and `--allow-uid`).
    ///   - now: The time it starts at.
    init(sequencer: Sequencer, configuration: HubConfiguration, hubID: String, hubUID: UInt32, now: ContinuousClock.Instant) {
        self.sequencer = sequencer
        self.configuration = configuration
        self.hubID = hubID
        self.facts = HubFacts(appName: sequencer.engine.appName, fingerprint: sequencer.engine.fingerprint,
                              history: sequencer.history, versions: sequencer.versions.fingerprints)
        self.hubUID = hubUID
        self.policy = AccessPolicy(hubUID: hubUID, allowedUIDs: configuration.allowedUIDs, group: configuration.socketGroup)
        self.admittedDescription = policy.description
        self.maxClients = configuration.effectiveMaxClients
        self.maxBufferedInput = configuration.maxFrameBytes + HubConfiguration.Defaults.inputSlackBytes
        self.now = now
    }

    // MARK: - Events

    /// Handles one event.
    ///
    /// - Parameters:
    ///   - event: What the reactor saw.
    ///   - now: The time.
    /// - Returns: What the reactor must do, in order.
    mutating func handle(_ event: LoopEvent, now: ContinuousClock.Instant) -> [LoopAction] {
        var actions: [LoopAction] = []
        handle(event, now: now, into: &actions)
        return actions
    }

    /// ``handle(_:now:)`` into a buffer the caller reuses (emptied first), so the hot path
    /// allocates nothing.
    ///
    /// - Parameters:
    ///   - event: What the reactor saw.
    ///   - now: The time.
    ///   - into: Receives what the reactor must do, in order.
    mutating func handle(_ event: LoopEvent, now: ContinuousClock.Instant, into: inout [LoopAction]) {
        self.now = now
        swap(&actions, &into)
        actions.removeAll(keepingCapacity: true)
        switch event {
        case .tick:
            tick()
        case .accepted(let fd, let peer, let groups):
            accept(fd, peer: peer, groups: groups)
        case .input(let connection, let read):
            input(read, from: connection)
        case .pass:
            pump()
            if brokenLog != nil {
                actions.append(.stop)
            } else {
                admitWaitingReplicas()
            }
            listWrites()
        case .wrote(let connection, let result):
            wrote(result, to: connection)
        case .written:
            compactBacklog()
            reapClosing()
        case .shutdown:
            shutdown()
            listWrites()
        case .finish:
            finish()
        case .closeLog:
            closeLog()
        }
        swap(&actions, &into)
    }

    /// Fills ``writeList`` (its storage reused).
    private mutating func listWrites() {
        var list: [Connection] = []
        swap(&list, &writeList)
        writeOrder(into: &list)
        swap(&list, &writeList)
    }

    // MARK: - What the reactor waits for

    /// What the reactor should wait for on one connection.
    ///
    /// - Parameter connection: An open connection.
    /// - Returns: Whether to wait for it to be readable, and writable.
    func interest(of connection: Connection) -> (read: Bool, write: Bool) {
        // Input is bounded: past one frame and one read of unhandled bytes, or a backlog of
        // unread replies, the hub stops reading until it drains.
        let read = connection.takesFrames || connection.isAwaitingCatchUp
            ? !connection.input.peerClosed && connection.input.decoder.bufferedByteCount <= maxBufferedInput
                && connection.output.privateBytes <= HubConfiguration.Defaults.replyBacklogBytes
            : false
        return (read, owes(connection))
    }

    /// Whether a connection is still open and not torn down (a connection listed before an
    /// event of the pass may have left since).
    func isServing(_ connection: Connection) -> Bool {
        connections[connection.fd] === connection && !connection.isClosing
    }

    /// Whether a connection is still open (not forgotten), closing or not: what it is owed
    /// may still be written.
    func isOpen(_ connection: Connection) -> Bool { connections[connection.fd] === connection }

    /// Whether frames wait in a connection's buffer that can be handled now (an `input` event
    /// with `nothing` handles them); not while its welcome waits for the hub to catch up.
    func hasFramesToHandle(_ connection: Connection) -> Bool {
        connection.input.moreFrames && connection.takesFrames
    }

    /// How many bytes one read of a connection may bring (its input stays bounded).
    func readRoom(of connection: Connection, bufferSize: Int) -> Int {
        min(bufferSize, max(4096, maxBufferedInput - connection.input.decoder.bufferedByteCount))
    }

    /// Whether the next `poll` must not wait: frames wait to be handled, or proposals to be
    /// committed.
    var mustNotWait: Bool { framesWaiting || sequencer.hasUnflushedProposals }

    /// The seq of the last applied action.
    var seq: UInt64 { sequencer.appliedSeq }

    // MARK: - Tick

    /// Checks every connection's deadlines, and notes what the next `poll` waits for.
    private mutating func tick() {
        var timers = sequencer.unavailableReason != nil
        var waiting = false
        let judging = sequencer.isJudging
        for connection in connections.values {
            switch connection.phase {
            case .closing:
                timers = true
            case .ending, .awaitingUpgrade:
                // Waiting for its last answers, or for an upgrade: nothing more is handled from it.
                checkReadDeadline(connection, timers: &timers)
            case .greeting, .attached, .awaitingCatchUp:
                // Frames held while the welcome waits are not waiting to be handled now.
                if connection.input.moreFrames, judging, connection.takesFrames { waiting = true }
                // The welcome's deadline first: a joiner that read nothing is a slow consumer.
                checkReadDeadline(connection, timers: &timers)
                if connection.isClosing { continue }
                // Not attached yet, or half a frame buffered: it must make progress in time.
                var idleSince: ContinuousClock.Instant?
                if case .greeting = connection.phase {
                    timers = true
                    idleSince = connection.input.lastFrameAt
                } else if let since = connection.input.partialSince {
                    timers = true
                    idleSince = since
                }
                if case .awaitingCatchUp = connection.phase { timers = true }
                if let idleSince, now - idleSince > configuration.idleTimeout {
                    tearDown(connection, .failed(WireError(.timeout, "no complete hello, status or sync (or half a frame held) for \(configuration.idleTimeout) (--idle-timeout); connect again and send a whole frame")))
                }
            }
        }
        timersPending = timers
        framesWaiting = waiting
    }

    /// Fails a connection that has not read its full `welcome` by `--welcome-timeout`.
    private mutating func checkReadDeadline(_ connection: Connection, timers: inout Bool) {
        guard connection.output.readDeadline != nil else { return }
        timers = true
        if connection.output.missedReadDeadline(now: now) {
            tearDown(connection, .failed(WireError(.slowConsumer, "the welcome (\(connection.output.privateBytes) bytes still unread) was not read within \(configuration.welcomeTimeout) (--welcome-timeout); read the socket, then attach again")))
        }
    }

    // MARK: - Accepting

    /// Admits a connection, or refuses it (not admitted, or too many clients).
    private mutating func accept(_ fd: Int32, peer: PeerCredentials?, groups: () -> [UInt32]?) {
        guard let peer else {
            refuse(fd, WireError(.forbidden, "the hub cannot tell which user connected (no peer credentials); connection refused"))
            return
        }
        guard policy.admits(peer, groups: groups, now: now) else {
            // The name is looked up off this thread (a slow NSS must not stall the loop).
            let logger = configuration.logger, admitted = admittedDescription
            accountNames.withName(peer.uid, now: now) { name in
                logger.info("refused uid \(peer.uid) (\(name)) pid \(peer.pid): not admitted (admitted: \(admitted))")
            }
            refuse(fd, WireError(.forbidden, "uid \(peer.uid) may not use this hub (it admits \(admittedDescription)); ask its operator to run it with --allow-uid \(peer.uid) or --socket-group"))
            return
        }
        guard connections.count < maxClients else {
            refusalsSinceLog += 1
            if lastRefusalLog.map({ now - $0 >= .seconds(1) }) ?? true {
                configuration.logger.info("refused \(refusalsSinceLog) connection(s): \(connections.count) clients already (--max-clients \(maxClients))")
                lastRefusalLog = now
                refusalsSinceLog = 0
            }
            refuse(fd, WireError(.tooManyClients, "this hub already serves \(connections.count) clients, its limit (--max-clients \(maxClients)); try again later, or ask its operator to raise the limit"))
            return
        }
        admittedCount += 1
        connections[fd] = Connection(fd: fd, maxFrameBytes: configuration.maxFrameBytes, peer: peer,
                                     acceptOrder: admittedCount, now: now)
    }

    /// Tells a connection it is refused; the reactor closes it at once.
    private mutating func refuse(_ fd: Int32, _ error: WireError) {
        actions.append(.refuse(fd: fd, frame: (try? Frame.encode(HubMessage.error(error))) ?? []))
    }

    // MARK: - Input

    /// The most frames handled for one connection per pass, so that a client pipelining many
    /// frames cannot keep the hub from everyone else.
    static let framesPerPass = 256

    /// How long a replica resuming ahead of this hub (on a shared log) waits for it to catch up.
    static let catchUpDeadline: Duration = .seconds(10)

    /// Takes what reading a connection gave, and handles the frames it holds.
    private mutating func input(_ read: ConnectionRead, from connection: Connection) {
        guard connections[connection.fd] === connection, !connection.isClosing else { return }
        switch read {
        case .bytes(let bytes):
            guard !connection.phase.inputOver else { return }
            connection.input.decoder.append(bytes)
            if connection.input.partialSince == nil { connection.input.partialSince = now }
            connection.input.moreFrames = true
        case .ended:
            // The client is done sending (closed, or half-closed with SHUT_WR). Frames already
            // buffered are still handled; then it gets what is queued for it, and a close.
            connection.input.peerClosed = true
            connection.input.moreFrames = true
            if case .awaitingUpgrade = connection.phase {
                // Held for an upgrade and gone: nothing to wait for any more.
                tearDown(connection, .finished)
                return
            }
        case .failed:
            tearDown(connection, .lost("disconnected"))
            return
        case .nothing:
            break
        }
        guard !connection.phase.inputOver else { return }
        handleFrames(connection)
        spoke.append(connection)
    }

    /// Handles up to `framesPerPass` complete frames buffered for one connection.
    private mutating func handleFrames(_ connection: Connection) {
        guard connection.takesFrames, sequencer.isJudging else {
            // Waiting for its welcome, or the sequencer is settling (proposals voided): frames
            // wait in the buffer.
            if !connection.phase.inputOver { connection.input.moreFrames = true }
            return
        }
        connection.input.moreFrames = false
        var budget = Self.framesPerPass
        let facts = self.facts
        // Read once per batch, and again only after a decision that may change it: a
        // dispatch never does (a failure tears the connection down, which `takesFrames` shows).
        var replica = connection.attachedReplica
        // After a refused frame (`end`), the frames behind it are discarded (PROTOCOL.md §4).
        while connection.takesFrames {
            guard budget > 0 else {
                connection.input.moreFrames = true
                break
            }
            budget -= 1
            let decision: HubDecision?
            do throws(FrameError) {
                // Zero-copy: the payload is decided on where it lies in the decoder's buffer.
                decision = try connection.input.decoder.decodeNext { payload in
                    HubProtocol.decideCanonicalDispatch(payload, attached: replica != nil)
                        ?? HubProtocol.decideParsing(payload, attachedAs: replica, facts: facts)
                }
            } catch {
                switch error {
                case .emptyFrame:
                    stopReading(connection, then: WireError(.badFrame, "a frame's length must be at least 1; got 0"))
                case .tooLarge(let length, let limit):
                    stopReading(connection, then: WireError(.frameTooLarge, "frame of \(length) bytes exceeds this hub's limit of \(limit) bytes (--max-frame-bytes); split the action or raise the limit"))
                }
                break
            }
            guard let decision else {
                // No complete frame: this attempt is not progress.
                budget += 1
                if connection.input.peerClosed { stopReading(connection, then: nil) }
                break
            }
            carryOut(decision, for: connection)
            if case .dispatch = decision {} else { replica = connection.attachedReplica }
        }
        // Progress for --idle-timeout: once per batch of frames.
        if budget < Self.framesPerPass {
            connection.input.lastFrameAt = now
            connection.input.partialSince = connection.input.decoder.bufferedByteCount > 0 ? now : nil
        }
    }

    /// Ends a connection's input: nothing more is read or handled, and it is torn down (after
    /// `error`, when one is given) once every request before this point is answered.
    private mutating func stopReading(_ connection: Connection, then error: WireError?) {
        connection.phase = .ending(connection.phase.attachment)
        connection.input.moreFrames = false
        submit(connection, .end(error))
    }

    /// Carries out what the protocol decided for one frame.
    private mutating func carryOut(_ decision: HubDecision, for connection: Connection) {
        switch decision {
        case .fail(let error):
            stopReading(connection, then: error)
        case .outdated(let session, let inDoubt, let error):
            // Exactly-once across an upgrade: each dispatch it sent and has no answer for is
            // told its fate before the refusal (the session's table says which were sequenced).
            // A session the table forgot (idle 24 h, evicted) or whose older ids it dropped
            // cannot be told "never applied" about an id it does not have: those get no answer.
            let complete = sequencer.knowsEveryDispatch(of: session)
            if complete || sequencer.hasSession(session) {
                connection.session = sequencer.session(named: session, now: now)
                for id in inDoubt { submit(connection, .inDoubt(id: id, error, complete: complete)) }
            }
            stopReading(connection, then: error)
        case .status(let checked):
            // A report counts only from an attached replica: it is shown in its entry.
            if let checked, connection.attachedReplica != nil { connection.reportedCheck = checked }
            submit(connection, .status)
        case .sync(let id):
            submit(connection, .sync(id: id))
        case .history(let from, let to, let id):
            submit(connection, .history(from: from, to: to, id: id))
        case .dispatch(let id, let action):
            submit(connection, .dispatch(id: id, action: action))
        case .reject(let id, let error):
            submit(connection, .refused(id: id, error))
        case .upgrade(let id, let to, let dryRun):
            submit(connection, .upgrade(id: id, to: to, dryRun: dryRun))
        case .hello(let hello):
            if hello.waitsForUpgrade {
                hold(connection, hello)
            } else {
                attach(connection, hello)
            }
        }
    }

    /// Attaches a connection that said a valid `hello`.
    ///
    /// One connection per session, and the newest connection wins. "Newest" is the order the
    /// hub accepted the connections in, not the order their hellos are handled in: a client
    /// that gave up on a slow hello, reconnected and said hello again may have the abandoned
    /// hello handled after the new one, and that stale hello must not take the session from
    /// the connection the client now uses.
    private mutating func attach(_ connection: Connection, _ hello: HelloRequest) {
        let sessionKey = hello.session.map { JSONKey($0) }
        let holder = sessionKey.flatMap { sessionHolder($0, other: connection) }
        if let holder, let session = hello.session, holder.acceptOrder > connection.acceptOrder {
            // Refused like any other hello (in its turn, and before a replica id is taken):
            // the newer connection keeps the session.
            stopReading(connection, then: WireError(.superseded, "a newer connection (accepted after this one) already attached with this session (\(ControlCharacters.escaped(session))); this one is closed"))
            return
        }
        guard let replica = sequencer.takeReplicaID(now: now) else {
            stopReading(connection, then: WireError(.unavailable, "this hub cannot reserve a replica id now (its log is unreachable); try again shortly"))
            return
        }
        if let sessionKey, let session = hello.session {
            // A replica that reconnected before its old connection was noticed as gone takes
            // the session over.
            if let holder {
                tearDown(holder, .failed(WireError(.superseded, "another connection attached with this session (\(ControlCharacters.escaped(session))); this one is closed")))
            }
            sessionOwners[sessionKey] = connection
        }
        let attachment = Attachment(replica: replica, name: hello.name, session: hello.session, fingerprint: hello.fingerprint,
                                    version: version)
        connection.session = hello.session.map { sequencer.session(named: $0, now: now) }
        if let resume = hello.resume, sequencer.log.isShared, resume.seq > sequencer.appliedSeq {
            // A replica that saw more of the shared log than this hub has applied: it waits
            // (never a state older than one it has shown), and so do its later frames.
            connection.phase = .awaitingCatchUp(attachment, resume: resume, deadline: now + Self.catchUpDeadline)
            return
        }
        connection.phase = .attached(attachment)
        submit(connection, .welcome(replica: replica, resume: hello.resume))
    }

    /// Holds the `hello` of a replica of a newer version than the history's (one the hub
    /// carries): it is told `waiting`, keeps its connection, and is attached at the upgrade.
    private mutating func hold(_ connection: Connection, _ hello: HelloRequest) {
        let held = connections.values.reduce(0) { count, other in
            if case .awaitingUpgrade = other.phase { return count + 1 }
            return count
        }
        let wanted = hello.fingerprint ?? ""
        guard held < maxHeldHellos else {
            stopReading(connection, then: WireError(.appAhead, "the history runs \(facts.fingerprint), older than this replica's \(ControlCharacters.escaped(wanted)), and this hub already holds \(held) replicas waiting for an upgrade; retry later, or upgrade the history (replica-cli upgrade)"))
            return
        }
        connection.phase = .awaitingUpgrade(hello)
        let notice = WaitingNotice(reason: "upgrade", fingerprint: wanted, seq: sequencer.appliedSeq,
                                   message: "the history runs \(facts.fingerprint); this replica runs \(ControlCharacters.escaped(wanted)), which this hub carries: it attaches when the history is upgraded (replica-cli upgrade)")
        send(.waiting(notice), to: connection)
        configuration.logger.info("holding the hello of \(connection.label) (\(ControlCharacters.escaped(wanted))) until the history is upgraded from \(facts.fingerprint)")
    }

    /// The history runs a new version: every attached replica got the `upgraded` notice in its
    /// stream and is detached after it (each attaches again under the new version, or is
    /// outdated); held replicas of that version are attached.
    private mutating func upgraded(_ notice: UpgradeNotice) {
        version += 1
        facts.fingerprint = notice.to
        for connection in streaming where !connection.isClosing {
            tearDown(connection, .upgraded)
        }
        // Attached before the upgrade but not streaming yet (a welcome still to be judged, or
        // waiting for a shared log to catch up): its welcome would be of the new version.
        for connection in Array(connections.values) where !connection.isClosing {
            guard let attachment = connection.phase.attachment, attachment.version != version else { continue }
            let older = attachment.fingerprint.map { facts.order(of: $0).map { $0 < 0 } ?? false } ?? false
            tearDown(connection, .failed(older
                ? WireError(.appOutdated, "the history was upgraded to \(notice.to) at seq \(notice.seq) while this replica of \(ControlCharacters.escaped(attachment.fingerprint ?? "")) attached; run \(notice.to)")
                : WireError(.unavailable, "the history was upgraded to \(notice.to) at seq \(notice.seq) while this client attached; attach again")))
        }
        for connection in Array(connections.values) {
            guard case .awaitingUpgrade(var hello) = connection.phase, !connection.isClosing else { continue }
            switch facts.order(of: hello.fingerprint ?? "") {
            case 0?:
                hello.waitsForUpgrade = false
                connection.phase = .greeting
                attach(connection, hello)
                connection.input.moreFrames = true
            case let order? where order > 0:
                continue
            default:
                tearDown(connection, .failed(WireError(.appOutdated, "the history was upgraded to \(notice.to) at seq \(notice.seq); this replica runs \(ControlCharacters.escaped(hello.fingerprint ?? "")), now older: run \(notice.to)")))
            }
        }
    }

    /// The open connection, other than `connection`, that holds the session `key` (it said
    /// `hello` with it and is not torn down), if any.
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

    /// Hands the welcome of every replica that waited for this hub to catch up to the
    /// pipeline once it has; refuses (`unavailable`) those whose deadline passed.
    private mutating func admitWaitingReplicas() {
        for connection in connections.values {
            guard case .awaitingCatchUp(let attachment, let resume, let deadline) = connection.phase else { continue }
            if sequencer.appliedSeq >= resume.seq {
                connection.phase = .attached(attachment)
                submit(connection, .welcome(replica: attachment.replica, resume: resume))
                connection.input.moreFrames = true
            } else if now >= deadline {
                tearDown(connection, .failed(WireError(.unavailable, "this hub has applied seq \(sequencer.appliedSeq), behind the seq \(resume.seq) this replica resumes from, and did not catch up within \(Self.catchUpDeadline); attach to another hub of the same log, or again later")))
            }
        }
    }

    // MARK: - Requests

    /// Hands a request to the pipeline: judged now when nothing waits before it and the
    /// sequencer can, delivered at once when it may go at once.
    private mutating func submit(_ connection: Connection, _ request: RequestPipeline.Request) {
        if let answer = outageAnswer(connection, request), connection.answersWaiting == 0 || answer.overtakes {
            deliver(answer, to: connection, after: sequencer.appliedSeq)
            return
        }
        guard sequencer.isJudging, !pipeline.hasUnjudged else {
            pipeline.append(connection, unjudged: request)
            return
        }
        judgeAndQueue(connection, request)
    }

    /// Judges one request, then delivers its answer at once when it may go at once, or
    /// queues it in the pipeline.
    private mutating func judgeAndQueue(_ connection: Connection, _ request: RequestPipeline.Request) {
        let judged = judge(connection, request)
        if judged.immediate, connection.answersWaiting == 0 || judged.judgment.overtakes {
            deliver(judged.judgment, to: connection, after: sequencer.appliedSeq)
            return
        }
        pipeline.append(connection, request, judged: judged)
    }

    /// Runs the sequencer's pass (the log's group commit and what it reports), judges again
    /// what was voided, and releases the answers the applied seq now allows.
    private mutating func pump() {
        for _ in 0..<4 {
            let result = sequencer.pump(now: now)
            if let broken = result.broken {
                brokenLog = broken
                configuration.logger.notice("\(broken.message)")
                return
            }
            if let voidedFrom = result.voidedFrom { pipeline.void(from: voidedFrom) }
            if let halted = result.halted {
                broadcast(.log(available: false, reason: halted, seq: sequencer.appliedSeq))
            }
            if let notice = result.upgraded {
                // The upgrade's report first, then the replicas of the old version leave, before
                // anything that waited is judged under the new one.
                release()
                upgraded(notice)
            }
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
                for (connection, request) in pipeline.takeUnjudged()
                    where connections[connection.fd] === connection && !connection.isClosing {
                    // An upgrade judged among them stops the judging: the rest wait for it.
                    if sequencer.isJudging {
                        judgeAndQueue(connection, request)
                    } else {
                        pipeline.append(connection, unjudged: request)
                    }
                }
            }
            release()
            // Proposals made while judging again are committed in this same pass (after the
            // fourth round, by the next pass, which then runs without waiting).
            guard sequencer.inFlightCount > before || (sequencer.inFlightCount > 0 && !sequencer.log.isShared) else { break }
        }
    }

    /// Delivers every answer whose actions are applied, each gated right after the frame of
    /// the last action judged before it.
    private mutating func release() {
        while let (connection, judgment, after) = pipeline.nextRelease(upTo: sequencer.appliedSeq) {
            deliver(judgment, to: connection, after: after)
        }
    }

    // MARK: - Stopping

    /// Answers what is applied, then tells every client the hub is stopping.
    private mutating func shutdown() {
        stopping = true
        if brokenLog == nil {
            _ = sequencer.pump(now: now)
            release()
        }
        for connection in connections.values where !connection.isClosing {
            let message = brokenLog == nil
                ? "the hub is shutting down at seq \(sequencer.appliedSeq); reconnect (with resume) once it is back"
                : "the hub stopped at seq \(sequencer.appliedSeq) because its log cannot be written safely; reconnect (with resume) once it is restarted"
            send(.error(WireError(.shuttingDown, message)), to: connection)
        }
    }

    /// Closes every connection: its client sees the end at once, before the log's final
    /// snapshot is written (`closeLog`).
    private mutating func finish() {
        for connection in Array(connections.values) { forget(connection) }
        streaming.removeAll()
        sessionOwners.removeAll()
    }

    /// Closes the log, leaving a final snapshot when it is sound.
    private mutating func closeLog() {
        if brokenLog == nil {
            sequencer.close()
        } else {
            sequencer.log.close()
        }
    }
}
