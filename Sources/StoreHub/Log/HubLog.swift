import SyncCore

/// Where the hub's order of actions is kept: the one contract between sequencing and
/// storage. The file journal (``FileLog``), the in-memory log (``MemoryLog``) and a log
/// replicated across hosts (``JetStreamLog``) are its implementations.
///
/// The contract is asynchronous, so a log shared by several writers fits it:
///
/// 1. ``open()`` reads what to start from: the history, the newest snapshot and the records
///    after it (and, for the resume window, some before it).
/// 2. ``propose(_:expectingLast:)`` hands over records the hub validated, the first expected
///    right after seq `expectingLast`; it returns at once. Nothing proposed counts until the
///    log reports it ``LogEvent/appended(_:)``.
/// 3. ``flush()``, once per pass of the event loop, is the group-commit point: a file log
///    writes and fsyncs what was proposed in the pass; a replicated log sends it.
/// 4. ``poll(into:)`` yields, in log order, every record appended (whichever hub wrote it),
///    and conflicts (another writer got there first), failures and doubts about proposals.
///
/// The event loop waits on ``readiness`` (a descriptor, for a log that talks to a server),
/// and calls `poll` after every wait. All calls come from the event-loop thread.
///
/// ``FileLog`` and ``MemoryLog`` are the special case of one writer: every proposal is
/// accepted and reported appended at the next `flush`, or every proposal of the pass fails
/// together (a full disk).
package protocol HubLog: AnyObject {
    /// Reads (and for a new log, creates) what the hub starts from.
    ///
    /// - Returns: The history id, the newest snapshot and the records after it.
    /// - Throws: ``StorageError`` naming what is wrong and what to do.
    func open() throws(StorageError) -> LogStart

    /// Hands over validated records, in order, the first expected to follow seq `expectingLast`
    /// (each later one the one before it). Returns at once; the outcome comes from ``poll(into:)``.
    ///
    /// - Parameters:
    ///   - records: The records, with consecutive seqs starting at `expectingLast + 1`.
    ///   - expectingLast: The seq the log must end at for the first record to be appended.
    ///   - epoch: The proposer's epoch: proposals of one epoch form one chain, each following
    ///     the one before (a log that drops a proposal drops the rest of its epoch); the
    ///     epoch changes whenever the hub starts again from its applied state.
    func propose(_ records: [LogRecord], expectingLast: UInt64, epoch: Int)

    /// The group-commit point, once per pass of the event loop: makes or sends what was
    /// proposed since the last call, and runs the log's timers.
    func flush()

    /// Moves what happened since the last call into `events`, in log order.
    ///
    /// - Parameter events: Where the events go (appended to).
    func poll(into events: inout [LogEvent])

    /// A descriptor the event loop waits on for reading (readable: events wait), or `nil`
    /// for a log with nothing to wait for.
    var readiness: LogReadiness? { get }

    /// Reserves `count` replica ids unique within the history, starting at or above `next`.
    ///
    /// - Parameters:
    ///   - next: The lowest id the hub would hand out next.
    ///   - count: How many to reserve.
    /// - Returns: The reserved ids.
    /// - Throws: ``StorageError`` when the reservation cannot be made durable.
    func reserveReplicaIDs(from next: Int, count: Int) throws(StorageError) -> Range<Int>

    /// Asks for `count` more replica ids at or above `next` without waiting: the answer comes
    /// from ``poll(into:)`` as ``LogEvent/replicaIDs(_:)`` (a shared log asks the other hubs'
    /// log; the hub keeps handing out the ids it holds meanwhile).
    ///
    /// - Parameters:
    ///   - next: The lowest id the hub would hand out after those it holds.
    ///   - count: How many to reserve.
    func requestReplicaIDs(from next: Int, count: Int)

    /// Stores a snapshot of the state at its seq, and drops what it makes unnecessary.
    ///
    /// - Throws: ``StorageError``; the log is then unchanged.
    func writeSnapshot(_ snapshot: StoredSnapshot) throws(StorageError)

    /// While proposals fail: whether the log works again (a test write, a reconnection).
    func probe() -> Bool

    /// What an operator wants to know, for `status` and the start-up line.
    var status: LogStatus { get }

    /// Whether this log may hold records written by other hubs (a replica ahead of this hub
    /// is then waited for, instead of being sent a full welcome at an older seq).
    var isShared: Bool { get }

    /// Whether the log may ever refuse a proposal (a full disk, another writer): the applied
    /// state is then kept aside while proposals are in flight. `false` only for memory.
    var mayRefuse: Bool { get }

    /// Releases files, locks and connections.
    func close()

    /// The hubs that read this log (a shared log's; none for a log only this hub writes),
    /// asked before an upgrade: one that cannot read upgrade records refuses it.
    ///
    /// - Returns: Every hub reading the log, this one included.
    /// - Throws: ``StorageError`` when the log cannot say.
    func hubs() throws(StorageError) -> [LogPeer]

    /// Makes the log ready for an upgrade record (a shared log moves to
    /// ``StreamLayout/records``, where hubs that predate upgrades can no longer write).
    ///
    /// - Throws: ``StorageError`` when it cannot; nothing was changed that matters then.
    func prepareUpgrade() throws(StorageError)
}

