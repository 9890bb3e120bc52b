import SyncCore
import SyncPOSIX

/// The single order of actions, over a ``HubLog``: the ``Proposer`` (de-duplication and
/// validation against the speculative state), the ``Applier`` (the only code that advances
/// the applied seq) and the ``DurabilityGate`` (real outages), driven once per pass of the
/// event loop by ``pump(now:)``.
///
/// It knows no connection: a dispatch comes in as (action, id, origin, session) and its
/// acknowledgement goes out as the `action` frame the applier appends to the backlog; the
/// ``HubCore`` matches everything else (refusals, barriers, welcomes) to connections in its
/// ``RequestPipeline``.
///
/// The path of one dispatch: ``dispatch(_:id:origin:session:)`` de-duplicates it, checks the
/// gate, and has the proposer validate it and propose it to the log with the next seq; at
/// the end of the pass `pump` flushes the log (the group commit), polls it, and the applier
/// applies every appended record in log order. A record the log refuses is voided: the
/// speculative state is reset once nothing else is in flight, and the loop judges the
/// voided dispatches again.
///
/// On the event-loop thread only. Its hot stored properties are `@exclusivity(unchecked)`,
/// each with its line of proof: see ``HubLoop``'s note on exclusivity.
final class Sequencer {
    /// The engine of the app version the history runs (replaced at an upgrade).
    private(set) var engine: HubEngine
    /// Every version of the app the hub carries.
    let versions: HubVersions
    let log: any HubLog
    /// The id of this sequence of actions.
    let history: String
    private let proposer: Proposer
    private let applier: Applier
    /// The loop thread, once the loop claims this sequencer (``HubLoop/serve``): debug builds
    /// check it at `dispatch` and `pump`, the two entry points.
    var owner = ThreadOwner()
    // Unchecked: read for every request (`unavailableReason`, `dispatch`); its one call holding it inout, `probeIfDue`, runs `log.probe()`, and no log refers back to the sequencer.
    @exclusivity(unchecked) private var gate = DurabilityGate()
    /// After proposals were voided: no new judging until every proposal still in flight is
    /// appended and the speculative state is reset.
    // Unchecked: read for every request (`isJudging`); only assigned, never passed inout.
    @exclusivity(unchecked) private var settling = false
    /// After a conflict: no new judging until the applied seq reaches this (the log's end).
    // Unchecked: read for every request (`isJudging`); only assigned, never passed inout.
    @exclusivity(unchecked) private var catchUpTo: UInt64 = 0
    /// On a shared log: where the last record applied ends in the stream (kept with snapshots).
    private var logPosition: LogPosition?
    private var events: [LogEvent] = []
    private var lastExpiry = ContinuousClock.now
    /// At most one checkpoint per this much time while actions flow (`nil`: by seq only).
    private let checkpointInterval: Duration?
    /// Twice ``checkpointInterval``: a quiet spell this long starts a new flow. Computed once
    /// (`Duration * Int` goes through `Int128` and cost 400 instructions per dispatch).
    private let quietSpell: Duration
    /// The wall clock, in milliseconds since the Unix epoch, that stamps each proposal (tests
    /// inject one).
    private let wallClock: @Sendable () -> Int64
    /// The wall clock read once per pass (dispatches judged in one pass share it: a pass
    /// takes well under a millisecond, and the clock is read once, not per action).
    // Unchecked: read by every `dispatch`; only assigned, never passed inout.
    @exclusivity(unchecked) private var passWallTime: Int64?
    /// Proposals handed to the log since its last group commit (``pump(now:)`` commits them):
    /// while any are, the event loop must run another pass at once, not sleep, or they would
    /// wait for the next client or log event (a pass judges again at most a few rounds).
    // Unchecked: set by every `dispatch`, read every pass; only assigned, never passed inout.
    @exclusivity(unchecked) private(set) var hasUnflushedProposals = false
    /// When the last time-due checkpoint was asked for, or the current flow of actions began.
    // Unchecked: read by every `dispatch` under --checkpoint-interval; only assigned, never passed inout.
    @exclusivity(unchecked) private var lastCheckpointAt = ContinuousClock.now
    /// When the last dispatch was judged (a gap of an interval ends a flow).
    // Unchecked: written by every `dispatch` under --checkpoint-interval; only assigned, never passed inout.
    @exclusivity(unchecked) private var lastDispatchAt = ContinuousClock.now - .seconds(86_400)
    private let snapshotEvery: UInt64
    private var lastSnapshotSeq: UInt64 = 0
    private var nextReplica = 1
    private var replicaLeaseEnd = 0
    private let logger: HubLogger

