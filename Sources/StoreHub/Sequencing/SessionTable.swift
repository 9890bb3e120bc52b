import SyncCore

/// One client session's remembered dispatch ids: a reference the table and the connections
/// that use the session share, so a dispatch finds its session without hashing its name.
///
/// On the event-loop thread only. Its hot stored properties are `@exclusivity(unchecked)`,
/// each with its line of proof: see ``HubLoop``'s note on exclusivity.
final class SessionEntry {
    /// The session's name.
    let name: String
    /// Each remembered id's seq.
    // Unchecked: read by every dispatch, written by every applied record; mutated only by `Dictionary` methods (hashing a `DispatchID` reaches no session).
    @exclusivity(unchecked) fileprivate(set) var seqs: [DispatchID: UInt64] = [:]
    /// The remembered ids, oldest first from `head`.
    // Unchecked: appended by every applied record (`Array` methods only).
    @exclusivity(unchecked) private var order: [DispatchID] = []
    // Unchecked: read by every applied record; only assigned.
    @exclusivity(unchecked) private var head = 0
    /// When a dispatch of the session was last recorded (for the 24-hour idle limit).
    // Unchecked: written by every applied record; only assigned.
    @exclusivity(unchecked) fileprivate(set) var lastUsed: ContinuousClock.Instant
    /// The seq of the session's last recorded dispatch (the eviction order).
    // Unchecked: written by every applied record; only assigned.
    @exclusivity(unchecked) fileprivate(set) var lastSeq: UInt64 = 0
    /// Ids proposed but not yet applied, with their proposed seqs (the proposer's).
    // Unchecked: written by every proposal and applied record; mutated only by `Dictionary` methods.
    @exclusivity(unchecked) var inFlight: [DispatchID: UInt64] = [:]
    /// Set once the table dropped this entry: a holder must look the session up again.
    fileprivate(set) var isEvicted = false
    /// Whether an id was ever dropped to stay within the window (or the entry was restored
    /// full from a snapshot): an id not remembered may then have been applied.
    fileprivate(set) var hasForgotten = false

    fileprivate init(name: String, lastUsed: ContinuousClock.Instant) {
        self.name = name
        self.lastUsed = lastUsed
    }

    /// The seq an id was applied (or, in flight, proposed) as.
    func seq(of id: DispatchID) -> UInt64? { seqs[id] ?? inFlight[id] }

    /// Remembers one id, keeping at least the last `window`.
    fileprivate func remember(_ id: DispatchID, seq: UInt64, window: Int, now: ContinuousClock.Instant) {
        lastUsed = now
        lastSeq = max(lastSeq, seq)
        if seqs.updateValue(seq, forKey: id) == nil { order.append(id) }
        while order.count - head > window {
            seqs.removeValue(forKey: order[head])
            head += 1
            hasForgotten = true
        }
        // Drop the forgotten prefix once it is half the array (amortised O(1) per id).
        if head > 64, head * 2 >= order.count {
            order.removeFirst(head)
            head = 0
        }
    }

    /// The remembered ids, oldest first, with their seqs.
    fileprivate var remembered: [(DispatchID, UInt64)] {
        order[head...].compactMap { id in seqs[id].map { (id, $0) } }
    }
}

/// What the hub remembers per client session so that each (session, dispatch id) is applied
/// at most once, across reconnects and restarts.
///
/// For every session it keeps at least the last `window` applied ids with their seqs. A
/// session idle for longer than ``idleLimit`` is forgotten, and at most ``maxSessions`` are
/// kept: the one whose last dispatch has the lowest seq goes first (an order every hub that
/// reads the same log agrees on), and is logged. The table is part of every snapshot and is
/// rebuilt from the log on recovery, so the guarantee holds across a restart under
/// `--fsync always` and `batch`. Owned by the applier, on the event-loop thread.
struct SessionTable {
    /// A session unused this long is forgotten (a re-sent dispatch is then applied again).
    static let idleLimit: Duration = .seconds(24 * 3600)
    /// The most sessions remembered at once.
    static let maxSessions = 10_000

    private var sessions: [JSONKey: SessionEntry] = [:]
    /// Ids remembered per session, at least.
    let window: Int
    /// Sessions dropped by the bound since ``takeEvicted()`` (at most 100 names kept).
    private var evicted: [String] = []
    private var evictedUncounted = 0

    /// Creates an empty table.
    ///
    /// - Parameter window: Ids remembered per session (at least 1).
    init(window: Int) { self.window = max(1, window) }

    /// The number of sessions remembered.
    var count: Int { sessions.count }

    /// The seq an id of a session was applied as, if it is remembered.
    func seq(session: String, id: DispatchID) -> UInt64? {
        sessions[JSONKey(session)]?.seqs[id]
    }