extension HubLog {
    package func hubs() throws(StorageError) -> [LogPeer] { [] }
    package func prepareUpgrade() throws(StorageError) {}
}

/// What the event loop waits on for a log: a descriptor that becomes readable when the log
/// has events (a shared log's worker writes a byte to a pipe).
package struct LogReadiness: Equatable {
    /// The descriptor.
    package var fd: Int32

    package init(fd: Int32) {
        self.fd = fd
    }
}

/// What a log reports, in log order.
package enum LogEvent: Equatable {
    /// A record appended at its seq, whichever hub wrote it. Seqs come contiguous.
    case appended(LogRecord)
    /// This hub's own proposals, in the order proposed, appended up to and including seq
    /// `through` (a log with one writer reports its group commits this way, without echoing
    /// the records).
    case accepted(through: UInt64)
    /// The proposals from seq `from` on were refused because another writer appended first;
    /// the log now ends at or after `logLast`. None of them was appended.
    case conflict(from: UInt64, logLast: UInt64)
    /// The proposals from seq `from` on could not be made durable and were dropped: none of
    /// them was appended. The log refuses proposals until ``HubLog/probe()`` succeeds.
    case failed(from: UInt64, StorageError)
    /// The proposals from seq `from` on may or may not have been appended (the link to the
    /// log dropped); their fate is told later, by `appended` records or by `conflict`.
    case inDoubt(from: UInt64, reason: String)
    /// The log cannot go on without risking what it holds (a failed write could not be
    /// undone): the hub must stop serving; a restart recovers what is durable.
    case broken(StorageError)
    /// The answer to ``HubLog/requestReplicaIDs(from:count:)``.
    case replicaIDs(Result<Range<Int>, StorageError>)
    /// Where the records up to `position.seq` (just reported `appended` or `accepted`) end in
    /// a shared log, and the tag the next record chains on: kept with a snapshot at that seq,
    /// so that reading the log goes on from there. A file log reports none.
    case position(LogPosition)
}

/// Where a shared log's reading goes on after a record: the record's stream sequence and its
/// tag (``LogKeys``), for the action seq it ends at.
package struct LogPosition: Sendable, Equatable {
    /// The action seq of the record.
    package var seq: UInt64
    /// Its stream sequence.
    package var streamSeq: UInt64
    /// Its tag: the next valid record is tagged on it ("" before the first record).
    package var tag: String

    /// Creates a position.
    ///
    /// - Parameters:
    ///   - seq: The action seq of the record.
    ///   - streamSeq: Its stream sequence.
    ///   - tag: Its tag.
    package init(seq: UInt64, streamSeq: UInt64, tag: String) {
        self.seq = seq
        self.streamSeq = streamSeq
        self.tag = tag
    }

    /// The body member: `{"seq":…,"stream_seq":…,"tag":…}`.
    package var json: JSON { ["seq": JSON(seq), "stream_seq": JSON(streamSeq), "tag": .string(tag)] }

    /// Reads a body member, never trapping on what another process wrote.
    ///
    /// - Parameter json: The member.
    /// - Returns: The position, or `nil` when it is malformed.
    package init?(json: JSON?) {
        guard let json, let seq = json["seq"]?.uint64Value, let streamSeq = json["stream_seq"]?.uint64Value,
              let tag = json["tag"]?.stringValue, tag.utf8.count <= 256 else { return nil }
        self.init(seq: seq, streamSeq: streamSeq, tag: tag)
    }
}