    /// What one pump found that the event loop must act on.
    struct PumpResult {
        /// Proposals from this seq on were voided: the loop judges their requests again.
        var voidedFrom: UInt64?
        /// The log cannot go on safely: the hub must stop.
        var broken: StorageError?
        /// The gate opened again.
        var becameAvailable = false
        /// The gate closed in this pass: why (dispatches are refused `unavailable` from now on).
        var becameUnavailable: String?
        /// The history moved to a newer app version in this pass (own request or another hub's record).
        var upgraded: UpgradeNotice?
        /// The log holds a record this hub cannot follow (an upgrade to a version it does not
        /// carry, or whose migration disagrees): it stopped sequencing there, for this reason.
        var halted: String?
    }

    /// What became of an `upgrade` request.
    enum UpgradeDecision: Equatable {
        /// Refused; nothing changed.
        case refused(WireError)
        /// Checked and (unless a dry run) proposed as `seq`: the report, and whether it was proposed.
        case report(UpgradeReport, proposed: Bool)
    }

    /// An upgrade this hub proposed and the log has not appended yet: the engine of the new
    /// version, its state restored to the migrated one.
    private var pendingUpgrade: (seq: UInt64, engine: HubEngine)?
    /// The seq of the newest upgrade: a replica cannot resume from before it (its state is
    /// of another version), it gets a full welcome.
    private(set) var upgradeFloor: UInt64 = 0
    /// Why this hub stopped sequencing (a record it cannot follow), for good: a restart with
    /// the right build goes on.
    private(set) var halted: String?
    /// The most bytes a migrated state may take: what one `welcome` frame can carry (tests lower it).
    var maxUpgradeStateBytes = Frame.maxPayloadBytes - 65_536

    /// Opens the log and replays what it holds into the root state.
    ///
    /// - Throws: ``StorageError`` when the log cannot be opened or its contents do not apply.
    init(engine: HubEngine, versions: HubVersions? = nil, log: any HubLog, snapshotEvery: Int, backlogActions: Int,
         backlogBytes: Int, checkpointEvery: Int, checkpointInterval: Duration? = nil, dedupWindow: Int,
         wallClock: @escaping @Sendable () -> Int64 = LogTimestamp.milliseconds,
         logger: HubLogger) throws(StorageError) {
        self.engine = engine
        let versions = versions ?? HubVersions(chain: engine.chain, primary: engine, checkDeterminism: false)
        self.versions = versions
        self.wallClock = wallClock
        self.checkpointInterval = checkpointInterval.flatMap { $0 > .zero ? $0 : nil }
        self.quietSpell = (self.checkpointInterval ?? .zero) * 2
        self.log = log
        self.snapshotEvery = UInt64(max(1, snapshotEvery))
        self.logger = logger
        gate = DurabilityGate(probeInterval: log.isShared ? .zero : .seconds(1))
        let backlog = Backlog(minimumActions: backlogActions, maximumBytes: backlogBytes)
        proposer = Proposer(engine: engine, checkpointEvery: UInt64(max(0, checkpointEvery)))
        engine.setKeepsRoot(log.mayRefuse)
        applier = Applier(engine: engine, versions: versions, backlog: backlog, dedupWindow: dedupWindow, keepsRoot: log.mayRefuse,
                          logger: logger)
        let start = try log.open()
        history = start.history
        for warning in start.warnings { logger.warning(warning) }
        do throws(StorageError) {
            try applier.start(from: start, now: .now)
        } catch {
            log.close()
            throw error
        }
        // Recovery may have started under another version, and crossed upgrades.
        self.engine = applier.engine
        proposer.engine = applier.engine
        upgradeFloor = (start.records.last(where: { $0.upgrade != nil }) ?? start.window.last(where: { $0.upgrade != nil }))?.seq ?? 0
        proposer.restart(at: applier.seq)
        lastSnapshotSeq = start.snapshot?.seq ?? 0
        logPosition = start.position
        nextReplica = max(1, start.snapshot?.nextReplica ?? 1, start.largestOrigin + 1, start.replicaLease)
        recoveredFrom = start
        // The first block now, while starting (later blocks are asked for ahead, never waited for).
        do throws(StorageError) {
            let block = try log.reserveReplicaIDs(from: nextReplica, count: Self.replicaBlock)
            nextReplica = max(nextReplica, block.lowerBound)
            replicaLeaseEnd = block.upperBound
        } catch {
            logger.notice("cannot reserve replica ids yet (\(error.message)); asking again when a replica attaches")
        }
    }

