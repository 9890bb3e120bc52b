import SyncCore

/// Where the hub's sequencer keeps the order of actions: the one seam between sequencing
/// and storage, so a later implementation can put the sequence on an external replicated
/// log (NATS JetStream, say) without touching the event loop or the protocol.
///
/// The sequencer calls it on the event-loop thread only, in this order: ``append(_:)`` for
/// each action it sequences, ``commit()`` before any of them is broadcast (or acknowledged),
/// ``writeSnapshot(_:)`` every so often. A failed commit means none of the uncommitted
/// records may be broadcast.
protocol SequenceLog: AnyObject {
    /// Adds a sequenced action; it is durable only after the next successful ``commit()``.
    func append(_ record: JournalRecord)
    /// Makes every appended record as durable as the log promises (see ``FsyncMode``).
    ///
    /// - Throws: ``StorageError``; the uncommitted records are then dropped from the log.
    func commit() throws(StorageError)
    /// Whether records were appended since the last commit.
    var hasUncommitted: Bool { get }
    /// Records a snapshot of the state at its seq, and drops what it makes unnecessary.
    ///
    /// - Throws: ``StorageError``; the log is unchanged.
    func writeSnapshot(_ snapshot: StoredSnapshot) throws(StorageError)
    /// Records durably that replica ids below `limit` may be handed out, so a restarted hub
    /// (even after `kill -9`) never hands out one of them again within the history.
    ///
    /// - Throws: ``StorageError``; the hub then goes on (ids may repeat after a crash).
    func leaseReplicaIDs(below limit: Int) throws(StorageError)
    /// Whether writing works again after a failure (a small probe write).
    func probe() -> Bool
    /// What an operator wants to know, for `status`.
    var status: StorageStatus { get }
    /// Releases files and locks.
    func close()
}

/// A snapshot as stored: the state at one seq and what is needed to go on from it.
struct StoredSnapshot: Sendable, Equatable {
    /// The seq of the last action the state includes.
    var seq: UInt64
    /// The digest of the state's canonical bytes.
    var digest: String
    /// The state's JSON.
    var state: JSON
    /// The next replica id to hand out (ids are unique within a history).
    var nextReplica: Int
    /// The session table (``SessionTable/json``) as of `seq`; `nil` in snapshots written
    /// before sessions existed.
    var sessions: JSON? = nil
}

/// Storage facts for `status` and the start-up line.
struct StorageStatus: Sendable, Equatable {
    /// `"memory"` or the data directory.
    var location: String
    /// The fsync mode, `nil` in memory.
    var fsync: FsyncMode?
    /// Bytes in journal segments.
    var journalBytes: Int
    /// Number of journal segments.
    var segments: Int
    /// The seq of the newest snapshot (0: none).
    var snapshotSeq: UInt64
    /// The last fsync's duration in microseconds (0: none yet).
    var lastFsyncMicroseconds: Int
}

/// Storage could not do what was asked; the message says what and what to do.
public struct StorageError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What happened and what to do.
    public let message: String
    /// Creates an error.
    ///
    /// - Parameter message: What happened and what to do.
    public init(_ message: String) { self.message = message }
    /// The message.
    public var description: String { message }
}

/// The hub without a data directory: nothing survives the process (as before durability).
final class MemoryLog: SequenceLog {
    private var uncommitted = false
    func append(_ record: JournalRecord) { uncommitted = true }
    func commit() throws(StorageError) { uncommitted = false }
    var hasUncommitted: Bool { uncommitted }
    func writeSnapshot(_ snapshot: StoredSnapshot) throws(StorageError) {}
    func leaseReplicaIDs(below limit: Int) throws(StorageError) {}
    func probe() -> Bool { true }
    var status: StorageStatus {
        StorageStatus(location: "memory", fsync: nil, journalBytes: 0, segments: 0, snapshotSeq: 0, lastFsyncMicroseconds: 0)
    }
    func close() {}
}
