import SyncCore

/// The single order of actions: owns `seq`, the root store (through ``HubEngine``) and the
/// log, and produces the encoded frames the event loop broadcasts.
///
/// Called on the event-loop thread only. An action is validated by the reducer, given the
/// next seq, appended to the log and encoded once; it is released for broadcast by
/// ``commit()`` only after the log has made it as durable as its fsync mode promises. If the
/// log cannot be written, the uncommitted actions are undone (the state is rebuilt from what
/// is durable), their dispatchers are told `unavailable`, and new dispatches are refused
/// the same way until a probe write succeeds.
final class Sequencer {
    let engine: HubEngine
    private let log: SequenceLog
    /// The id of this sequence of actions: kept in the data directory, new for each in-memory run.
    let history: String
    /// The seq of the last sequenced action (0 before the first).
    private(set) var seq: UInt64 = 0
    /// The seq of the last action the log has committed (made durable).
    private(set) var committedSeq: UInt64 = 0
    /// The seq of the last action released for broadcast (its frame left `batch` for the
    /// backlog, which always ends there).
    private var releasedSeq: UInt64 { backlog.lastSeq }
    private var nextReplica = 1
    /// Encoded `action` frames sequenced but not yet released for broadcast.
    private var batch: [UInt8] = []
    /// Where each frame of `batch` starts.
    private var batchStarts: [Int] = []
    /// Released frames: read by every attached replica at its own position, and kept for
    /// replicas that resume.
    let backlog: Backlog
    /// The dispatchers of the actions in `batch`, told `unavailable` if the commit fails.
    private var uncommitted: [(connection: Connection, id: DispatchID, session: String?)] = []
    /// Sequenced dispatch ids per client session (exactly-once dispatch).
    private(set) var sessions: SessionTable
    /// A `checkpoint` follows every action whose seq is a multiple of this (0: none).
    let checkpointEvery: UInt64
    /// Set when a rollback could not rebuild the state: the hub refuses dispatches until restarted.
    private var rebuildFailed = false
    /// When idle sessions were last expired.
    private var lastExpiry: ContinuousClock.Instant = .now
    /// Set while the log cannot be written.
    private(set) var unavailableReason: String?
    private var lastProbe = ContinuousClock.now
    private let snapshotEvery: UInt64
    private var lastSnapshotSeq: UInt64 = 0
    private let commitEachAction: Bool
    /// Rebuilds the durable state after a failed commit (re-reads the data directory).
    private let reload: () throws(StorageError) -> FileLog.Recovery?
    private let note: @Sendable (String) -> Void

    /// Creates a sequencer over a log, replaying what the log recovered.
    ///
    /// - Throws: ``StorageError`` when the recovered snapshot or journal does not apply with this app.
    init(engine: HubEngine, log: SequenceLog, history: String, recovery: FileLog.Recovery?, snapshotEvery: Int,
         commitEachAction: Bool, backlogActions: Int = 10_000, backlogBytes: Int = 64 << 20,
         checkpointEvery: Int = 10_000, dedupWindow: Int = 1_000,
         reload: @escaping () throws(StorageError) -> FileLog.Recovery?,
         note: @escaping @Sendable (String) -> Void) throws(StorageError) {
        self.backlog = Backlog(minimumActions: backlogActions, maximumBytes: backlogBytes)
        self.sessions = SessionTable(window: dedupWindow)
        self.checkpointEvery = UInt64(max(0, checkpointEvery))
        self.engine = engine
        self.log = log
        self.history = history
        self.snapshotEvery = UInt64(max(1, snapshotEvery))
        self.commitEachAction = commitEachAction
        self.reload = reload
        self.note = note
        batch.reserveCapacity(64 << 10)
        if let recovery {
            try replay(recovery)
            refillBacklog(recovery)
        }
    }