    /// What the log held at start (for the start-up line); released after it is read.
    private(set) var recoveredFrom: LogStart?

    /// Forgets what the log held at start.
    func dropRecovery() { recoveredFrom = nil }

    /// The seq of the last applied action.
    var appliedSeq: UInt64 { applier.seq }
    /// The seq of the last proposal (the applied seq when nothing is in flight).
    var proposedSeq: UInt64 { proposer.seq }
    /// The applied frames every attached replica reads.
    var backlog: Backlog { applier.backlog }
    /// Why dispatches are refused, while they are.
    var unavailableReason: String? { halted ?? gate.reason }
    /// Whether new requests may be judged now: not while proposals voided by a conflict or a
    /// failure are settling, nor while catching up with records another hub wrote, unless the
    /// log refuses everything (an outage): then every answer is decided at once from the
    /// applied state (a dispatch is refused `unavailable`; `status`, `welcome` and `history`
    /// are served), so reads never stop while the log cannot be read to the end.
    var isJudging: Bool { !settling && pendingUpgrade == nil && (applier.seq >= catchUpTo || unavailableReason != nil) }
    /// Whether an upgrade record this hub proposed is in flight.
    var isUpgrading: Bool { pendingUpgrade != nil }
    /// Storage facts for `status`.
    var logStatus: LogStatus { log.status }

    /// Waits until the log has something to report, at most `milliseconds` (outside the event
    /// loop only: `hubd --upgrade` before serving).
    func waitForLog(milliseconds: Int32) {
        if let readiness = log.readiness {
            _ = UnixSocket.waitUntil(readiness.fd, timeoutMilliseconds: milliseconds)
        } else {
            // A log of the hub's own reports at its next pass: a short pause, then the next one.
            _ = UnixSocket.waitUntil(-1, timeoutMilliseconds: min(milliseconds, 5))
        }
    }
    /// The number of proposals in flight.
    var inFlightCount: Int { proposer.inFlightCount }

    /// Whether a `checkpoint` follows the action with this seq.
    func isCheckpoint(_ seq: UInt64) -> Bool { proposer.isCheckpoint(seq) }

    // MARK: - Dispatching

    /// De-duplicates, validates and proposes one dispatch.
    ///
    /// - Parameters:
    ///   - action: The action's JSON.
    ///   - id: The dispatcher's id.
    ///   - origin: The dispatching replica.
    ///   - originName: The dispatching replica's name (`""`: none), kept in the action's stamp.
    ///   - session: The dispatcher's session.
    /// - Returns: `proposed` (acknowledged later by its `action` frame), `refused`, or
    ///   `duplicate` with the original's seq (which may still be in flight).
    func dispatch(_ action: JSON, id: DispatchID, origin: Int, originName: String = "", session: SessionEntry?) -> Proposer.Outcome {
        dispatch(WireAction(action), id: id, origin: origin, originName: originName, session: session, now: .now)
    }

