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

/// The journal and snapshots in a data directory.
///
/// Layout (all files 0600, the directory 0700):
/// - `lock`: held with `flock` by the one hub using the directory;
/// - `storesync.json`: `{"app":FINGERPRINT,"format":1,"history":ID}`, written once;
/// - `journal-SEQ.log`: segments of records (``JournalRecord``), named by their first seq;
/// - `snapshot-SEQ.snap`: `"SSS1"`, a 4-byte length, a CRC-32C, then the canonical JSON
///   `{"digest":…,"next_replica":…,"seq":…,"state":…}`; written to a `.tmp` file, fsynced,
///   renamed into place, the directory fsynced. The newest two are kept.
final class FileLog: SequenceLog {
    /// What was found on disk at start-up.
    struct Recovery {
        /// The history id kept in `storesync.json`.
        var history: String
        /// The newest valid snapshot, if any.
        var snapshot: StoredSnapshot?
        /// Other valid snapshots (seq and digest), to check the replay against.
        var checkpoints: [(seq: UInt64, digest: String)]
        /// Every record after the snapshot, in order and contiguous.
        var records: [JournalRecord]
        /// The contiguous records the journal still holds up to the snapshot (the resume window).
        var window: [JournalRecord] = []
        /// The files read, for the start-up line.
        var files: [String]
        /// What was repaired (a truncated torn tail), one line each.
        var warnings: [String]
        /// The largest replica id any record names.
        var largestOrigin: Int
        /// Every replica id below this may have been handed out (`replica-ids.json`; 0: none).
        var replicaLease: Int = 0
    }

    let directory: String
    let mode: FsyncMode
    /// Segments roll over past this size.
    let segmentBytes: Int
    /// Journal records kept behind the newest snapshot (the resume window).
    let retainedActions: UInt64

    private let lockFD: Int32
    private var segments: [(first: UInt64, path: String)]
    private var appendFD: Int32 = -1
    private var appendPath = ""
    private var appendSize = 0
    private var pending: [UInt8] = []
    private var pendingFirst: UInt64 = 0
    private var lastSeq: UInt64
    private var snapshotSeq: UInt64
    private var lastFsyncMicroseconds = 0

    static let metaName = "storesync.json"
    /// `{"below":N}`: every replica id below N may have been handed out (see ``leaseReplicaIDs(below:)``).
    static let replicaLeaseName = "replica-ids.json"
    static let format = 1

    private init(directory: String, mode: FsyncMode, lockFD: Int32, segments: [(UInt64, String)],
                 lastSeq: UInt64, snapshotSeq: UInt64, segmentBytes: Int, retainedActions: UInt64) {
        self.directory = directory
        self.mode = mode
        self.lockFD = lockFD
        self.segments = segments.map { (first: $0.0, path: $0.1) }
        self.lastSeq = lastSeq
        self.snapshotSeq = snapshotSeq
        self.segmentBytes = segmentBytes
        self.retainedActions = retainedActions
    }

    // MARK: - Opening and recovery

    /// Opens (creating if needed) a data directory for `app`, locked for this process.
    ///
    /// - Parameters:
    ///   - directory: The data directory.
    ///   - fingerprint: The app's fingerprint; a directory written by another app is refused.
    ///   - mode: The fsync mode.
    ///   - segmentBytes: Segment size before a new one starts.
    ///   - retainedActions: Records kept behind the newest snapshot.
    /// - Returns: The log, positioned after the last good record, and what it recovered.
    /// - Throws: ``StorageError`` naming the file, offset and what to do.
    static func open(directory: String, fingerprint: String, mode: FsyncMode, segmentBytes: Int = 64 << 20,
                     retainedActions: UInt64 = 10_000) throws(StorageError) -> (FileLog, Recovery) {
        do throws(SystemError) {
            try FileSystem.makeDirectory(directory)
        } catch {
            throw StorageError("cannot use the data directory: \(error.message)")
        }
        let lockPath = directory + "/lock"
        let locked: Int32?
        do throws(SystemError) {
            locked = try FileSystem.lockExclusive(lockPath)
        } catch {
            throw StorageError("cannot lock the data directory: \(error.message)")
        }
        guard let lockFD = locked else {
            throw StorageError("another hub is using the data directory \(directory) (it holds \(lockPath)); stop it first, or give this hub another --data-dir")
        }
        do throws(StorageError) {
            let recovery = try recover(directory: directory, fingerprint: fingerprint, repair: true, create: true)
            let segments = try listSegments(directory)
            let last = recovery.records.last?.seq ?? recovery.snapshot?.seq ?? 0
            let log = FileLog(directory: directory, mode: mode, lockFD: lockFD, segments: segments,
                              lastSeq: last, snapshotSeq: recovery.snapshot?.seq ?? 0, segmentBytes: segmentBytes,
                              retainedActions: retainedActions)
            return (log, recovery)
        } catch {
            FileSystem.close(lockFD)
            throw error
        }
    }

