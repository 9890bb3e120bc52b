import SyncCore

/// The second of the sequencer's three parts, and the only code that advances the applied
/// seq: takes every record the log appended, in log order, whichever hub wrote it.
///
/// For each record it advances `seq`, applies the action to the root state (or, for this
/// hub's own proposals, lets the speculative state be adopted once every proposal in flight
/// is appended, see ``HubEngine``), records the dispatch in the session table, and appends
/// the `action` frame (and its `checkpoint`) to the shared ``Backlog`` every replica reads.
/// Snapshots are taken of the state kept here; the ``Sequencer`` writes them, every
/// `snapshotEvery` actions.
///
/// On the event-loop thread only. Its hot stored properties are `@exclusivity(unchecked)`,
/// each with its line of proof: see ``HubLoop``'s note on exclusivity.
final class Applier {
    /// The engine of the app version the history runs (replaced at an upgrade).
    var engine: HubEngine
    /// Every version the hub carries.
    let versions: HubVersions
    /// The seq of the last applied record (0 before the first).
    // Unchecked: advanced by every applied record; only assigned, never passed inout.
    @exclusivity(unchecked) private(set) var seq: UInt64 = 0
    /// The applied frames, read by every attached replica at its own position.
    let backlog: Backlog
    /// Sequenced dispatch ids per client session (exactly-once dispatch).
    // Unchecked: every dispatch looks its session up and every applied record is remembered, through mutating `SessionTable` methods that call no user code and hold no reference to the applier.
    @exclusivity(unchecked) private(set) var sessions: SessionTable
    /// Own records appended whose actions are in the speculative state but not yet in the
    /// root state (applied there lazily, or adopted with the speculative state).
    // Unchecked: appended by every applied record on a log that may refuse; mutated only by `Array` methods.
    @exclusivity(unchecked) private var pendingRoot: [LogRecord] = []
    /// Frames appended since the last ``releaseFrames()``, back to back, and where each starts.
    // Unchecked: every applied record's frame is copied in (`Array` methods only); handed to the backlog by value.
    @exclusivity(unchecked) private var frames: [UInt8] = []
    // Unchecked: appended by every applied record (`Array` methods only).
    @exclusivity(unchecked) private var frameStarts: [Int] = []
    // Unchecked: written by the first record of each pass, read per record; only assigned.
    @exclusivity(unchecked) private var framesFirst: UInt64 = 1
    private let logger: HubLogger
    /// Whether the engine keeps the root state apart from the speculative one.
    let keepsRoot: Bool

    init(engine: HubEngine, versions: HubVersions, backlog: Backlog, dedupWindow: Int, keepsRoot: Bool, logger: HubLogger) {
        self.engine = engine
        self.versions = versions
        self.keepsRoot = keepsRoot
        self.backlog = backlog
        self.sessions = SessionTable(window: dedupWindow)
        self.logger = logger
        frames.reserveCapacity(64 << 10)
    }

    // MARK: - Starting

    /// Restores the state from a log's start: the snapshot, then every record after it.
    ///
    /// - Throws: ``StorageError`` when the snapshot or a record does not apply with this app,
    ///   or the replay disagrees with a snapshot's digest.
    func start(from start: LogStart, now: ContinuousClock.Instant) throws(StorageError) {
        var base: UInt64 = 0
        if let fingerprint = start.fingerprint, JSONKey(fingerprint) != JSONKey(engine.fingerprint) {
            guard let other = versions.engine(for: fingerprint) else {
                throw StorageError("app-mismatch: the history starts under app \(ControlCharacters.escaped(fingerprint)), which this hub does not carry (it carries \(versions.fingerprints.joined(separator: ", "))); run the app version that wrote it", isDataProblem: true)
            }
            install(other)
        }
        if start.snapshot == nil, let error = engine.restore(engine.initialState) {
            throw StorageError("the app's initial state does not decode: \(error.message)", isDataProblem: true)
        }
        sessions = SessionTable(json: start.snapshot?.sessions, window: sessions.window, now: now)
        if let snapshot = start.snapshot {
            if let error = engine.restore(snapshot.state) {
                throw StorageError("the snapshot at seq \(snapshot.seq) does not decode with app \(engine.fingerprint): \(error.message); run the app version that wrote it", isDataProblem: true)
            }
            base = snapshot.seq
        }
        var snapshotDigests = Dictionary(start.snapshotDigests.map { ($0.seq, $0.digest) }, uniquingKeysWith: { a, _ in a })
        for record in start.records {
            if let upgrade = record.upgrade {
                if let failure = migrate(upgrade, at: record.seq) {
                    throw StorageError("the upgrade record at seq \(record.seq) does not replay: \(failure)", isDataProblem: true)
                }
                base = record.seq
                snapshotDigests.removeValue(forKey: record.seq)
                continue
            }
            switch engine.apply(record.wire) {
            case .applied:
                break
            case .badAction(let message), .rejected(let message):
                throw StorageError("journal record seq \(record.seq) is refused on replay (\(message)): the reducer is not deterministic, or the app changed without a new version; run the app version that wrote the journal", isDataProblem: true)
            }
            base = record.seq
            if let session = record.session { sessions.record(session: session, id: record.id, seq: record.seq, now: now) }
            let snapshotDigest = snapshotDigests.removeValue(forKey: record.seq)
            guard record.checkpoint != nil || snapshotDigest != nil else { continue }
            // The whole state is serialised only at seqs something recorded a digest for.
            let replayed = Digest.of(engine.snapshot(.root))
            if let digest = record.checkpoint, digest != replayed {
                logger.warning("replaying journal record seq \(record.seq) gives digest \(replayed), but when it was first applied the digest was \(digest): the reducer is not deterministic, or the app changed without a new version; replicas will re-hydrate at their next checkpoint")
            }
            if let digest = snapshotDigest, digest != replayed {
                throw StorageError("after replaying to seq \(record.seq) the state's digest is \(replayed), but the snapshot at that seq says \(digest): the reducer is not deterministic, or the app changed without a new version", isDataProblem: true)
            }
        }
        seq = base
        engine.reset()
        refillBacklog(start)
    }