    /// ``dispatch(_:id:origin:originName:session:)`` for an action held as a ``WireAction`` (a
    /// canonical dispatch's bytes, forwarded as they are), at a time the caller gives (the
    /// event loop's; the overload above reads the clock).
    ///
    /// - Parameter now: The time (for the checkpoint interval and the session's use).
    func dispatch(_ action: WireAction, id: DispatchID, origin: Int, originName: String = "", session: SessionEntry?,
                  now: ContinuousClock.Instant) -> Proposer.Outcome {
        owner.check()
        let session = session.map { applier.currentSession($0, now: now) }
        if let original = proposer.duplicate(session: session, id: id) {
            return .duplicate(original)
        }
        if let reason = halted ?? gate.reason { return .refused(WireError(.unavailable, reason)) }
        if let interval = checkpointInterval {
            // While actions flow, the first action once the interval has passed carries a
            // checkpoint: a replica that differs finds out within about an interval. A flow
            // starts with an action after a quiet spell of two intervals, and its first
            // interval carries none: a few dispatches at a time are never followed by one.
            if now - lastDispatchAt >= quietSpell {
                lastCheckpointAt = now
            } else if now - lastCheckpointAt >= interval {
                proposer.checkpointDue = true
                lastCheckpointAt = now
            }
            lastDispatchAt = now
        }
        let expecting = proposer.seq
        // The stamp is chosen here, once: the log keeps it, so every hub serves the same one.
        let time: Int64
        if let passWallTime {
            time = passWallTime
        } else {
            time = wallClock()
            passWallTime = time
        }
        let stamp = ActionStamp(time: time, originName: originName)
        let (outcome, record) = proposer.propose(action, id: id, origin: origin, session: session, stamp: stamp,
                                                 snapshotDigest: { speculativeState().digest })
        if let record {
            log.propose([record], expectingLast: expecting, epoch: proposer.epoch)
            hasUnflushedProposals = true
        }
        return outcome
    }

    /// Whether a session already had this dispatch id sequenced (or in flight), without
    /// proposing anything.
    ///
    /// - Parameters:
    ///   - id: The dispatcher's id.
    ///   - session: The dispatcher's session.
    ///   - now: The time (it marks the session used).
    /// - Returns: The original's seq, or `nil`.
    func sequencedSeq(of id: DispatchID, session: SessionEntry?, now: ContinuousClock.Instant) -> UInt64? {
        proposer.duplicate(session: session.map { applier.currentSession($0, now: now) }, id: id)
    }

    /// Whether the session table remembers `session`.
    func hasSession(_ session: String) -> Bool { applier.sessions.contains(session) }

    /// Whether the session table can tell, for any id of `session`, whether it was applied.
    func knowsEveryDispatch(of session: String) -> Bool { applier.sessions.knowsEveryDispatch(of: session) }

    /// The session table's entry for a client session (held by its connection).
    func session(named name: String, now: ContinuousClock.Instant) -> SessionEntry { applier.session(named: name, now: now) }

    // MARK: - The pass