    static func segmentName(_ first: UInt64) -> String { "journal-" + padded(first) + ".log" }
    static func snapshotName(_ seq: UInt64) -> String { "snapshot-" + padded(seq) + ".snap" }

    private static func padded(_ value: UInt64) -> String {
        let digits = String(value)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits
    }

    private static func number(in name: String, prefix: String, suffix: String) -> UInt64? {
        guard name.hasPrefix(prefix), name.hasSuffix(suffix) else { return nil }
        return UInt64(name.dropFirst(prefix.count).dropLast(suffix.count))
    }

    static func listSegments(_ directory: String) throws(StorageError) -> [(UInt64, String)] {
        try names(in: directory).compactMap { name in
            number(in: name, prefix: "journal-", suffix: ".log").map { ($0, directory + "/" + name) }
        }.sorted { $0.0 < $1.0 }
    }

    static func listSnapshots(_ directory: String) throws(StorageError) -> [(UInt64, String)] {
        try names(in: directory).compactMap { name in
            number(in: name, prefix: "snapshot-", suffix: ".snap").map { ($0, directory + "/" + name) }
        }.sorted { $0.0 > $1.0 }
    }

    private static func names(in directory: String) throws(StorageError) -> [String] {
        do throws(SystemError) {
            return try FileSystem.list(directory)
        } catch {
            throw StorageError(error.message)
        }
    }

    /// Reads the meta file, or writes it for a new directory.
    static func history(directory: String, fingerprint: String, create: Bool) throws(StorageError) -> String {
        let path = directory + "/" + metaName
        if FileSystem.exists(path) {
            let json: JSON
            do {
                json = try JSON(parsing: try FileSystem.read(path))
            } catch {
                throw StorageError("\(path) is unreadable (\(error)); restore the data directory from a backup")
            }
            guard let app = json["app"]?.stringValue, let history = json["history"]?.stringValue else {
                throw StorageError("\(path) lacks \"app\" or \"history\"; restore the data directory from a backup")
            }
            guard JSONKey(app) == JSONKey(fingerprint) else {
                throw StorageError("app-mismatch: the data directory \(directory) was written by app \(app), this hub runs \(fingerprint); start hubd with the app that wrote it, or use another --data-dir")
            }
            return history
        }
        let existing = (try? listSegments(directory).count) ?? 0
        let snapshots = (try? listSnapshots(directory).count) ?? 0
        guard existing == 0 && snapshots == 0 else {
            throw StorageError("\(path) is missing but \(directory) holds journal or snapshot files; restore \(metaName) from a backup (it names the app and the history)")
        }
        guard create else { throw StorageError("\(directory) is not a StoreSync data directory (no \(metaName))") }
        let history = Digest.hex(UInt64.random(in: 0...UInt64.max))
        let meta: JSON = ["app": .string(fingerprint), "format": JSON(format), "history": .string(history)]
        do throws(SystemError) {
            try FileSystem.writeAtomically(path, meta.canonicalBytes)
        } catch {
            throw StorageError("cannot create \(path): \(error.message)")
        }
        return history
    }