    /// Installs the engine of another version (its state already restored).
    func install(_ other: HubEngine) {
        other.setKeepsRoot(keepsRoot)
        engine = other
    }

    /// Moves the root state across an upgrade record: migrates it, checks the migrated digest
    /// against the record's, and installs the new version's engine.
    ///
    /// - Parameters:
    ///   - upgrade: The record's versions and digest.
    ///   - seq: Its seq.
    /// - Returns: Why it cannot be followed (nothing changed then), or `nil`.
    func migrate(_ upgrade: LogUpgrade, at seq: UInt64) -> String? {
        guard JSONKey(upgrade.from) == JSONKey(engine.fingerprint) else {
            return "it upgrades from \(ControlCharacters.escaped(upgrade.from)), but the history runs \(engine.fingerprint) there"
        }
        guard let next = versions.engine(for: upgrade.to) else {
            return "it upgrades to \(ControlCharacters.escaped(upgrade.to)), which this hub does not carry (it carries \(versions.fingerprints.joined(separator: ", "))); restart it with a build that has \(ControlCharacters.escaped(upgrade.to))"
        }
        materializeRoot()
        let migrated: JSON
        do throws(MigrationError) {
            migrated = try versions.chain.migrate(engine.snapshot(.root), from: upgrade.from, to: upgrade.to)
        } catch {
            return "the migration from \(upgrade.from) to \(upgrade.to) threw here: \(error.message)"
        }
        let digest = Digest.of(migrated)
        guard digest == upgrade.digest else {
            return "migrating the state from \(upgrade.from) to \(upgrade.to) gives digest \(digest) here, the record says \(upgrade.digest): the migrations differ (or one is not deterministic), so every later state would fork"
        }
        if let error = next.restore(migrated) {
            return "the migrated state does not decode as \(upgrade.to): \(error.message)"
        }
        install(next)
        return nil
    }

    /// Loads the recovered tail into the backlog, so replicas can resume across a restart.
    ///
    /// Only the tail the backlog keeps is encoded: from the newest record back, until at least
    /// its minimum of actions is held and the byte budget is spent.
    private func refillBacklog(_ start: LogStart) {
        let records = start.window + start.records
        guard records.last?.seq == seq else {
            backlog.reset(after: seq)
            return
        }
        var tail: [[UInt8]] = []
        var bytes = 0
        var oldest = seq + 1
        for record in records.reversed() {
            if tail.count >= backlog.minimumActions, bytes >= backlog.maximumBytes { break }
            // Only an unbroken run back from the current seq.
            guard record.seq + 1 == oldest, let frame = Self.frame(for: record) else { break }
            bytes += frame.count
            tail.append(frame)
            oldest = record.seq
        }
        guard !tail.isEmpty else {
            backlog.reset(after: seq)
            return
        }
        var all: [UInt8] = []
        all.reserveCapacity(bytes)
        var starts: [Int] = []
        starts.reserveCapacity(tail.count)
        for frame in tail.reversed() {
            starts.append(all.count)
            all.append(contentsOf: frame)
        }
        backlog.reset(after: oldest - 1)
        backlog.append(all, starts: starts, first: oldest)
    }

    /// A record's `action` frame, followed by its `checkpoint` frame when it carries a digest.
    static func frame(for record: LogRecord) -> [UInt8]? {
        if let upgrade = record.upgrade {
            return try? Frame.encode(HubMessage.upgraded(UpgradeNotice(seq: record.seq, from: upgrade.from, to: upgrade.to,
                                                                       digest: upgrade.digest)))
        }
        var frame: [UInt8] = []
        do throws(FrameError) {
            try Frame.appendActionEnvelope(seq: record.seq, origin: record.origin, id: record.id, action: record.wire,
                                           stamp: record.stamp, to: &frame)
            if let digest = record.checkpoint {
                frame.append(contentsOf: try Frame.encode(HubMessage.checkpoint(seq: record.seq, digest: digest)))
            }
        } catch {
            return nil
        }
        return frame
    }

    // MARK: - Applying