    /// The end of a pass: the log's group commit, then everything it reports, applied.
    ///
    /// - Parameter now: The time.
    /// - Returns: What the event loop must act on.
    func pump(now: ContinuousClock.Instant) -> PumpResult {
        owner.check()
        var result = PumpResult()
        passWallTime = nil
        var appliedForeign = false
        log.flush()
        hasUnflushedProposals = false
        events.removeAll(keepingCapacity: true)
        log.poll(into: &events)
        for event in events {
            switch event {
            case .accepted(let through):
                while applier.seq < through, let own = proposer.takeAppended(nil) {
                    applier.apply(own: own, frames: proposer.frames, now: now)
                    if own.record.upgrade != nil { completeUpgrade(own.record, into: &result) }
                }
            case .appended(let record):
                // Stopped at a record it cannot follow: what comes after is not applied here.
                if halted != nil { continue }
                guard record.seq == applier.seq + 1 else {
                    if record.seq <= applier.seq { continue }
                    result.broken = StorageError("the log went from seq \(applier.seq) to \(record.seq), skipping records; the hub stops rather than serve a state with a gap")
                    continue
                }
                if let own = proposer.takeAppended(record) {
                    applier.apply(own: own, frames: proposer.frames, now: now)
                    if own.record.upgrade != nil { completeUpgrade(own.record, into: &result) }
                    continue
                }
                if let oldest = proposer.oldest, oldest.record.seq <= record.seq {
                    // Another writer got this seq: every proposal from here on is void.
                    void(from: oldest.record.seq, into: &result)
                }
                if let failure = applier.apply(foreign: record, now: now) {
                    let reason = "the log holds an upgrade at seq \(record.seq) that this hub cannot follow (\(failure)); it stopped sequencing at seq \(applier.seq) and answers status only"
                    halted = reason
                    result.halted = reason
                    logger.error(reason)
                    continue
                }
                if let upgrade = record.upgrade {
                    upgraded(to: upgrade, at: record.seq, into: &result)
                }
                appliedForeign = true
            case .conflict(let from, let logLast):
                catchUpTo = max(catchUpTo, logLast)
                void(from: from, into: &result)
            case .failed(let from, let error):
                let reason = log.isShared
                    ? "the shared log did not take it (\(error.message)); nothing was applied — retry once the log is back"
                    : "the hub cannot write its journal (\(error.message)); nothing was applied — retry once the disk has room or works again"
                if gate.isOpen {
                    logger.notice("\(error.message); refusing dispatches with unavailable until writing works again")
                    result.becameUnavailable = reason
                }
                gate.close(reason, now: now)
                void(from: from, into: &result)
            case .inDoubt(_, let reason):
                let refusal = "the hub cannot reach its log (\(reason)); nothing was applied — retry once it is back"
                if gate.isOpen {
                    logger.notice("\(reason); refusing dispatches with unavailable until the log is back")
                    result.becameUnavailable = refusal
                }
                gate.close(refusal, now: now)
            case .broken(let error):
                result.broken = error
            case .replicaIDs(let answer):
                received(replicaIDs: answer, now: now)
            case .position(let position):
                logPosition = position
            }
        }
        proposer.compactIfDrained()
        if proposer.inFlightCount == 0 {
            // After another hub's record (which voids whatever was in flight), the next
            // proposal starts from the applied state: proposals are never made at a seq the
            // log already holds.
            if settling || appliedForeign {
                applier.materializeRoot()
                proposer.restart(at: applier.seq)
                settling = false
            } else {
                applier.adoptSpeculative()
            }
        }
        applier.releaseFrames()
        // Never in a pass that found the log broken: the state may hold what the log no longer has.
        if result.broken == nil, proposer.inFlightCount == 0, gate.isOpen,
           applier.seq - lastSnapshotSeq >= snapshotEvery || upgradeSnapshotDue {
            upgradeSnapshotDue = false
            writeSnapshot()
        }
        if gate.probeIfDue(now: now, { log.probe() }) {
            logger.notice("the log can be written again; accepting dispatches")
            result.becameAvailable = true
        }
        if now - lastExpiry >= .seconds(60) {
            lastExpiry = now
            applier.expireSessions(now: now)
        }
        let evicted = applier.takeEvictedSessions()
        if !evicted.isEmpty {
            logger.notice("forgot \(evicted.count) client sessions to stay within \(SessionTable.maxSessions) (least recently used first): \(evicted.map { ControlCharacters.escaped($0) }.joined(separator: ", ")); a dispatch they re-send now is applied again")
        }
        return result
    }

    private func void(from: UInt64, into result: inout PumpResult) {
        if let pending = pendingUpgrade, pending.seq >= from { pendingUpgrade = nil }
        guard proposer.void(from: from) > 0 else { return }
        settling = true
        result.voidedFrom = min(result.voidedFrom ?? from, from)
    }

    // MARK: - Upgrades