/// What a log starts from.
package struct LogStart {
    /// The history id.
    package var history: String
    /// The newest valid snapshot, if any.
    package var snapshot: StoredSnapshot?
    /// The digests of the other valid snapshots, by seq, to check the replay against (not
    /// the `checkpoint` digests the hub broadcasts).
    package var snapshotDigests: [(seq: UInt64, digest: String)] = []
    /// Every record after the snapshot, in order and contiguous.
    package var records: [LogRecord] = []
    /// Contiguous records the log still holds up to the snapshot (the resume window).
    package var window: [LogRecord] = []
    /// What was read, for the start-up line.
    package var sources: [String] = []
    /// What was repaired or skipped, one line each.
    package var warnings: [String] = []
    /// The largest replica id any record names.
    package var largestOrigin: Int = 0
    /// Every replica id below this may have been handed out (0: nothing known).
    package var replicaLease: Int = 0
    /// On a shared log: where the last record read at start ends in the stream.
    package var position: LogPosition?
    /// The app version the replay starts under (the snapshot's, or the history's first when
    /// there is no snapshot); `nil` when the log does not say (the hub's own version).
    package var fingerprint: String?

    package init(history: String) { self.history = history }
}

/// A snapshot as stored: the state at one seq and what is needed to go on from it.
package struct StoredSnapshot: Sendable, Equatable {
    /// The seq of the last action the state includes.
    package var seq: UInt64
    /// The digest of the state's canonical bytes.
    package var digest: String
    /// The state's JSON.
    package var state: JSON
    /// The next replica id to hand out (ids are unique within a history).
    package var nextReplica: Int
    /// The session table (``SessionTable/json``) as of `seq`; `nil` in snapshots written
    /// before sessions existed.
    package var sessions: JSON? = nil
    /// On a shared log: where reading goes on after `seq` (``LogPosition``). A snapshot of a
    /// shared log without it is not started from.
    package var position: LogPosition? = nil
    /// The app version the state is of (`nil` in snapshots written before upgrades existed:
    /// the version the history ran at `seq`).
    package var app: String? = nil

    package init(seq: UInt64, digest: String, state: JSON, nextReplica: Int, sessions: JSON? = nil,
                 position: LogPosition? = nil, app: String? = nil) {
        self.app = app
        self.seq = seq
        self.digest = digest
        self.state = state
        self.nextReplica = nextReplica
        self.sessions = sessions
        self.position = position
    }

    /// The canonical body: `{"digest":…,"next_replica":…,"seq":…,"sessions":…,"state":…}`.
    package var body: JSON {
        var members: [JSONKey: JSON] = ["seq": JSON(seq), "digest": .string(digest), "state": state,
                                        "next_replica": JSON(nextReplica), "sessions": sessions ?? [:]]
        if let position, position.seq == seq { members["log_position"] = position.json }
        if let app { members["app"] = .string(app) }
        return .object(members)
    }

    /// Reads a snapshot body, checking the state's digest.
    ///
    /// - Parameter json: The body.
    /// - Returns: The snapshot, or why it is not one.
    package static func read(_ json: JSON) -> Result<StoredSnapshot, StorageError> {
        guard let seq = json["seq"]?.intValue, seq >= 0, let digest = json["digest"]?.stringValue,
              let state = json["state"], let next = json["next_replica"]?.intValue else {
            return .failure(StorageError("unreadable snapshot body"))
        }
        let actual = Digest.of(state)
        guard actual == digest else {
            return .failure(StorageError("the state's digest is \(actual), the snapshot says \(digest)"))
        }
        return .success(StoredSnapshot(seq: UInt64(seq), digest: digest, state: state, nextReplica: next,
                                       sessions: json["sessions"],
                                       position: LogPosition(json: json["log_position"]).flatMap { $0.seq == UInt64(seq) ? $0 : nil },
                                       app: json["app"]?.stringValue))
    }
}

/// Facts about a log for `status` (`storage`, and `log` for a shared one) and the start-up line.
package struct LogStatus: Sendable, Equatable {
    /// `"memory"`, `"file"` or `"nats"`.
    package var kind: String
    /// The data directory, or `"memory"`.
    package var location: String
    /// The fsync mode of a file log.
    package var fsync: FsyncMode?
    /// Bytes in journal segments.
    package var journalBytes: Int = 0
    /// Number of journal segments.
    package var segments: Int = 0
    /// The seq of the newest snapshot (0: none).
    package var snapshotSeq: UInt64 = 0
    /// The last fsync's duration in microseconds (0: none yet).
    package var lastFsyncMicroseconds: Int = 0
    /// Group commits written since the hub started (each one write, and one fsync under
    /// `always` and `batch`).
    package var commits: Int = 0
    /// For a shared log: the `log` member of `status` (kind, servers, stream, last seq, connected).
    package var shared: JSON?
    /// The data directory (a file log's journal, or a shared log's local snapshots), if any.
    package var dataDirectory: String?

    package init(kind: String, location: String, fsync: FsyncMode? = nil) {
        self.kind = kind
        self.location = location
        self.fsync = fsync
    }
}