    /// Reads a snapshot file; `nil` with a reason when it is damaged.
    static func readSnapshot(_ path: String) -> Result<StoredSnapshot, StorageError> {
        let bytes: [UInt8]
        do throws(SystemError) {
            bytes = try FileSystem.read(path)
        } catch {
            return .failure(StorageError(error.message))
        }
        return bytes.withUnsafeBytes { raw -> Result<StoredSnapshot, StorageError> in
            guard raw.count >= 12, Array(raw[0..<4]) == Array("SSS1".utf8) else {
                return .failure(StorageError("\(path): not a snapshot (bad header)"))
            }
            let length = Int(JournalRecord.readUInt32(raw, at: 4))
            guard raw.count == 12 + length else { return .failure(StorageError("\(path): truncated snapshot")) }
            let body = UnsafeRawBufferPointer(rebasing: raw[12...])
            guard CRC32C.checksum(body) == JournalRecord.readUInt32(raw, at: 8) else {
                return .failure(StorageError("\(path): checksum mismatch"))
            }
            guard let json = try? JSON(parsing: body), let seq = json["seq"]?.intValue, seq >= 0,
                  let digest = json["digest"]?.stringValue, let state = json["state"],
                  let next = json["next_replica"]?.intValue else {
                return .failure(StorageError("\(path): unreadable snapshot body"))
            }
            guard Digest.of(state) == digest else {
                return .failure(StorageError("\(path): the state's digest is \(Digest.of(state)), the snapshot says \(digest)"))
            }
            return .success(StoredSnapshot(seq: UInt64(seq), digest: digest, state: state, nextReplica: next,
                                           sessions: json["sessions"]))
        }
    }

    /// Scans the whole directory: snapshots, then every segment, record by record.
    ///
    /// A damaged record at the end of the newest segment (a torn tail: anything after the
    /// last whole, checksummed record, zeros included) is truncated when `repair` is set.
    /// Damage anywhere else is refused with the file and offset.
    static func recover(directory: String, fingerprint: String, repair: Bool, create: Bool) throws(StorageError) -> Recovery {
        let history = try history(directory: directory, fingerprint: fingerprint, create: create)
        var recovery = Recovery(history: history, snapshot: nil, checkpoints: [], records: [], files: [], warnings: [],
                                largestOrigin: 0)
        let leasePath = directory + "/" + replicaLeaseName
        if FileSystem.exists(leasePath) {
            if let json = try? JSON(parsing: FileSystem.read(leasePath)), let below = json["below"]?.intValue, below >= 0 {
                recovery.replicaLease = below
            } else {
                recovery.warnings.append("\(leasePath) is unreadable; replica ids continue after the largest one in the journal and snapshot (a replica that never dispatched before the crash may see its id again)")
            }
        }
        for (_, path) in try listSnapshots(directory) {
            switch readSnapshot(path) {
            case .success(let snapshot):
                if recovery.snapshot == nil {
                    recovery.snapshot = snapshot
                    recovery.files.append(path)
                } else {
                    recovery.checkpoints.append((snapshot.seq, snapshot.digest))
                }
            case .failure(let error):
                recovery.warnings.append("ignoring damaged snapshot \(error.message)")
            }
        }
        let base = recovery.snapshot?.seq ?? 0
        var expected = base + 1
        let segments = try listSegments(directory)
        for (index, (_, path)) in segments.enumerated() {
            let isNewest = index == segments.count - 1
            let bytes: [UInt8]
            do throws(SystemError) {
                bytes = try FileSystem.read(path)
            } catch {
                throw StorageError(error.message)
            }
            var used = false
            let outcome = bytes.withUnsafeBytes { raw -> Result<Int?, StorageError> in
                var offset = 0
                while offset < raw.count {
                    switch JournalRecord.decode(raw, at: offset) {
                    case .success(let (record, next)):
                        if record.seq < expected {
                            if let last = recovery.window.last, last.seq + 1 != record.seq { recovery.window.removeAll() }
                            recovery.window.append(record)
                        }
                        if record.seq >= expected {
                            guard record.seq == expected else {
                                return .failure(StorageError("\(path) at offset \(offset): record seq \(record.seq) follows seq \(expected - 1); actions \(expected)…\(record.seq - 1) are missing. Restore the data directory from a backup (hubd --check-data \(directory) shows the details)"))
                            }
                            recovery.records.append(record)
                            recovery.largestOrigin = max(recovery.largestOrigin, record.origin)
                            expected += 1
                            used = true
                        }
                        offset = next
                    case .failure(let failure):
                        if isNewest, JournalRecord.validRecordExists(in: raw, after: offset) == nil {
                            return .success(offset)   // a torn tail
                        }
                        return .failure(StorageError("\(path) is corrupt at offset \(offset) (\(failure.description)) and whole records follow; this is not a torn tail, so nothing is dropped. Restore the data directory from a backup, or inspect it with hubd --check-data \(directory)"))
                    }
                }
                return .success(nil)
            }
            switch outcome {
            case .failure(let error):
                throw error
            case .success(let tornAt?):
                let cut = bytes.count - tornAt
                let line = "\(path): torn tail at offset \(tornAt) (\(cut) bytes after the last whole record)"
                if repair {
                    do throws(SystemError) {
                        try FileSystem.truncate(path, to: tornAt)
                    } catch {
                        throw StorageError("cannot truncate the torn tail of \(path): \(error.message)")
                    }
                    recovery.warnings.append(line + " truncated")
                } else {
                    recovery.warnings.append(line + "; hubd --check-data \(directory) --repair truncates it")
                }
            case .success(nil):
                break
            }
            if used { recovery.files.append(path) }
        }
        if let first = segments.first, recovery.snapshot == nil, first.0 > 1 {
            throw StorageError("\(directory) has no usable snapshot and its journal starts at seq \(first.0); actions 1…\(first.0 - 1) are gone. Restore the data directory from a backup")
        }
        return recovery
    }