    /// Applies one of this hub's own proposals, which the log appended at its seq (`seq + 1`):
    /// its action is already in the speculative state and its frame encoded.
    ///
    /// - Parameters:
    ///   - own: The proposal.
    ///   - frames: The proposer's frame buffer, which holds its frame.
    ///   - now: The time, for the session table.
    func apply(own: Proposer.InFlight, frames proposed: [UInt8], now: ContinuousClock.Instant) {
        let record = own.record
        if frameStarts.isEmpty { framesFirst = record.seq }
        frameStarts.append(frames.count)
        frames.append(contentsOf: proposed[own.frameStart..<own.frameEnd])
        seq = record.seq
        if record.upgrade != nil {
            // Every own record before it is in the migrated state the sequencer installs next.
            pendingRoot.removeAll(keepingCapacity: true)
            return
        }
        pendingRoot.append(record)
        if let session = own.session { sessions.record(session, id: record.id, seq: record.seq, now: now) }
    }

    /// Applies one appended record that another hub wrote (its seq is `seq + 1`).
    ///
    /// - Parameters:
    ///   - record: The record.
    ///   - now: The time, for the session table.
    ///
    /// - Returns: For an upgrade record this hub cannot follow, why (the state is unchanged,
    ///   and the hub must stop sequencing there); else `nil`.
    @discardableResult
    func apply(foreign record: LogRecord, now: ContinuousClock.Instant) -> String? {
        if let upgrade = record.upgrade {
            if let failure = migrate(upgrade, at: record.seq) { return failure }
            if frameStarts.isEmpty { framesFirst = record.seq }
            frameStarts.append(frames.count)
            if let frame = Self.frame(for: record) { frames.append(contentsOf: frame) } else { frameStarts.removeLast() }
            seq = record.seq
            return nil
        }
        if frameStarts.isEmpty { framesFirst = record.seq }
        frameStarts.append(frames.count)
        materializeRoot()
        switch engine.apply(record.wire) {
        case .applied:
            if let digest = record.checkpoint {
                let local = Digest.of(engine.snapshot(.root))
                if local != digest {
                    logger.warning("after record seq \(record.seq), written by another hub, this hub's state digest is \(local), the writer's was \(digest): the hubs run reducers that differ (or one is not deterministic); replicas of this hub will re-hydrate at this checkpoint")
                }
            }
        case .badAction(let message), .rejected(let message):
            logger.error("record seq \(record.seq), written by another hub, is refused here (\(message)): the hubs run reducers that differ; this hub's state no longer includes it")
        }
        if let frame = Self.frame(for: record) {
            frames.append(contentsOf: frame)
        } else {
            frameStarts.removeLast()
        }
        seq = record.seq
        if let session = record.session { sessions.record(session: session, id: record.id, seq: record.seq, now: now) }
        return nil
    }

    /// Applies the own records the root state lags behind by (before something needs the
    /// root state itself: another hub's record, a snapshot, a reset).
    func materializeRoot() {
        guard !pendingRoot.isEmpty else { return }
        guard keepsRoot else {
            // One copy: the speculative state already holds them, and nothing else is in flight.
            pendingRoot.removeAll(keepingCapacity: true)
            return
        }
        for record in pendingRoot {
            if case .badAction(let message) = engine.apply(record.wire) {
                logger.error("own record seq \(record.seq) does not apply to the root state (\(message))")
            }
        }
        pendingRoot.removeAll(keepingCapacity: true)
    }

    /// Every proposal in flight is appended: the speculative state is the applied state.
    func adoptSpeculative() {
        guard !pendingRoot.isEmpty else { return }
        engine.adopt()
        pendingRoot.removeAll(keepingCapacity: true)
    }

    /// Releases the frames applied since the last call into the backlog every replica reads.
    func releaseFrames() {
        guard !frameStarts.isEmpty else { return }
        backlog.append(frames, starts: frameStarts, first: framesFirst)
        frames.removeAll(keepingCapacity: frames.capacity <= 4 << 20)
        frameStarts.removeAll(keepingCapacity: true)
    }

    /// The session table's entry for a client session.
    ///
    /// - Parameters:
    ///   - name: The session.
    ///   - now: The time (it marks the session used).
    func session(named name: String, now: ContinuousClock.Instant) -> SessionEntry { sessions.entry(name, now: now) }

    /// The entry a connection holds, or a fresh one when the table dropped it.
    ///
    /// - Parameters:
    ///   - held: The entry the connection holds.
    ///   - now: The time (it marks the session used).
    func currentSession(_ held: SessionEntry, now: ContinuousClock.Instant) -> SessionEntry { sessions.current(held, now: now) }

    /// Forgets sessions idle for longer than the session table's limit.
    func expireSessions(now: ContinuousClock.Instant) {
        let evicted = sessions.expire(now: now)
        if evicted > 0 { logger.notice("forgot \(evicted) client sessions idle for more than 24 hours (a dispatch they re-send now is applied again)") }
    }

    /// Sessions the table dropped to stay within its bound since the last call, for the log.
    func takeEvictedSessions() -> [String] { sessions.takeEvicted() }
}