    /// Loads the recovered journal window into the backlog, so replicas can resume across a restart.
    ///
    /// Only the tail the backlog keeps is encoded: from the newest record back, until at least
    /// its minimum of actions is held and the byte budget is spent.
    private func refillBacklog(_ recovery: FileLog.Recovery) {
        let records = recovery.window + recovery.records
        guard records.last?.seq == seq else {
            backlog.reset(after: seq)
            return
        }
        var tail: [[UInt8]] = []
        var bytes = 0
        var oldest = seq + 1
        for record in records.reversed() {
            if tail.count >= backlog.minimumActions, bytes >= backlog.maximumBytes { break }
            // Only an unbroken run back from the current seq (a damaged or missing stretch
            // of an older segment ends the resume window there).
            guard record.seq + 1 == oldest else { break }
            var frame: [UInt8] = []
            do throws(FrameError) {
                try Frame.appendActionEnvelope(seq: record.seq, origin: record.origin, id: record.id, action: record.action,
                                               to: &frame)
                if let digest = record.checkpoint, isCheckpoint(record.seq) {
                    frame.append(contentsOf: try Frame.encode(HubMessage.checkpoint(seq: record.seq, digest: digest)))
                }
            } catch {
                break
            }
            bytes += frame.count
            tail.append(frame)
            oldest = record.seq
        }
        guard !tail.isEmpty else {
            backlog.reset(after: seq)
            return
        }
        var frames: [UInt8] = []
        frames.reserveCapacity(bytes)
        var starts: [Int] = []
        starts.reserveCapacity(tail.count)
        for frame in tail.reversed() {
            starts.append(frames.count)
            frames.append(contentsOf: frame)
        }
        backlog.reset(after: oldest - 1)
        backlog.append(frames, starts: starts, first: oldest)
    }

    /// Whether a replica that applied everything up to `seq` can be sent the rest.
    func canResume(after seq: UInt64) -> Bool {
        seq <= self.seq && (backlog.covers(after: seq) || seq >= backlog.lastSeq)
    }

    /// Restores the state from a snapshot and the journal after it.
    private func replay(_ recovery: FileLog.Recovery) throws(StorageError) {
        var base: UInt64 = 0
        if recovery.snapshot == nil, let error = engine.restore(engine.initialState) {
            throw StorageError("the app's initial state does not decode: \(error.message)")
        }
        let now = ContinuousClock.now
        sessions = SessionTable(json: recovery.snapshot?.sessions, window: sessions.window, now: now)
        if let snapshot = recovery.snapshot {
            if let error = engine.restore(snapshot.state) {
                throw StorageError("the snapshot at seq \(snapshot.seq) does not decode with app \(engine.fingerprint): \(error.message); run the app version that wrote it")
            }
            base = snapshot.seq
            nextReplica = max(nextReplica, snapshot.nextReplica)
            lastSnapshotSeq = snapshot.seq
        }
        var checkpoints = Dictionary(recovery.checkpoints.map { ($0.seq, $0.digest) }, uniquingKeysWith: { a, _ in a })
        for record in recovery.records {
            switch engine.replay(record.action) {
            case .applied:
                break
            case .badAction(let message), .rejected(let message):
                throw StorageError("journal record seq \(record.seq) is refused on replay (\(message)): the reducer is not deterministic, or the app changed without a new version; run the app version that wrote the journal")
            }
            base = record.seq
            if let session = record.session { sessions.record(session: session, id: record.id, seq: record.seq, now: now) }
            let snapshotDigest = checkpoints.removeValue(forKey: record.seq)
            guard record.checkpoint != nil || snapshotDigest != nil else { continue }
            // The whole state is serialised only at seqs something recorded a digest for.
            let replayed = Digest.of(engine.snapshot())
            if let digest = record.checkpoint, digest != replayed {
                note("hubd: warning: replaying journal record seq \(record.seq) gives digest \(replayed), but when it was first applied the digest was \(digest): the reducer is not deterministic, or the app changed without a new version; replicas will re-hydrate at their next checkpoint")
            }
            if let digest = snapshotDigest, digest != replayed {
                throw StorageError("after replaying to seq \(record.seq) the state's digest is \(replayed), but the snapshot at that seq says \(digest): the reducer is not deterministic, or the app changed without a new version")
            }
        }
        seq = base
        committedSeq = base
        nextReplica = max(nextReplica, recovery.largestOrigin + 1, recovery.replicaLease)
    }

    /// Replica ids below this are covered by the durable lease (``SequenceLog/leaseReplicaIDs(below:)``).
    private var replicaLease = 0
    /// How many ids one lease write covers.
    private static let replicaLeaseBlock = 1_024

    /// A new replica id, unique within the history, also across restarts and crashes: ids are
    /// leased durably in blocks before they are handed out.
    func takeReplicaID() -> Int {
        if nextReplica >= replicaLease {
            do throws(StorageError) {
                try log.leaseReplicaIDs(below: nextReplica + Self.replicaLeaseBlock)
                replicaLease = nextReplica + Self.replicaLeaseBlock
            } catch {
                note("hubd: \(error.message); replica ids handed out now may be handed out again after a crash")
            }
        }
        defer { nextReplica += 1 }
        return nextReplica
    }