    // MARK: - Appending

    func append(_ record: JournalRecord) {
        if pending.isEmpty { pendingFirst = record.seq }
        record.encode(into: &pending)
        lastSeq = record.seq
    }

    var hasUncommitted: Bool { !pending.isEmpty }

    func commit() throws(StorageError) {
        guard !pending.isEmpty else { return }
        do throws(SystemError) {
            if appendFD < 0 { try openSegment(first: pendingFirst) }
            if let code = StorageFaults.writeFailure.withLock({ $0 }) {
                throw SystemError("cannot write \(appendPath): \(SystemError.describe(errno: code))", errno: code)
            }
            let path = appendPath
            let fd = appendFD
            let written: Result<Void, SystemError> = pending.withUnsafeBytes { raw in
                do throws(SystemError) {
                    try FileSystem.writeAll(fd, raw, path: path)
                    return .success(())
                } catch {
                    return .failure(error)
                }
            }
            try written.get()
            if mode != .never {
                let start = ContinuousClock.now
                try FileSystem.sync(appendFD, path: appendPath)
                let elapsed = (ContinuousClock.now - start).components
                lastFsyncMicroseconds = Int(elapsed.seconds) * 1_000_000 + Int(elapsed.attoseconds / 1_000_000_000_000)
            }
            let full = appendSize + pending.count >= segmentBytes
            // Even under `never`, a segment is fsynced once when it is full: only the newest
            // segment can then lose a tail in a power loss, so recovery always finds a
            // consistent prefix. Before `appendSize` moves, so a failure truncates these records.
            if full, mode == .never { try FileSystem.sync(appendFD, path: appendPath) }
            appendSize += pending.count
            pending.removeAll(keepingCapacity: pending.capacity <= 1 << 20)
            if full { closeSegment() }
        } catch {
            // Nothing uncommitted may survive: cut the segment back to its last good size.
            pending.removeAll()
            lastSeq = pendingFirst - 1
            if appendFD >= 0 { _ = ftruncate(appendFD, off_t(appendSize)) }
            throw StorageError("the journal cannot be written: \(error.message)")
        }
    }

    private func openSegment(first: UInt64) throws(SystemError) {
        let path = directory + "/" + Self.segmentName(first)
        appendFD = try FileSystem.open(path, O_WRONLY | O_CREAT | O_APPEND)
        appendPath = path
        appendSize = FileSystem.size(path) ?? 0
        if !segments.contains(where: { $0.path == path }) { segments.append((first, path)) }
        try FileSystem.syncDirectory(directory)
    }