    /// Judges an `upgrade` request: checks the path, runs the migration on the speculative
    /// state, and (unless `dryRun`) proposes the upgrade record at the next seq. Until the log
    /// appends it, nothing else is judged (dispatches wait, and are judged under the new
    /// version); if the log refuses it, the request is judged again.
    ///
    /// - Parameters:
    ///   - target: The version wanted (`nil`: the newest the hub carries).
    ///   - dryRun: Whether to change nothing.
    ///   - id: The request's id.
    ///   - origin: Who asked (0: not attached, or the hub itself).
    ///   - originName: The asker's name, for the stamp.
    ///   - detaches: The replicas an upgrade would detach (for the report).
    /// - Returns: The decision.
    func upgrade(to target: String?, dryRun: Bool, id: DispatchID, origin: Int, originName: String,
                 detaches: [UpgradeReport.Detached]) -> UpgradeDecision {
        owner.check()
        let current = engine.fingerprint
        let target = target ?? versions.newest
        func refusal(_ message: String) -> UpgradeDecision { .refused(WireError(.upgradeRefused, message + "; nothing changed")) }
        if let reason = halted ?? gate.reason { return .refused(WireError(.unavailable, "the log is unavailable (\(reason)); nothing changed — ask again once it is back")) }
        if JSONKey(target) == JSONKey(current) {
            let state = speculativeState()
            return .report(UpgradeReport(id: id, dryRun: dryRun, changed: false, seq: state.seq, from: current, to: current,
                                         digest: state.digest, stateBytes: state.bytes.count), proposed: false)
        }
        guard versions.fingerprints.contains(where: { JSONKey($0) == JSONKey(target) }) else {
            return refusal("no path from \(current) to \(ControlCharacters.escaped(target)): this hub carries \(versions.fingerprints.joined(separator: ", ")); restart it with a build that has \(ControlCharacters.escaped(target)), or ask for one of those")
        }
        guard versions.isNewer(target, than: current) else {
            return refusal("\(target) is older than the history's \(current): an upgrade only goes forward; to go back, restore a backup taken before the upgrade")
        }
        // On a shared log, every hub reading it: one that predates upgrade records would skip
        // the record and go on under the old reducer, so it refuses the upgrade.
        let lacking: [UpgradeReport.Hub]
        do throws(StorageError) {
            lacking = try log.hubs().filter { hub in !(hub.versions ?? []).contains { JSONKey($0) == JSONKey(target) } }
                .map { UpgradeReport.Hub(name: $0.name, versions: $0.versions) }
        } catch {
            return .refused(WireError(.unavailable, "the shared log cannot list the hubs reading it (\(error.message)); nothing changed — ask again once it answers"))
        }
        let old = lacking.filter { $0.versions == nil }
        if !old.isEmpty, !dryRun {
            let names = old.prefix(8).map { ControlCharacters.escaped($0.name) }.joined(separator: ", ")
            return refusal("\(old.count) hub\(old.count == 1 ? "" : "s") of the shared log cannot read upgrade records (\(names)\(old.count > 8 ? ", …" : "")): each would skip the record and go on under the old version. Replace each hub's binary with one that carries \(target), one at a time, then ask again (a hub that left takes up to 10 s to drop out of the list; docs/OPERATIONS.md §14)")
        }
        let migrated: JSON
        do throws(MigrationError) {
            migrated = try versions.chain.migrate(engine.snapshot(.speculative), from: current, to: target)
        } catch {
            return refusal("the migration from \(current) to \(target) threw: \(error.message)")
        }
        guard let next = versions.engine(for: target) else { return refusal("this hub has no engine for \(target)") }
        if let error = next.validate(migrated) {
            return refusal("the migrated state does not decode as \(target): \(error.message)")
        }
        let bytes = migrated.canonicalBytes
        guard bytes.count <= maxUpgradeStateBytes else {
            return refusal("the migrated state is \(bytes.count) bytes, more than one welcome frame carries (\(maxUpgradeStateBytes) bytes), so no replica could attach after it")
        }
        let seq = proposer.seq + 1
        let digest = Digest.hex(Digest.fnv1a64(bytes))
        var report = UpgradeReport(id: id, dryRun: dryRun, changed: !dryRun, seq: dryRun ? proposer.seq : seq, from: current,
                                   to: target, digest: digest, stateBytes: bytes.count, detaches: detaches)
        report.hubsLacking = lacking
        if dryRun { return .report(report, proposed: false) }
        if let error = next.restore(migrated) {
            return refusal("the migrated state does not decode as \(target): \(error.message)")
        }
        // A shared log moves where hubs that predate upgrades cannot write (StreamLayout): the
        // last step before the record, as the move is one-way.
        do throws(StorageError) {
            try log.prepareUpgrade()
        } catch {
            return .refused(WireError(.unavailable, "the log is not ready for an upgrade record (\(error.message)); nothing changed — ask again once it is back"))
        }
        let time = passWallTime ?? wallClock()
        passWallTime = time
        let record = LogRecord(seq: seq, origin: origin, id: id, upgrade: LogUpgrade(from: current, to: target, digest: digest),
                               stamp: ActionStamp(time: time, originName: originName))
        guard let frame = Applier.frame(for: record) else { return refusal("the upgrade notice does not fit a frame") }
        let expecting = proposer.seq
        proposer.proposeUpgrade(record, frame: frame)
        pendingUpgrade = (seq, next)
        log.propose([record], expectingLast: expecting, epoch: proposer.epoch)
        hasUnflushedProposals = true
        logger.notice("upgrading the history from \(current) to \(target) at seq \(seq) (migrated state \(bytes.count) bytes, digest \(digest))")
        return .report(report, proposed: true)
    }