    /// What happened to a dispatch.
    enum Outcome {
        /// Sequenced; its frame goes out with the next commit.
        case sequenced
        /// Refused; nothing changed.
        case refused(WireError)
        /// Its session already had this id sequenced, as this seq (possibly not yet committed).
        case duplicate(UInt64)
    }

    /// Whether a `checkpoint` follows the action with this seq.
    func isCheckpoint(_ seq: UInt64) -> Bool { checkpointEvery > 0 && seq % checkpointEvery == 0 }

    /// The seq a session's dispatch id was sequenced as, if the hub remembers it.
    func sequenced(session: String, id: DispatchID) -> UInt64? { sessions.seq(session: session, id: id) }

    /// Validates, sequences, logs and encodes one dispatched action.
    ///
    /// - Parameters:
    ///   - action: The action's JSON.
    ///   - id: The dispatcher's id.
    ///   - origin: The dispatching replica.
    ///   - session: The dispatcher's session: an id it already had sequenced is a duplicate.
    ///   - connection: The dispatcher's connection (told `unavailable` if the commit fails).
    /// - Returns: What happened.
    func dispatch(_ action: JSON, id: DispatchID, origin: Int, session: String?, from connection: Connection) -> Outcome {
        if let session, let original = sessions.seq(session: session, id: id) {
            return .duplicate(original)
        }
        if let reason = unavailableReason {
            return .refused(WireError(.unavailable, reason))
        }
        // The envelope is encoded before the reducer runs: its canonical form may be longer
        // than what the client sent, and an action that cannot be framed must be refused
        // before it changes the state.
        let start = batch.count
        do throws(FrameError) {
            try Frame.appendActionEnvelope(seq: seq + 1, origin: origin, id: id, action: action, to: &batch)
            batchStarts.append(start)
        } catch {
            return .refused(WireError(.frameTooLarge, "the action's canonical form does not fit one frame (\(error.description)); split it into smaller actions"))
        }
        switch engine.apply(action) {
        case .applied:
            break
        case .badAction(let message):
            batch.removeSubrange(start...)
            batchStarts.removeLast()
            return .refused(WireError(.badAction, message))
        case .rejected(let message):
            batch.removeSubrange(start...)
            batchStarts.removeLast()
            return .refused(WireError(.rejected, message))
        }
        seq += 1
        var checkpoint: String?
        if isCheckpoint(seq) {
            // The digest of the state right after this action; the snapshot is cached, so a
            // status or welcome at this seq reuses the serialisation.
            let digest = currentSnapshot().digest
            checkpoint = digest
            if let frame = try? Frame.encode(HubMessage.checkpoint(seq: seq, digest: digest)) {
                batch.append(contentsOf: frame)
            }
        }
        log.append(JournalRecord(seq: seq, origin: origin, id: id, session: session, action: action, checkpoint: checkpoint))
        uncommitted.append((connection, id, session))
        if let session { sessions.record(session: session, id: id, seq: seq, now: .now) }
        if commitEachAction {
            // `always`: this record is made durable on its own, before anything else happens.
            do throws(StorageError) {
                try log.commit()
                committedSeq = seq
                uncommitted.removeAll(keepingCapacity: true)
            } catch {
                _ = rollBack(error)
                return .refused(WireError(.unavailable, unavailableReason ?? error.message))
            }
        }
        return .sequenced
    }

    /// Makes the sequenced actions durable and releases their frames for broadcast: they are
    /// appended to the ``backlog``, which every attached replica reads.
    ///
    /// - Returns: The dispatchers to tell `unavailable` because their actions could not be
    ///   made durable and were undone (empty when the commit succeeded).
    func commit() -> [(connection: Connection, id: DispatchID, error: WireError)] {
        guard !batch.isEmpty || log.hasUncommitted else { return [] }
        do throws(StorageError) {
            try log.commit()
        } catch {
            return rollBack(error)
        }
        committedSeq = seq
        uncommitted.removeAll(keepingCapacity: true)
        backlog.append(batch, starts: batchStarts, first: releasedSeq + 1)
        batch.removeAll(keepingCapacity: true)
        batchStarts.removeAll(keepingCapacity: true)
        if seq - lastSnapshotSeq >= snapshotEvery { snapshot() }
        return []
    }