    private func closeSegment() {
        if appendFD >= 0 { FileSystem.close(appendFD) }
        appendFD = -1
        appendSize = 0
    }

    // MARK: - Replica ids

    func leaseReplicaIDs(below limit: Int) throws(StorageError) {
        let path = directory + "/" + Self.replicaLeaseName
        do throws(SystemError) {
            try FileSystem.writeAtomically(path, JSON.object(["below": JSON(limit)]).canonicalBytes)
        } catch {
            throw StorageError("cannot write \(path): \(error.message)")
        }
    }

    // MARK: - Snapshots and compaction

    func writeSnapshot(_ snapshot: StoredSnapshot) throws(StorageError) {
        let body: JSON = ["seq": JSON(snapshot.seq), "digest": .string(snapshot.digest), "state": snapshot.state,
                          "next_replica": JSON(snapshot.nextReplica), "sessions": snapshot.sessions ?? [:]]
        let bytes = body.canonicalBytes
        var file = Array("SSS1".utf8)
        JournalRecord.appendUInt32(UInt32(truncatingIfNeeded: bytes.count), to: &file)
        JournalRecord.appendUInt32(CRC32C.checksum(bytes), to: &file)
        file.append(contentsOf: bytes)
        do throws(SystemError) {
            if let code = StorageFaults.writeFailure.withLock({ $0 }) {
                throw SystemError("cannot write a snapshot: \(SystemError.describe(errno: code))", errno: code)
            }
            try FileSystem.writeAtomically(directory + "/" + Self.snapshotName(snapshot.seq), file)
        } catch {
            throw StorageError("cannot write a snapshot: \(error.message)")
        }
        snapshotSeq = snapshot.seq
        // The next records start a new segment, so whole segments can be dropped.
        closeSegment()
        compact()
    }

    /// Drops snapshots but the newest two, and segments wholly before both the newest
    /// snapshot and the retained window.
    private func compact() {
        if let snapshots = try? Self.listSnapshots(directory) {
            for (_, path) in snapshots.dropFirst(2) { FileSystem.remove(path) }
        }
        let keepFrom = min(snapshotSeq, lastSeq > retainedActions ? lastSeq - retainedActions : 0) + 1
        var kept: [(first: UInt64, path: String)] = []
        for (index, segment) in segments.enumerated() {
            let nextFirst = index + 1 < segments.count ? segments[index + 1].first : UInt64.max
            let wholeBefore = nextFirst != UInt64.max && nextFirst <= keepFrom
            if wholeBefore && segment.path != appendPath {
                FileSystem.remove(segment.path)
            } else {
                kept.append(segment)
            }
        }
        segments = kept
        try? FileSystem.syncDirectory(directory)
    }

    func probe() -> Bool {
        if StorageFaults.writeFailure.withLock({ $0 }) != nil { return false }
        let path = directory + "/probe"
        do throws(SystemError) {
            try FileSystem.writeAtomically(path, [UInt8](repeating: 0x2E, count: 4096))
            FileSystem.remove(path)
            return true
        } catch {
            FileSystem.remove(path)
            FileSystem.remove(path + ".tmp")
            return false
        }
    }

    var status: StorageStatus {
        let bytes = segments.reduce(0) { $0 + (FileSystem.size($1.path) ?? 0) }
        return StorageStatus(location: directory, fsync: mode, journalBytes: bytes, segments: segments.count,
                             snapshotSeq: snapshotSeq, lastFsyncMicroseconds: lastFsyncMicroseconds)
    }

    func close() {
        closeSegment()
        FileSystem.close(lockFD)
    }
}

/// A test seam behind the journal's file layer: while `writeFailure` holds an errno, every
/// journal, snapshot and probe write fails with it (a full disk is `ENOSPC`). Never set in
/// production code.
package enum StorageFaults {
    package static let writeFailure = Mutex<Int32?>(nil)
}