    /// Whether the table remembers a session.
    func contains(_ session: String) -> Bool { sessions[JSONKey(session)] != nil }

    /// Whether the table can tell, for any id of a session, whether it was applied: the
    /// session is remembered and none of its ids was ever dropped.
    ///
    /// - Parameter session: The session's name.
    /// - Returns: `true` when an id the table does not have was never applied.
    func knowsEveryDispatch(of session: String) -> Bool {
        guard let entry = sessions[JSONKey(session)] else { return false }
        return !entry.hasForgotten
    }

    /// The entry of a session, created (and the table kept within its bound) if needed.
    ///
    /// - Parameters:
    ///   - session: The session's name.
    ///   - now: The time a new entry counts as used at.
    /// - Returns: The entry; hold it, and look it up again once it ``SessionEntry/isEvicted``.
    mutating func entry(_ session: String, now: ContinuousClock.Instant) -> SessionEntry {
        let key = JSONKey(session)
        if let existing = sessions[key] { return existing }
        if sessions.count >= Self.maxSessions { evictLeastRecentlyUsed() }
        let entry = SessionEntry(name: session, lastUsed: now)
        sessions[key] = entry
        return entry
    }

    /// The entry a holder keeps, or a fresh one when the table dropped it.
    mutating func current(_ held: SessionEntry, now: ContinuousClock.Instant) -> SessionEntry {
        guard held.isEvicted else { return held }
        let fresh = entry(held.name, now: now)
        // Proposals still in flight stay known to de-duplication.
        for (id, seq) in held.inFlight where fresh.inFlight[id] == nil { fresh.inFlight[id] = seq }
        return fresh
    }

    /// Remembers that a session's id was applied as `seq`.
    mutating func record(_ entry: SessionEntry, id: DispatchID, seq: UInt64, now: ContinuousClock.Instant) {
        current(entry, now: now).remember(id, seq: seq, window: window, now: now)
    }

    /// Remembers that a session's id was applied as `seq`.
    mutating func record(session: String, id: DispatchID, seq: UInt64, now: ContinuousClock.Instant) {
        entry(session, now: now).remember(id, seq: seq, window: window, now: now)
    }

    /// The sessions dropped to stay within ``maxSessions`` since the last call (for the log).
    mutating func takeEvicted() -> [String] {
        defer {
            evicted.removeAll()
            evictedUncounted = 0
        }
        if evictedUncounted > 0 { return evicted + ["… and \(evictedUncounted) more"] }
        return evicted
    }

    /// Forgets sessions idle for longer than ``idleLimit`` (never one with proposals in flight).
    ///
    /// - Returns: How many were forgotten.
    @discardableResult
    mutating func expire(now: ContinuousClock.Instant) -> Int {
        var forgotten = 0
        for (key, entry) in sessions where now - entry.lastUsed > Self.idleLimit && entry.inFlight.isEmpty {
            entry.isEvicted = true
            sessions[key] = nil
            forgotten += 1
        }
        return forgotten
    }

    private mutating func evictLeastRecentlyUsed() {
        guard let oldest = sessions.min(by: { $0.value.lastSeq < $1.value.lastSeq }) else { return }
        oldest.value.isEvicted = true
        sessions.removeValue(forKey: oldest.key)
        if evicted.count < 100 { evicted.append(oldest.value.name) } else { evictedUncounted += 1 }
    }

    /// The table as stored in a snapshot: `{"SESSION":[[id,seq],…],…}`, ids oldest first.
    var json: JSON {
        .object(sessions.compactMapValues { entry in
            let remembered = entry.remembered
            guard !remembered.isEmpty else { return nil }
            return .array(remembered.map { JSON.array([$0.0.json, JSON($0.1)]) })
        })
    }

    /// Restores a table from a snapshot's form (malformed entries are skipped).
    ///
    /// - Parameters:
    ///   - json: The stored table.
    ///   - window: Ids remembered per session.
    ///   - now: The time the restored sessions count as last used.
    init(json: JSON?, window: Int, now: ContinuousClock.Instant) {
        self.init(window: window)
        guard case .object(let members) = json else { return }
        for (key, entries) in members {
            for entry in entries.arrayValue ?? [] {
                guard let pair = entry.arrayValue, pair.count == 2, let id = DispatchID(json: pair[0]),
                      let seq = pair[1].intValue, seq > 0 else { continue }
                record(session: key.string, id: id, seq: UInt64(seq), now: now)
            }
            // A snapshot keeps at most the window: a full one may have dropped older ids.
            if let entry = sessions[key], entry.seqs.count >= window { entry.hasForgotten = true }
        }
    }
}