    /// Undoes everything not committed and stops accepting dispatches.
    private func rollBack(_ error: StorageError) -> [(connection: Connection, id: DispatchID, error: WireError)] {
        let reason = "the hub cannot write its journal (\(error.message)); nothing was applied — retry once the disk has room or works again"
        unavailableReason = reason
        lastProbe = .now
        note("hubd: \(error.message); refusing dispatches with unavailable until writing works again")
        let failed = uncommitted.map { ($0.connection, $0.id, WireError(.unavailable, reason)) }
        for entry in uncommitted {
            if let session = entry.session { sessions.forget(session: session, id: entry.id) }
        }
        uncommitted.removeAll()
        // Frames of actions already durable (under `always`, each commits on its own) stay
        // queued for broadcast; only the uncommitted ones go.
        let keep = Int(committedSeq - releasedSeq)
        if keep < batchStarts.count {
            batch.removeSubrange(batchStarts[keep]...)
            batchStarts.removeSubrange(keep...)
        }
        seq = committedSeq
        snapshotCache = nil
        do throws(StorageError) {
            if let recovery = try reload() {
                // Rebuild the root store from what is durable, then replay nothing more.
                try rebuild(recovery)
            }
        } catch {
            // The root store may still hold undone actions: never accept again in this run.
            rebuildFailed = true
            unavailableReason = "the hub could not rebuild its state after a journal write failed (\(error.message)); restart hubd, which recovers what is on disk"
            note("hubd: cannot rebuild the state from the data directory: \(error.message); refusing dispatches until hubd is restarted")
        }
        return failed
    }

    private func rebuild(_ recovery: FileLog.Recovery) throws(StorageError) {
        let target = committedSeq
        var trimmed = recovery
        trimmed.records = recovery.records.filter { $0.seq <= target }
        let keptReplica = nextReplica
        try replay(trimmed)
        nextReplica = max(nextReplica, keptReplica)
        guard seq == target else {
            throw StorageError("the data directory holds seq \(seq), the hub had committed \(target)")
        }
    }

    /// While unavailable, checks about once a second whether writing works again.
    ///
    /// - Returns: Whether the sequencer became available.
    func retryIfUnavailable() -> Bool {
        let now = ContinuousClock.now
        if now - lastExpiry >= .seconds(60) {
            lastExpiry = now
            sessions.expire(now: now)
        }
        guard unavailableReason != nil, !rebuildFailed, now - lastProbe >= .seconds(1) else { return false }
        lastProbe = now
        guard log.probe() else { return false }
        unavailableReason = nil
        note("hubd: the journal can be written again; accepting dispatches")
        return true
    }

    /// Writes a snapshot of the committed state (every `snapshotEvery` actions and at shutdown).
    func snapshot() {
        guard seq == committedSeq, seq > lastSnapshotSeq || seq == 0 else { return }
        let current = currentSnapshot()
        let state = engine.snapshot()
        // A snapshot the app cannot read back would keep the hub from starting; the journal
        // still holds every action, so skipping it loses nothing.
        if let error = engine.validate(state) {
            note("hubd: not writing a snapshot at seq \(seq): the state does not decode from its own encoding (\(error.message)); the journal still holds every action. The app's encodeState/decodeState must round-trip (a Codable state needs integers within ±(2^53 − 1) and finite numbers)")
            return
        }
        let stored = StoredSnapshot(seq: seq, digest: current.digest, state: state, nextReplica: nextReplica,
                                    sessions: sessions.json)
        do throws(StorageError) {
            try log.writeSnapshot(stored)
            lastSnapshotSeq = seq
        } catch {
            note("hubd: \(error.message); the journal still holds every action, so nothing is lost")
        }
    }

    // MARK: - Snapshots of the state for welcome and status

    /// The state's canonical bytes and digest at one seq.
    struct Snapshot {
        let seq: UInt64
        let stateBytes: [UInt8]
        let digest: String
    }

    /// Computed at most once per seq: `status` and `hello` at the same seq reuse it, so a
    /// client asking again and again costs one serialisation, not one per request.
    private var snapshotCache: Snapshot?

    /// The state as of ``seq`` (callers commit first, so it is the committed state).
    func currentSnapshot() -> Snapshot {
        if let cached = snapshotCache, cached.seq == seq { return cached }
        let bytes = engine.snapshot().canonicalBytes
        let snapshot = Snapshot(seq: seq, stateBytes: bytes, digest: Digest.hex(Digest.fnv1a64(bytes)))
        snapshotCache = snapshot
        return snapshot
    }

    /// Storage facts for `status`.
    var storage: StorageStatus { log.status }

    /// Writes a final snapshot and releases the log.
    func close() {
        if unavailableReason == nil, seq > lastSnapshotSeq { snapshot() }
        log.close()
    }
}
