import SyncCore

/// What the hub remembers per client session so that each (session, dispatch id) is applied
/// at most once, across reconnects and restarts.
///
/// For every session it keeps at least the last `window` sequenced ids with their seqs. A
/// session idle for longer than ``idleLimit`` is forgotten, and at most ``maxSessions`` are
/// kept: the one whose last dispatch has the lowest seq goes first (an order every hub that
/// reads the same log agrees on). The table is part of every snapshot and is rebuilt from the
/// log on recovery, so the guarantee holds across a restart under `--fsync always` and
/// `batch`. Owned by the applier, on the event-loop thread.
struct SessionTable {
    /// A session unused this long is forgotten (a re-sent dispatch is then applied again).
    static let idleLimit: Duration = .seconds(24 * 3600)
    /// The most sessions remembered at once.
    static let maxSessions = 10_000

    fileprivate struct Session {
        /// Each remembered id's seq.
        var seqs: [DispatchID: UInt64] = [:]
        /// The remembered ids, oldest first from `head`.
        var order: [DispatchID] = []
        var head = 0
        var lastUsed: ContinuousClock.Instant
        /// The seq of the session's last recorded dispatch (the eviction order).
        var lastSeq: UInt64 = 0
    }

    private var sessions: [JSONKey: Session] = [:]
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

    /// The seq an id of a session was sequenced as, if it is remembered.
    func seq(session: String, id: DispatchID) -> UInt64? {
        sessions[JSONKey(session)]?.seqs[id]
    }

    /// Remembers that a session's id was sequenced as `seq`.
    mutating func record(session: String, id: DispatchID, seq: UInt64, now: ContinuousClock.Instant) {
        let key = JSONKey(session)
        if sessions[key] == nil, sessions.count >= Self.maxSessions { evictLeastRecentlyUsed() }
        sessions[key, default: Session(lastUsed: now)].remember(id, seq: seq, window: window, now: now)
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

    /// Forgets one id (its sequencing was undone: the journal could not be written).
    mutating func forget(session: String, id: DispatchID) {
        sessions[JSONKey(session)]?.seqs.removeValue(forKey: id)
    }

    /// Forgets sessions idle for longer than ``idleLimit``.
    ///
    /// - Returns: How many were forgotten.
    @discardableResult
    mutating func expire(now: ContinuousClock.Instant) -> Int {
        let before = sessions.count
        sessions = sessions.filter { now - $0.value.lastUsed <= Self.idleLimit }
        return before - sessions.count
    }

    /// Forgets everything (before a replay rebuilds the table).
    mutating func removeAll() { sessions.removeAll() }

    private mutating func evictLeastRecentlyUsed() {
        guard let oldest = sessions.min(by: { $0.value.lastSeq < $1.value.lastSeq })?.key else { return }
        sessions.removeValue(forKey: oldest)
        if evicted.count < 100 { evicted.append(oldest.string) } else { evictedUncounted += 1 }
    }

    /// The table as stored in a snapshot: `{"SESSION":[[id,seq],…],…}`, ids oldest first.
    var json: JSON {
        .object(sessions.mapValues { session in
            .array(session.order[session.head...].compactMap { id in
                session.seqs[id].map { JSON.array([id.json, JSON($0)]) }
            })
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
        guard case .object(let members)? = json else { return }
        for (key, entries) in members {
            for entry in entries.arrayValue ?? [] {
                guard let pair = entry.arrayValue, pair.count == 2, let id = DispatchID(json: pair[0]),
                      let seq = pair[1].intValue, seq > 0 else { continue }
                record(session: key.string, id: id, seq: UInt64(seq), now: now)
            }
        }
    }
}

extension SessionTable.Session {
    /// Remembers one id, keeping at least the last `window`.
    fileprivate mutating func remember(_ id: DispatchID, seq: UInt64, window: Int, now: ContinuousClock.Instant) {
        lastUsed = now
        lastSeq = max(lastSeq, seq)
        if seqs.updateValue(seq, forKey: id) == nil { order.append(id) }
        while order.count - head > window {
            seqs.removeValue(forKey: order[head])
            head += 1
        }
        // Drop the forgotten prefix once it is half the array (amortised O(1) per id).
        if head > 64, head * 2 >= order.count {
            order.removeFirst(head)
            head = 0
        }
    }
}