    /// This hub's upgrade record was appended: the new version's engine takes over.
    private func completeUpgrade(_ record: LogRecord, into result: inout PumpResult) {
        guard let upgrade = record.upgrade, let pending = pendingUpgrade, pending.seq == record.seq else { return }
        pendingUpgrade = nil
        applier.install(pending.engine)
        upgraded(to: upgrade, at: record.seq, into: &result)
    }

    /// The history runs a new version from `seq` on (the applier's engine already is it).
    private func upgraded(to upgrade: LogUpgrade, at seq: UInt64, into result: inout PumpResult) {
        engine = applier.engine
        proposer.engine = applier.engine
        proposer.restart(at: applier.seq)
        upgradeFloor = seq
        upgradeSnapshotDue = true
        result.upgraded = UpgradeNotice(seq: seq, from: upgrade.from, to: upgrade.to, digest: upgrade.digest)
        logger.notice("the history runs \(upgrade.to) from seq \(seq) on (upgraded from \(upgrade.from); digest \(upgrade.digest))")
    }

    /// A snapshot is written right after an upgrade (a restart then needs no migration).
    private var upgradeSnapshotDue = false

    // MARK: - Replica ids

    /// How many ids one reservation covers.
    static let replicaBlock = 1_024

    /// The next block of replica ids, reserved ahead (so a hello never waits for the log).
    private var spareReplicaIDs: Range<Int>?
    /// A reservation was asked for and not answered yet.
    private var replicaIDsRequested = false
    /// When the last reservation failed (asked again at most once a second).
    private var replicaIDsFailedAt: ContinuousClock.Instant?

    /// A new replica id, unique within the history, also across restarts and crashes (and,
    /// with a shared log, across hubs): ids are reserved durably in blocks before they are
    /// handed out, the next block asked for while half of the current one is left.
    ///
    /// - Parameter now: The time (a failed reservation is asked again at most once a second).
    /// - Returns: The id, or `nil` when none is reserved (the log cannot be reached): the hub
    ///   then refuses the `hello` with `unavailable` rather than risk an id another replica has.
    func takeReplicaID(now: ContinuousClock.Instant) -> Int? {
        if nextReplica >= replicaLeaseEnd, let spare = spareReplicaIDs {
            nextReplica = max(nextReplica, spare.lowerBound)
            replicaLeaseEnd = spare.upperBound
            spareReplicaIDs = nil
        }
        defer { requestReplicaIDsIfLow(now: now) }
        guard nextReplica < replicaLeaseEnd else { return nil }
        defer { nextReplica += 1 }
        return nextReplica
    }