/// Storage could not do what was asked; the message says what and what to do.
public struct StorageError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What happened and what to do.
    public let message: String
    /// Whether the stored data itself cannot be used as it is (corrupt, a gap, another app's),
    /// so that starting again cannot help; otherwise the failure may pass (a full disk, a lock).
    public let isDataProblem: Bool
    /// Whether trying again soon may succeed (a log server not reachable or not ready yet).
    package var isTransient = false
    /// Whether the hub's local copies (a shared-log hub's local snapshots) must be discarded
    /// before it stops: they may hold a history the log no longer has.
    package var discardsLocalSnapshots = false
    /// Creates an error.
    ///
    /// - Parameters:
    ///   - message: What happened and what to do.
    ///   - isDataProblem: Whether the stored data cannot be used as it is.
    public init(_ message: String, isDataProblem: Bool = false) {
        self.message = message
        self.isDataProblem = isDataProblem
    }
    /// The message.
    public var description: String { message }
}

/// The hub without a data directory: nothing survives the process. Every proposal is
/// appended at the next flush. On the hub's event-loop thread only (its stored properties,
/// touched by every proposal, are `@exclusivity(unchecked)`, each with its line of proof: see
/// `HubLoop`'s note on exclusivity).
package final class MemoryLog: HubLog {
    // Unchecked: written by every proposal; only assigned.
    @exclusivity(unchecked) private var proposedThrough: UInt64?
    // Unchecked: appended by every proposal, taken every pass (`Array` methods only).
    @exclusivity(unchecked) private var events: [LogEvent] = []
    private let history: String

    /// Creates a log with a new history.
    package init(history: String = Digest.hex(UInt64.random(in: 0...UInt64.max))) { self.history = history }

    package func open() throws(StorageError) -> LogStart { LogStart(history: history) }
    package func propose(_ records: [LogRecord], expectingLast: UInt64, epoch: Int) {
        if let last = records.last { proposedThrough = last.seq }
    }
    package func flush() {
        guard let through = proposedThrough else { return }
        events.append(.accepted(through: through))
        proposedThrough = nil
    }
    package var mayRefuse: Bool { false }
    package func poll(into events: inout [LogEvent]) {
        guard !self.events.isEmpty else { return }
        events.append(contentsOf: self.events)
        self.events.removeAll(keepingCapacity: true)
    }
    package var readiness: LogReadiness? { nil }
    package func reserveReplicaIDs(from next: Int, count: Int) throws(StorageError) -> Range<Int> { next..<(next + count) }
    package func requestReplicaIDs(from next: Int, count: Int) { events.append(.replicaIDs(.success(next..<(next + count)))) }
    package func writeSnapshot(_ snapshot: StoredSnapshot) throws(StorageError) {}
    package func probe() -> Bool { true }
    package var status: LogStatus { LogStatus(kind: "memory", location: "memory") }
    package var isShared: Bool { false }
    package func close() {}
}

/// A log that only replays what another reader found (`hubd --check-data`, `--export`):
/// ``open()`` returns it, and nothing can be proposed.
package final class ReplayLog: HubLog {
    private let start: LogStart

    package init(_ start: LogStart) { self.start = start }

    package func open() throws(StorageError) -> LogStart { start }
    package func propose(_ records: [LogRecord], expectingLast: UInt64, epoch: Int) {}
    package func flush() {}
    package func poll(into events: inout [LogEvent]) {}
    package var readiness: LogReadiness? { nil }
    package func reserveReplicaIDs(from next: Int, count: Int) throws(StorageError) -> Range<Int> { next..<(next + count) }
    package func requestReplicaIDs(from next: Int, count: Int) {}
    package func writeSnapshot(_ snapshot: StoredSnapshot) throws(StorageError) {}
    package func probe() -> Bool { false }
    package var status: LogStatus { LogStatus(kind: "replay", location: "replay") }
    package var isShared: Bool { false }
    package var mayRefuse: Bool { false }
    package func close() {}
}
