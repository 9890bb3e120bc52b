import SyncCore

/// Client requests whose answers are not final yet, in the order they arrived.
///
/// An answer to a connection (`reject`, `synced`, `status`, `duplicate`, `welcome`) must come
/// after every action sequenced before the request, and a dispatch's own answer is its
/// `action` broadcast. So each request is **judged** at once against the speculative state
/// (the applied state plus proposals in flight), remembering the proposed seq it follows
/// (`after`), and its answer is released only when the applier has applied up to that seq:
/// no private reply ever forces a commit, and none names an action the log did not take.
///
/// When the log voids proposals (a full disk, another hub got there first), every request
/// judged after the first voided one is judged again, in the same order: a voided dispatch
/// is proposed again (or refused `unavailable`), a `status` or `sync` answers for the state
/// that is real. Requests that arrive while the sequencer settles wait, unjudged, behind them.
///
/// While the log cannot take anything (a full disk, NATS unreachable), some answers need not
/// wait: a dispatch refused `unavailable`, and `status` and `welcome` answered from the
/// applied state (the judge marks them `immediate`). They claim nothing about proposals still
/// in flight, so they go out at once, even past dispatches whose fate the log has not told yet
/// (in doubt). `status` and `welcome` do so only when nothing of their own connection is held
/// (a connection's answers otherwise keep their order); an `unavailable` refusal, which names
/// its dispatch id and no seq, may also pass its own connection's earlier dispatches, so a
/// client is never kept waiting for the end of an outage to learn that a new dispatch was
/// refused.
///
/// It calls back into nothing: ``HubCore`` takes what is due (``takeUnjudged()``,
/// ``nextRelease(upTo:)``), judges and delivers it, and puts judged requests back, so no
/// access to the pipeline is held open while a request is judged or an answer delivered.
///
/// On the event-loop thread only.
struct RequestPipeline {
    /// What a client asked for.
    enum Request {
        case dispatch(id: DispatchID, action: WireAction)
        /// A dispatch the protocol refused by itself (an id too long): answered in its turn.
        case refused(id: DispatchID, WireError)
        case status
        case sync(id: DispatchID?)
        case history(from: UInt64, to: UInt64?, id: DispatchID?)
        /// An `upgrade` request.
        case upgrade(id: DispatchID, to: String?, dryRun: Bool)
        /// A dispatch an outdated replica has in doubt: `duplicate` when its session has it
        /// sequenced, else (when the table remembers every id of the session: `complete`)
        /// refused with the error, never applied; else no answer (its fate is not known here).
        case inDoubt(id: DispatchID, WireError, complete: Bool)
        /// The `welcome` of a `hello` (the connection is already attached as `replica`).
        case welcome(replica: Int, resume: ResumePoint?)
        /// The connection's last request: it ended its input (`nil`), or sent a frame refused
        /// with this error. Its earlier answers, and its own actions, go out first.
        case end(WireError?)
    }

    /// The answer decided for a request, released once the applier reaches `after`.
    enum Judgment {
        /// Proposed: the `action` broadcast answers it.
        case proposed
        case reject(DispatchID, WireError)
        case duplicate(DispatchID, UInt64)
        case synced(DispatchID?, UInt64)
        /// A `history` reply, built from the backlog when it is released.
        case history(from: UInt64, to: UInt64?, id: DispatchID?)
        case status(EncodedState)
        /// The report of an `upgrade` (released once the upgrade record is durable).
        case upgrade(UpgradeReport)
        /// No answer (an id in doubt whose fate the hub cannot tell).
        case silence
        /// A resumed welcome at this seq.
        case resumed(replica: Int, seq: UInt64)
        /// A full welcome with this state.
        case full(replica: Int, state: EncodedState)
        /// Close the connection (after an `error`, when there is one).
        case end(WireError?)

        /// Whether it may go at once past its own connection's held answers: an `unavailable`
        /// refusal.
        var overtakes: Bool {
            if case .reject(_, let error) = self, error.code == .unavailable { return true }
            return false
        }
    }