    /// Asks the log for the next block once less than half of the current one is left.
    private func requestReplicaIDsIfLow(now: ContinuousClock.Instant) {
        guard spareReplicaIDs == nil, !replicaIDsRequested, replicaLeaseEnd - nextReplica < Self.replicaBlock / 2 else { return }
        if let failed = replicaIDsFailedAt, now - failed < .seconds(1) { return }
        replicaIDsRequested = true
        log.requestReplicaIDs(from: max(nextReplica, replicaLeaseEnd), count: Self.replicaBlock)
    }

    /// Takes the log's answer to a reservation.
    private func received(replicaIDs result: Result<Range<Int>, StorageError>, now: ContinuousClock.Instant) {
        replicaIDsRequested = false
        switch result {
        case .success(let block):
            spareReplicaIDs = block
            replicaIDsFailedAt = nil
        case .failure(let error):
            if replicaIDsFailedAt == nil {
                logger.notice("cannot reserve replica ids (\(error.message)); new replicas are refused with unavailable once the ids held run out")
            }
            replicaIDsFailedAt = now
        }
    }

    // MARK: - Snapshots

    /// Whether a replica that applied everything up to `seq` can be sent the rest from the backlog.
    func canResume(after seq: UInt64) -> Bool {
        seq <= applier.seq && seq >= upgradeFloor && (backlog.covers(after: seq) || seq >= backlog.lastSeq)
    }

    // MARK: - The encoded state

    private var speculativeCache: (state: EncodedState, epoch: Int)?

    /// The state as of ``proposedSeq``: the applied state plus every proposal in flight,
    /// serialised at most once per seq.
    func speculativeState() -> EncodedState {
        if let cached = speculativeCache, cached.state.seq == proposer.seq, cached.epoch == proposer.epoch {
            return cached.state
        }
        let state = EncodedState(seq: proposer.seq, bytes: engine.snapshot(.speculative).canonicalBytes)
        speculativeCache = (state, proposer.epoch)
        return state
    }

    private var appliedCache: EncodedState?

    /// The state as of ``appliedSeq`` (without the proposals in flight), serialised at most
    /// once per seq: what `status` and `welcome` answer while the log cannot take anything.
    func appliedState() -> EncodedState {
        if proposer.inFlightCount == 0 { return speculativeState() }
        if let cached = appliedCache, cached.seq == applier.seq { return cached }
        applier.materializeRoot()
        let state = EncodedState(seq: applier.seq, bytes: engine.snapshot(.root).canonicalBytes)
        appliedCache = state
        return state
    }

    /// Writes a snapshot of the applied state (every `snapshotEvery` actions and at a clean stop).
    private func writeSnapshot() {
        guard proposer.inFlightCount == 0, applier.seq > lastSnapshotSeq || applier.seq == 0 else { return }
        applier.adoptSpeculative()
        let current = speculativeState()
        let state = engine.snapshot(.root)
        // A snapshot the app cannot read back would keep the hub from starting; the log
        // still holds every action, so skipping it loses nothing.
        if let error = engine.validate(state) {
            logger.notice("not writing a snapshot at seq \(applier.seq): the state does not decode from its own encoding (\(error.message)); the journal still holds every action. The app's encodeState/decodeState must round-trip (a Codable state needs integers within ±(2^53 − 1) and finite numbers)")
            lastSnapshotSeq = applier.seq
            return
        }
        let stored = StoredSnapshot(seq: applier.seq, digest: current.digest, state: state, nextReplica: nextReplica,
                                    sessions: applier.sessions.json,
                                    position: logPosition.flatMap { $0.seq == applier.seq ? $0 : nil },
                                    app: engine.fingerprint)
        do throws(StorageError) {
            try log.writeSnapshot(stored)
            lastSnapshotSeq = applier.seq
        } catch {
            logger.notice("\(error.message); the journal still holds every action, so nothing is lost")
            lastSnapshotSeq = applier.seq
        }
    }

    /// Writes a final snapshot (unless the log is failing) and releases the log.
    func close() {
        if gate.isOpen, proposer.inFlightCount == 0, applier.seq > lastSnapshotSeq { writeSnapshot() }
        log.close()
    }
}
