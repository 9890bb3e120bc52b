#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import SyncCore
import SyncPOSIX
import SyncLocks
import Synchronization

/// The journal and snapshots in a data directory: the log of a hub that is the only writer.
///
/// Layout (files 0600, the directory 0700):
/// - `lock`: held with `flock` by the one hub using the directory;
/// - `storesync.json`: `{"app":FINGERPRINT,"format":2,"history":ID}`;
/// - `journal-SEQ.log`: segments (``JournalFormat``), named by their first seq: a header, then
///   group commits, each its records and a commit mark;
/// - `next-segment.tmp`: the next segment, created ahead so that a full descriptor table
///   never stops a roll-over (renamed into place when it is needed);
/// - `snapshot-SEQ.snap`: `"SSS1"`, a 4-byte length, a CRC-32C, then the canonical JSON
///   ``StoredSnapshot/body``; written atomically. The newest two are kept;
/// - `replica-ids.json`: `{"below":N}`, the replica-id lease.
///
/// Every file is opened relative to the directory's descriptor, held from ``open()`` on, so
/// committing needs no new descriptor except at a roll-over whose spare could not be made.
/// A proposal is written and (per ``FsyncMode``) fsynced at the next ``flush()`` (under
/// `always`, at once), then reported appended. A write or fsync that fails is undone (the
/// segment cut back to its last commit) and reported `failed`; if it cannot be undone, the
/// log reports itself `broken` and the hub stops, so it never serves a state its journal
/// may not hold.
package final class FileLog: HubLog {
    /// The data directory.
    package let directory: String
    /// The fsync mode.
    package let mode: FsyncMode
    /// Segments roll over past this size.
    package let segmentBytes: Int
    /// Journal records kept behind the newest snapshot (the resume window).
    package let retainedActions: UInt64
    /// The app's fingerprint; a directory written by another app is refused.
    package let fingerprint: String
    /// Every app version the hub can replay.
    package let accepts: [String]
    /// The app version the history runs now (changed by a committed upgrade record).
    private var currentApp: String
    /// Every upgrade the history went through, for `storesync.json`.
    private var upgrades: [(seq: UInt64, upgrade: LogUpgrade)] = []
    /// Upgrade records in the group being written.
    private var pendingUpgrades: [(seq: UInt64, upgrade: LogUpgrade)] = []
    /// `storesync.json` could not be rewritten after a committed upgrade: nothing more is
    /// written (no group, no snapshot, no compaction) until it is, so the directory never
    /// holds what the file's version cannot read.
    private var metaStale = false

    private var handle: DirectoryHandle?
    private var lockFD: Int32 = -1
    private var history = ""
    /// The segments, oldest first.
    private var segments: [(first: UInt64, name: String)] = []
    private var appendFD: Int32 = -1
    private var appendName = ""
    private var appendSize = 0
    /// `next-segment.tmp`, opened ahead of need.
    private var spareFD: Int32 = -1
    /// Framed records proposed since the last write, and the seqs of the first and last.
    private var pending: [UInt8] = []
    private var pendingFirst: UInt64 = 0
    private var pendingLast: UInt64 = 0
    private var pendingCount: UInt64 { pendingLast >= pendingFirst && pendingFirst > 0 ? pendingLast - pendingFirst + 1 : 0 }
    private var events: [LogEvent] = []
    /// The seq of the last durable record.
    private var lastSeq: UInt64 = 0
    /// Set while writing fails; proposals are refused until ``probe()`` succeeds.
    private var failure: StorageError?
    private var isBroken = false
    private var snapshotSeq: UInt64 = 0
    private var lastFsyncMicroseconds = 0
    /// Group commits written since the log opened.
    private var commits = 0

    static let metaName = "storesync.json"
    static let lockName = "lock"
    static let spareName = "next-segment.tmp"
    /// `{"below":N}`: every replica id below N may have been handed out.
    static let replicaLeaseName = "replica-ids.json"

    /// Creates a log over a data directory (nothing is touched before ``open()``).
    ///
    /// - Parameters:
    ///   - directory: The data directory (created 0700 if missing; its parent must exist). At
    ///     ``open()`` it must pass `FileSystem.checkPrivateDirectory(_:)`: a real directory of the
    ///     hub's user or root that no one else may write in.
    ///   - fingerprint: The app's fingerprint.
    ///   - mode: The fsync mode.
    ///   - segmentBytes: Segment size before a new one starts.
    ///   - retainedActions: Records kept behind the newest snapshot.
    ///   - accepts: Every app version the hub can replay (its chain); `nil`: `fingerprint` alone.
    package init(directory: String, fingerprint: String, accepts: [String]? = nil, mode: FsyncMode, segmentBytes: Int = 64 << 20,
                 retainedActions: UInt64 = 10_000) {
        self.directory = directory
        self.fingerprint = fingerprint
        self.accepts = accepts ?? [fingerprint]
        self.currentApp = fingerprint
        self.mode = mode
        self.segmentBytes = segmentBytes
        self.retainedActions = retainedActions
    }

    // MARK: - Opening

    package func open() throws(StorageError) -> LogStart {
        do throws(SystemError) {
            try FileSystem.makeDirectory(directory)
        } catch {
            throw StorageError("cannot use the data directory: \(error.message)")
        }
        // A symbolic link, another user's directory or one others may write in is refused before
        // anything (the lock first) is created in it.
        do throws(SystemError) {
            try FileSystem.checkPrivateDirectory(directory)
        } catch {
            throw StorageError(error.message)
        }
        let lockPath = directory + "/" + Self.lockName
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
            let handle: DirectoryHandle
            do throws(SystemError) {
                handle = try DirectoryHandle(directory)
            } catch {
                throw StorageError("cannot use the data directory: \(error.message)")
            }
            self.handle = handle
            self.lockFD = lockFD
            let recovery = try Self.recover(directory: directory, fingerprint: fingerprint, accepts: accepts, repair: true,
                                            create: true)
            history = recovery.start.history
            segments = recovery.segments.map { (first: $0.0, name: $0.1) }
            lastSeq = recovery.lastSeq
            snapshotSeq = recovery.start.snapshot?.seq ?? 0
            currentApp = recovery.app
            upgrades = recovery.upgrades
            if recovery.format < JournalFormat.currentFormat || recovery.metaLags {
                // An upgrade record committed before the file was rewritten: finishing that
                // write completes the upgrade.
                try Self.writeMeta(handle, fingerprint: currentApp, history: history, upgrades: upgrades)
            }
            handle.remove(Self.spareName)
            openSpare()
            return recovery.start
        } catch {
            handle?.close()
            handle = nil
            self.lockFD = -1
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

    /// Writes `storesync.json`: format 2, or format 3 once the history holds an upgrade (readers
    /// that predate upgrades refuse it).
    static func writeMeta(_ handle: DirectoryHandle, fingerprint: String, history: String,
                          upgrades: [(seq: UInt64, upgrade: LogUpgrade)]) throws(StorageError) {
        var meta: JSON = ["app": .string(fingerprint), "format": JSON(JournalFormat.currentFormat), "history": .string(history)]
        if !upgrades.isEmpty {
            meta = ["app": .string(fingerprint), "format": JSON(JournalFormat.upgradedFormat), "history": .string(history),
                    "upgrades": .array(upgrades.map { $0.upgrade.json(seq: $0.seq) })]
        }
        do throws(SystemError) {
            try handle.writeAtomically(metaName, meta.canonicalBytes)
        } catch {
            throw StorageError("cannot write \(handle.pathOf(metaName)): \(error.message)")
        }
    }

    // MARK: - Proposing and committing

    package func propose(_ records: [LogRecord], expectingLast: UInt64, epoch: Int) {
        guard let first = records.first else { return }
        if isBroken || failure != nil || expectingLast != lastSeq + pendingCount {
            // Only the hub writes here, so a wrong expectation is the hub's own mistake; nothing
            // is appended, and the hub is told as it would be of a full disk.
            let reason = failure ?? StorageError("the journal ends at seq \(lastSeq + pendingCount), a proposal expected \(expectingLast)")
            events.append(.failed(from: first.seq, reason))
            return
        }
        for record in records {
            JournalFormat.appendRecord(record, to: &pending)
            if let upgrade = record.upgrade { pendingUpgrades.append((record.seq, upgrade)) }
            if pendingCount == 0 { pendingFirst = record.seq }
            pendingLast = record.seq
            // `always`: each record is its own group commit, fsynced before the next.
            if mode == .always {
                writeGroup()
                if isBroken || failure != nil { return }
            }
        }
    }

    package func flush() { writeGroup() }

    package func poll(into events: inout [LogEvent]) {
        guard !self.events.isEmpty else { return }
        events.append(contentsOf: self.events)
        self.events.removeAll(keepingCapacity: true)
    }

    package var readiness: LogReadiness? { nil }
    package var isShared: Bool { false }
    package var mayRefuse: Bool { true }

    /// Writes the pending records and their commit mark in one write, fsyncs per the mode,
    /// and reports them appended; on failure undoes the write and reports them failed.
    private func writeGroup() {
        guard pendingCount > 0 else { return }
        let first = pendingFirst, last = pendingLast
        if let error = rewriteMetaIfStale() {
            pending.removeAll(keepingCapacity: pending.capacity <= 1 << 20)
            pendingFirst = 0
            pendingLast = 0
            pendingUpgrades.removeAll()
            failure = error
            events.append(.failed(from: first, error))
            return
        }
        let groupUpgrades = pendingUpgrades
        defer {
            pending.removeAll(keepingCapacity: pending.capacity <= 1 << 20)
            pendingFirst = 0
            pendingLast = 0
            pendingUpgrades.removeAll()
        }
        JournalFormat.appendCommit(seq: last, groupStart: 0, to: &pending)
        do throws(SystemError) {
            if appendFD < 0 { try startSegment(first: first) }
            if let code = StorageFaults.writeFailure.withLock({ $0 }) {
                throw SystemError("cannot write \(appendName): \(SystemError.describe(errno: code))", errno: code)
            }
            try FileSystem.writeAll(appendFD, pending, path: pathOf(appendName))
            // An upgrade is durable before `storesync.json` names the new version, whatever the mode.
            if mode != .never || !groupUpgrades.isEmpty {
                let start = ContinuousClock.now
                try FileSystem.sync(appendFD, path: pathOf(appendName))
                let elapsed = (ContinuousClock.now - start).components
                lastFsyncMicroseconds = Int(elapsed.seconds) * 1_000_000 + Int(elapsed.attoseconds / 1_000_000_000_000)
            }
        } catch {
            undo(error, first: first)
            return
        }
        appendSize += pending.count
        lastSeq = last
        if let newest = groupUpgrades.last {
            upgrades.append(contentsOf: groupUpgrades)
            currentApp = newest.upgrade.to
            // The record is durable: the upgrade happened. Should this write fail, nothing more
            // is written until it succeeds (`rewriteMetaIfStale`); a restart finds the record and
            // rewrites the file too (`metaLags`).
            metaStale = true
            _ = rewriteMetaIfStale()
        }
        events.append(.accepted(through: last))
        commits += 1
        if appendSize >= segmentBytes { closeSegment() }
    }

    /// Rewrites `storesync.json` after a committed upgrade, if that is still to be done.
    ///
    /// - Returns: Why it cannot be, or `nil` once it is (or was never needed).
    private func rewriteMetaIfStale() -> StorageError? {
        guard metaStale else { return nil }
        guard let handle else { return StorageError("the data directory is closed") }
        do throws(StorageError) {
            if let code = StorageFaults.metaWriteFailure.withLock({ $0 }) {
                throw StorageError("cannot write \(handle.pathOf(Self.metaName)): \(SystemError.describe(errno: code))")
            }
            try Self.writeMeta(handle, fingerprint: currentApp, history: history, upgrades: upgrades)
        } catch {
            return StorageError("the history was upgraded to \(currentApp), but \(Self.metaName) cannot be rewritten to say so (\(error.message)); nothing more is written until it can")
        }
        metaStale = false
        return nil
    }

    /// Cuts the segment back to its last commit after a failed write; a cut that fails breaks the log.
    private func undo(_ error: SystemError, first: UInt64) {
        let reason = StorageError("the journal cannot be written: \(error.message)")
        if appendFD >= 0 {
            let cut = StorageFaults.truncateFailure.withLock({ $0 }) ?? (ftruncate(appendFD, off_t(appendSize)) == 0 ? 0 : currentErrno())
            var synced = cut == 0
            if synced {
                do throws(SystemError) { try FileSystem.sync(appendFD, path: pathOf(appendName)) } catch { synced = false }
            }
            guard synced else {
                isBroken = true
                let why = cut == 0 ? "its fsync failed" : SystemError.describe(errno: cut)
                events.append(.broken(StorageError("a failed journal write (\(error.message)) could not be undone: cutting \(pathOf(appendName)) back to \(appendSize) bytes failed (\(why)). The hub stops so that it never serves actions its journal may not hold; restart it, and recovery keeps what the last complete commit covers")))
                return
            }
        }
        failure = reason
        events.append(.failed(from: first, reason))
    }

    private func pathOf(_ name: String) -> String { directory + "/" + name }

    /// Starts the segment for records from `first` on: the spare renamed into place (or a new
    /// file), its header written and made durable with the directory entry.
    private func startSegment(first: UInt64) throws(SystemError) {
        guard let handle else { throw SystemError("the data directory is closed") }
        let name = Self.segmentName(first)
        if let size = handle.size(name), size > 0 {
            // A header-only segment left by a stop right after a roll-over: append to it.
            appendFD = try handle.open(name, O_WRONLY | O_APPEND)
            appendSize = size
        } else {
            if spareFD >= 0 {
                try handle.rename(Self.spareName, to: name)
                appendFD = spareFD
                spareFD = -1
            } else {
                appendFD = try handle.open(name, O_WRONLY | O_CREAT | O_APPEND)
            }
            var header: [UInt8] = []
            JournalFormat.appendHeader(.init(first: first, format: JournalFormat.currentFormat, history: history), to: &header)
            do throws(SystemError) {
                try FileSystem.writeAll(appendFD, header, path: pathOf(name))
                if mode != .never { try FileSystem.sync(appendFD, path: pathOf(name)) }
            } catch {
                FileSystem.close(appendFD)
                appendFD = -1
                handle.remove(name)
                throw error
            }
            appendSize = header.count
            try handle.sync()
            openSpare()
        }
        appendName = name
        if !segments.contains(where: { $0.name == name }) { segments.append((first, name)) }
    }

    /// Creates the next segment's file ahead of need; a failure (no descriptor left) is
    /// retried at the next roll-over, which then opens the segment directly.
    private func openSpare() {
        guard spareFD < 0, let handle else { return }
        spareFD = (try? handle.open(Self.spareName, O_WRONLY | O_CREAT | O_EXCL | O_APPEND)) ?? -1
    }

    /// Closes the current segment; under `never` it is fsynced first, so only the newest
    /// segment can ever lose a tail.
    private func closeSegment() {
        guard appendFD >= 0 else { return }
        if mode == .never { try? FileSystem.sync(appendFD, path: pathOf(appendName)) }
        FileSystem.close(appendFD)
        appendFD = -1
        appendSize = 0
        appendName = ""
    }

    // MARK: - Replica ids

    package func reserveReplicaIDs(from next: Int, count: Int) throws(StorageError) -> Range<Int> {
        guard let handle else { throw StorageError("the data directory is closed") }
        let below = next + count
        do throws(SystemError) {
            try handle.writeAtomically(Self.replicaLeaseName, JSON.object(["below": JSON(below)]).canonicalBytes)
        } catch {
            throw StorageError("cannot write \(pathOf(Self.replicaLeaseName)): \(error.message)")
        }
        return next..<below
    }

    package func requestReplicaIDs(from next: Int, count: Int) {
        do throws(StorageError) {
            events.append(.replicaIDs(.success(try reserveReplicaIDs(from: next, count: count))))
        } catch {
            events.append(.replicaIDs(.failure(error)))
        }
    }

    // MARK: - Snapshots and compaction

    /// A snapshot file's bytes: `"SSS1"`, the body's length and CRC-32C (4 bytes each, big
    /// endian), then the body's canonical JSON. ``readSnapshot(_:)`` reads them back; a shared
    /// log's local snapshots are the same files.
    ///
    /// - Parameter snapshot: The snapshot.
    /// - Returns: The file's bytes.
    static func snapshotFile(_ snapshot: StoredSnapshot) -> [UInt8] {
        let bytes = snapshot.body.canonicalBytes
        var file = Array("SSS1".utf8)
        JournalFormat.appendUInt32(UInt32(truncatingIfNeeded: bytes.count), to: &file)
        JournalFormat.appendUInt32(CRC32C.checksum(bytes), to: &file)
        file.append(contentsOf: bytes)
        return file
    }

    package func writeSnapshot(_ snapshot: StoredSnapshot) throws(StorageError) {
        guard let handle else { throw StorageError("the data directory is closed") }
        if let error = rewriteMetaIfStale() { throw error }
        let file = Self.snapshotFile(snapshot)
        do throws(SystemError) {
            if let code = StorageFaults.writeFailure.withLock({ $0 }) {
                throw SystemError("cannot write a snapshot: \(SystemError.describe(errno: code))", errno: code)
            }
            try handle.writeAtomically(Self.snapshotName(snapshot.seq), file)
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
        guard let handle else { return }
        if let snapshots = try? Self.listSnapshots(directory) {
            for (_, path) in snapshots.dropFirst(2) { FileSystem.remove(path) }
        }
        let keepFrom = min(snapshotSeq, lastSeq > retainedActions ? lastSeq - retainedActions : 0) + 1
        var kept: [(first: UInt64, name: String)] = []
        for (index, segment) in segments.enumerated() {
            let nextFirst = index + 1 < segments.count ? segments[index + 1].first : UInt64.max
            let wholeBefore = nextFirst != UInt64.max && nextFirst <= keepFrom
            if wholeBefore && segment.name != appendName {
                handle.remove(segment.name)
            } else {
                kept.append(segment)
            }
        }
        segments = kept
        try? handle.sync()
    }

    package func probe() -> Bool {
        guard !isBroken, let handle else { return false }
        guard failure != nil else { return true }
        if rewriteMetaIfStale() != nil { return false }
        if StorageFaults.writeFailure.withLock({ $0 }) != nil { return false }
        do throws(SystemError) {
            try handle.writeAtomically("probe", [UInt8](repeating: 0x2E, count: 4096))
            handle.remove("probe")
        } catch {
            handle.remove("probe")
            handle.remove("probe.tmp")
            return false
        }
        failure = nil
        return true
    }

    package var status: LogStatus {
        var status = LogStatus(kind: "file", location: directory, fsync: mode)
        status.dataDirectory = directory
        status.journalBytes = segments.reduce(0) { $0 + (handle?.size($1.name) ?? 0) }
        status.segments = segments.count
        status.snapshotSeq = snapshotSeq
        status.lastFsyncMicroseconds = lastFsyncMicroseconds
        status.commits = commits
        return status
    }

    package func close() {
        writeGroup()
        closeSegment()
        if spareFD >= 0 {
            FileSystem.close(spareFD)
            spareFD = -1
            handle?.remove(Self.spareName)
        }
        handle?.close()
        handle = nil
        if lockFD >= 0 { FileSystem.close(lockFD) }
        lockFD = -1
    }
}

/// A test seam behind the journal's file layer. Never set in production code.
package enum StorageFaults {
    /// While set, every journal, snapshot and probe write fails with this errno (a full disk
    /// is `ENOSPC`).
    package static let writeFailure = Locked<Int32?>(nil)
    /// While set, undoing a failed journal write (cutting the segment back) fails with this errno.
    package static let truncateFailure = Locked<Int32?>(nil)
    /// While set, rewriting `storesync.json` after a committed upgrade fails with this errno.
    package static let metaWriteFailure = Locked<Int32?>(nil)
}