    struct Entry {
        let connection: Connection
        let request: Request
        var judgment: Judgment?
        /// The proposed seq the answer follows.
        var after: UInt64 = 0
    }

    private var entries: [Entry] = []
    private var head = 0
    /// The index of the first unjudged entry (`entries.count` when every entry is judged).
    private var firstUnjudged = 0

    /// The number of requests waiting.
    var count: Int { entries.count - head }
    /// Whether requests wait to be judged.
    var hasUnjudged: Bool { firstUnjudged < entries.count }
    /// Whether answers wait for the applier.
    var isEmpty: Bool { head == entries.count }

    /// A judged request: the answer, the seq it follows, and whether it may go at once.
    typealias Judged = (judgment: Judgment, after: UInt64, immediate: Bool)

    /// Adds a request to be judged later, in its turn (the sequencer cannot judge now, or
    /// requests wait before it).
    ///
    /// - Parameters:
    ///   - connection: The connection that asked.
    ///   - request: The request.
    mutating func append(_ connection: Connection, unjudged request: Request) {
        entries.append(Entry(connection: connection, request: request))
        connection.answersWaiting += 1
    }

    /// Adds a request judged as it arrived; only when none waits unjudged (``hasUnjudged``).
    ///
    /// - Parameters:
    ///   - connection: The connection that asked.
    ///   - request: The request.
    ///   - judged: Its judgment and the seq it follows.
    mutating func append(_ connection: Connection, _ request: Request, judged: Judged) {
        assert(!hasUnjudged, "a request judged at once while others wait unjudged would overtake them")
        entries.append(Entry(connection: connection, request: request, judgment: judged.judgment, after: judged.after))
        firstUnjudged = entries.count
        connection.answersWaiting += 1
    }

    /// Takes every request waiting to be judged out of the pipeline, in order: the caller
    /// judges each and appends it again (``append(_:_:judged:)``), or drops it.
    ///
    /// - Returns: The requests, with their connections.
    mutating func takeUnjudged() -> [(connection: Connection, request: Request)] {
        guard hasUnjudged else { return [] }
        var taken: [(connection: Connection, request: Request)] = []
        taken.reserveCapacity(entries.count - firstUnjudged)
        for index in firstUnjudged..<entries.count {
            entries[index].connection.answersWaiting -= 1
            taken.append((entries[index].connection, entries[index].request))
        }
        entries.removeSubrange(firstUnjudged...)
        return taken
    }

    /// Un-judges every request judged after proposals from seq `from` on, which were voided.
    ///
    /// From the first judged entry that follows a voided proposal on, everything is judged
    /// again (an answer that could have gone at once, held behind its connection's earlier
    /// ones, follows the applied seq and may sit among them).
    mutating func void(from: UInt64) {
        guard let first = entries[head..<firstUnjudged].firstIndex(where: { $0.after >= from }) else { return }
        for index in first..<firstUnjudged { entries[index].judgment = nil }
        firstUnjudged = first
    }

    /// The next answer, in order, whose `after` the applier has reached: taken out of the
    /// pipeline. `nil` when none is due.
    ///
    /// - Parameter applied: The applied seq.
    /// - Returns: The connection, the answer, and the seq it follows.
    mutating func nextRelease(upTo applied: UInt64) -> (connection: Connection, judgment: Judgment, after: UInt64)? {
        if head < firstUnjudged, let judgment = entries[head].judgment, entries[head].after <= applied {
            // The fields, not the entry: copying the entry would copy its request (an action) too.
            let connection = entries[head].connection, after = entries[head].after
            head += 1
            connection.answersWaiting -= 1
            return (connection, judgment, after)
        }
        if head == entries.count {
            entries.removeAll(keepingCapacity: entries.capacity <= 4096)
            head = 0
            firstUnjudged = 0
        } else if head > 1024, head * 2 >= entries.count {
            entries.removeFirst(head)
            firstUnjudged -= head
            head = 0
        }
        return nil
    }
}
