import SyncCore
import SyncPOSIX

extension FileLog {
    /// What a scan of a data directory found.
    struct Recovery {
        /// What the hub starts from.
        var start: LogStart
        /// The segments, oldest first.
        var segments: [(UInt64, String)]
        /// The directory's format (`storesync.json`'s `format`).
        var format: Int
        /// The seq of the last durable record (or of the snapshot when the journal has none after it).
        var lastSeq: UInt64
        /// What `storesync.json` says.
        var meta: Meta
        /// Every upgrade the history went through (the file's and the journal's), oldest first.
        var upgrades: [(seq: UInt64, upgrade: LogUpgrade)]
        /// The app version the history runs after its last durable record.
        var app: String
        /// Whether `storesync.json` lags behind the journal (an upgrade committed, the file not
        /// rewritten yet when the hub stopped): the next writer rewrites it.
        var metaLags: Bool { JSONKey(meta.app) != JSONKey(app) || meta.upgrades.count != upgrades.count }
    }

    /// The app version a history runs right after `seq`, given its upgrades.
    static func version(at seq: UInt64, upgrades: [(seq: UInt64, upgrade: LogUpgrade)], genesis: String) -> String {
        upgrades.last(where: { $0.seq <= seq })?.upgrade.to ?? genesis
    }

    static func listSegments(_ directory: String) throws(StorageError) -> [(UInt64, String)] {
        try names(in: directory).compactMap { name in
            number(in: name, prefix: "journal-", suffix: ".log").map { ($0, name) }
        }.sorted { $0.0 < $1.0 }
    }

    static func listSnapshots(_ directory: String) throws(StorageError) -> [(UInt64, String)] {
        try names(in: directory).compactMap { name in
            number(in: name, prefix: "snapshot-", suffix: ".snap").map { ($0, directory + "/" + name) }
        }.sorted { $0.0 > $1.0 }
    }

    private static func number(in name: String, prefix: String, suffix: String) -> UInt64? {
        guard name.hasPrefix(prefix), name.hasSuffix(suffix) else { return nil }
        let digits = name.dropFirst(prefix.count).dropLast(suffix.count)
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return UInt64(digits)
    }

    private static func names(in directory: String) throws(StorageError) -> [String] {
        do throws(SystemError) {
            return try FileSystem.list(directory)
        } catch {
            throw StorageError(error.message)
        }
    }

    /// What `storesync.json` says.
    struct Meta {
        /// The history id.
        var history: String
        /// The directory's format.
        var format: Int
        /// The app version the history runs (as of the newest upgrade the file records).
        var app: String
        /// The upgrades the history went through, oldest first (format 3).
        var upgrades: [(seq: UInt64, upgrade: LogUpgrade)]
    }

    /// Reads the meta file (history, format, app and upgrades), or writes it for a new directory.
    ///
    /// - Parameters:
    ///   - directory: The data directory.
    ///   - fingerprint: The app version a new directory is created for.
    ///   - accepts: The versions this reader can replay (`nil`: any, for a reader that applies
    ///     nothing); the file's app must be one of them.
    ///   - create: Whether a new directory may be created.
    static func meta(directory: String, fingerprint: String, accepts: [String]?, create: Bool) throws(StorageError) -> Meta {
        let path = directory + "/" + metaName
        if FileSystem.exists(path) {
            let json: JSON
            do {
                json = try JSON(parsing: try FileSystem.read(path))
            } catch {
                throw StorageError("\(path) is unreadable (\(error)); restore the data directory from a backup", isDataProblem: true)
            }
            guard let app = json["app"]?.stringValue, let history = json["history"]?.stringValue else {
                throw StorageError("\(path) lacks \"app\" or \"history\"; restore the data directory from a backup", isDataProblem: true)
            }
            if let accepts, !accepts.contains(where: { JSONKey($0) == JSONKey(app) }) {
                throw StorageError("app-mismatch: the data directory \(directory) was written by app \(ControlCharacters.escaped(app)), this hub runs \(accepts.count > 1 ? "one of " + accepts.joined(separator: ", ") : fingerprint); start the hub with the app that wrote it, or use another --data-dir", isDataProblem: true)
            }
            let format = json["format"]?.intValue ?? 1
            guard format <= JournalFormat.upgradedFormat else {
                throw StorageError("\(path) says format \(format), but this hub reads formats up to \(JournalFormat.upgradedFormat); run the newer hub that wrote the directory", isDataProblem: true)
            }
            var upgrades: [(seq: UInt64, upgrade: LogUpgrade)] = []
            for entry in json["upgrades"]?.arrayValue ?? [] {
                guard let seq = entry["seq"]?.uint64Value, seq > 0, let upgrade = LogUpgrade(json: entry),
                      upgrades.last.map({ $0.seq < seq }) ?? true else {
                    throw StorageError("\(path) has an unreadable \"upgrades\" entry; restore the data directory from a backup", isDataProblem: true)
                }
                upgrades.append((seq, upgrade))
            }
            return Meta(history: history, format: format, app: app, upgrades: upgrades)
        }
        let existing = (try? listSegments(directory).count) ?? 0
        let snapshots = (try? listSnapshots(directory).count) ?? 0
        guard existing == 0 && snapshots == 0 else {
            throw StorageError("\(path) is missing but \(directory) holds journal or snapshot files; restore \(metaName) from a backup (it names the app and the history)", isDataProblem: true)
        }
        guard create else { throw StorageError("\(directory) is not a StoreSync data directory (no \(metaName))", isDataProblem: true) }
        let history = Digest.hex(UInt64.random(in: 0...UInt64.max))
        let handle: DirectoryHandle
        do throws(SystemError) {
            handle = try DirectoryHandle(directory)
        } catch {
            throw StorageError("cannot use the data directory: \(error.message)")
        }
        defer { handle.close() }
        try writeMeta(handle, fingerprint: fingerprint, history: history, upgrades: [])
        return Meta(history: history, format: JournalFormat.currentFormat, app: fingerprint, upgrades: [])
    }

    /// Reads a snapshot file.
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
            let length = Int(JournalFormat.readUInt32(raw, at: 4))
            guard raw.count == 12 + length else { return .failure(StorageError("\(path): truncated snapshot")) }
            let body = UnsafeRawBufferPointer(rebasing: raw[12...])
            guard CRC32C.checksum(body) == JournalFormat.readUInt32(raw, at: 8) else {
                return .failure(StorageError("\(path): checksum mismatch"))
            }
            guard let json = try? JSON(parsing: body) else { return .failure(StorageError("\(path): unreadable snapshot body")) }
            return StoredSnapshot.read(json).mapError { StorageError("\(path): \($0.message)") }
        }
    }

    /// Scans the whole directory: snapshots, then every segment, item by item.
    ///
    /// What the newest segment holds after its last complete commit mark (whole records, a
    /// torn write, zeros) was never acknowledged and is truncated when `repair` is set; a
    /// format-1 segment (no marks) ends at its last whole record instead. Damage before a
    /// complete commit, a seq that goes backwards, or a gap, is refused with file and offset.
    ///
    /// Upgrade records are read as the journal holds them. A snapshot names the app version of
    /// its state; one whose version is not the one the committed history runs at its seq (a
    /// migrated snapshot whose upgrade record never committed) is ignored.
    ///
    /// - Parameters:
    ///   - directory: The data directory.
    ///   - fingerprint: The app version a new directory is created for.
    ///   - accepts: The versions the reader can replay (`nil`: any); the history's versions must
    ///     all be among them.
    ///   - repair: Truncate a torn tail.
    ///   - create: Whether a new directory may be created.
    static func recover(directory: String, fingerprint: String, accepts: [String]?, repair: Bool,
                        create: Bool) throws(StorageError) -> Recovery {
        let meta = try meta(directory: directory, fingerprint: fingerprint, accepts: accepts, create: create)
        var leaseWarning: String?
        var lease = 0
        let leasePath = directory + "/" + replicaLeaseName
        if FileSystem.exists(leasePath) {
            if let json = try? JSON(parsing: FileSystem.read(leasePath)), let below = json["below"]?.intValue, below >= 0 {
                lease = below
            } else {
                leaseWarning = "\(leasePath) is unreadable; replica ids continue after the largest one in the journal and snapshot (a replica that never dispatched before the crash may see its id again)"
            }
        }
        var snapshots: [(StoredSnapshot, String)] = []
        var damaged: [String] = []
        for (_, path) in try listSnapshots(directory) {
            switch readSnapshot(path) {
            case .success(let snapshot): snapshots.append((snapshot, path))
            case .failure(let error): damaged.append("ignoring damaged snapshot \(error.message)")
            }
        }
        var ignored: [String] = []
        while true {
            var start = LogStart(history: meta.history)
            start.replicaLease = lease
            if let leaseWarning { start.warnings.append(leaseWarning) }
            for (snapshot, path) in snapshots where !ignored.contains(path) {
                if start.snapshot == nil {
                    start.snapshot = snapshot
                    start.sources.append(path)
                } else {
                    start.snapshotDigests.append((snapshot.seq, snapshot.digest))
                }
            }
            start.warnings.append(contentsOf: damaged)
            var recovery = try scan(directory: directory, start: start, meta: meta, repair: repair && ignored.isEmpty)
            // The versions the committed history ran: the file's record of upgrades, and the journal's.
            var upgrades = meta.upgrades
            // Both lists read in place (a million records are never copied to be looked at).
            for record in [recovery.start.window, recovery.start.records].joined() {
                guard let upgrade = record.upgrade, !upgrades.contains(where: { $0.seq == record.seq }) else { continue }
                upgrades.append((record.seq, upgrade))
            }
            upgrades.sort { $0.seq < $1.seq }
            let genesis = upgrades.first?.upgrade.from ?? meta.app
            if let snapshot = recovery.start.snapshot, let app = snapshot.app,
               JSONKey(app) != JSONKey(version(at: snapshot.seq, upgrades: upgrades, genesis: genesis)),
               let path = recovery.start.sources.first {
                // A migrated snapshot whose upgrade never committed (or the other way round).
                ignored.append(path)
                damaged.append("ignoring snapshot \(path): it holds a state of \(ControlCharacters.escaped(app)), but the committed history runs \(version(at: snapshot.seq, upgrades: upgrades, genesis: genesis)) at seq \(snapshot.seq)")
                continue
            }
            if let accepts {
                for (seq, upgrade) in upgrades where !accepts.contains(where: { JSONKey($0) == JSONKey(upgrade.to) }) {
                    throw StorageError("app-mismatch: the history in \(directory) was upgraded to \(ControlCharacters.escaped(upgrade.to)) at seq \(seq); this hub carries \(accepts.joined(separator: ", ")). Run a hub built with \(ControlCharacters.escaped(upgrade.to))", isDataProblem: true)
                }
            }
            recovery.upgrades = upgrades
            recovery.start.fingerprint = version(at: recovery.start.snapshot?.seq ?? 0, upgrades: upgrades, genesis: genesis)
            recovery.app = version(at: recovery.lastSeq, upgrades: upgrades, genesis: genesis)
            return recovery
        }
    }

    /// Scans every segment after the snapshot `start` holds (see ``recover(directory:fingerprint:accepts:repair:create:)``).
    private static func scan(directory: String, start: LogStart, meta: Meta, repair: Bool) throws(StorageError) -> Recovery {
        var start = start
        let base = start.snapshot?.seq ?? 0
        var scan = Scan(expected: base + 1)
        let segments = try listSegments(directory)
        for (index, (first, name)) in segments.enumerated() {
            let path = directory + "/" + name
            let isNewest = index == segments.count - 1
            let bytes: [UInt8]
            do throws(SystemError) {
                bytes = try FileSystem.read(path)
            } catch {
                throw StorageError(error.message)
            }
            let before = scan.records.count
            let outcome = bytes.withUnsafeBytes { raw -> Result<Int?, StorageError> in
                do throws(StorageError) {
                    return .success(try scan.segment(raw, path: path, first: first, history: meta.history, isNewest: isNewest,
                                                     nextFirst: isNewest ? nil : segments[index + 1].0, directory: directory))
                } catch {
                    return .failure(error)
                }
            }
            let cut = try outcome.get()
            if let cut {
                let after = scan.legacy ? "after the last whole record" : "after the last complete commit; never acknowledged"
                let line = "\(path): torn tail at offset \(cut) (\(bytes.count - cut) bytes \(after))"
                if repair {
                    do throws(SystemError) {
                        try FileSystem.truncate(path, to: cut)
                    } catch {
                        throw StorageError("cannot truncate the torn tail of \(path): \(error.message)")
                    }
                    scan.warnings.append(line + " truncated")
                } else {
                    scan.warnings.append(line + "; hubd --check-data \(directory) --repair truncates it")
                }
            }
            if scan.records.count > before || (start.sources.isEmpty && isNewest) { start.sources.append(path) }
        }
        if let first = segments.first, start.snapshot == nil, first.0 > 1 {
            throw StorageError("\(directory) has no usable snapshot and its journal starts at seq \(first.0); actions 1…\(first.0 - 1) are gone. Restore the data directory from a backup", isDataProblem: true)
        }
        start.records = scan.records
        start.window = scan.window
        start.warnings.append(contentsOf: scan.warnings)
        start.largestOrigin = scan.largestOrigin
        let last = scan.records.last?.seq ?? base
        return Recovery(start: start, segments: segments, format: meta.format, lastSeq: last, meta: meta, upgrades: [],
                        app: meta.app)
    }

    /// The state of a scan across segments.
    private struct Scan {
        /// The next seq to replay.
        var expected: UInt64
        var records: [LogRecord] = []
        var window: [LogRecord] = []
        var warnings: [String] = []
        var largestOrigin = 0
        /// The last seq seen in any segment.
        var lastSeen: UInt64 = 0
        /// Whether the segment scanned last was format 1.
        var legacy = false

        init(expected: UInt64) { self.expected = expected }

        /// Takes one committed record.
        mutating func accept(_ record: LogRecord, path: String, offset: Int, directory: String) throws(StorageError) {
            guard record.seq > lastSeen || lastSeen == 0 else {
                throw StorageError("\(path) at offset \(offset): record seq \(record.seq) does not follow seq \(lastSeen) (the journal goes backwards); restore the data directory from a backup (hubd --check-data \(directory) shows the details)", isDataProblem: true)
            }
            lastSeen = record.seq
            if record.seq < expected {
                if let last = window.last, last.seq + 1 != record.seq { window.removeAll() }
                window.append(record)
                return
            }
            guard record.seq == expected else {
                throw StorageError("\(path) at offset \(offset): record seq \(record.seq) follows seq \(expected - 1); actions \(expected)…\(record.seq - 1) are missing. Restore the data directory from a backup (hubd --check-data \(directory) shows the details)", isDataProblem: true)
            }
            records.append(record)
            largestOrigin = max(largestOrigin, record.origin)
            expected += 1
        }

        /// Scans one segment.
        ///
        /// - Returns: Where the newest segment is to be cut (what follows was never acknowledged), or `nil`.
        mutating func segment(_ raw: UnsafeRawBufferPointer, path: String, first: UInt64, history: String,
                              isNewest: Bool, nextFirst: UInt64?, directory: String) throws(StorageError) -> Int? {
            legacy = false
            guard raw.count > 0 else { return nil }
            // Format 2 segments start with a header; format 1 segments with a record.
            var offset = 0
            var marked = false
            if raw.count >= 4, raw[0] == JournalFormat.headerMagic[0], raw[1] == JournalFormat.headerMagic[1],
               raw[2] == JournalFormat.headerMagic[2], raw[3] == JournalFormat.headerMagic[3] {
                switch JournalFormat.decode(raw, at: 0) {
                case .success(let (.header(header), next)):
                    guard JSONKey(header.history) == JSONKey(history) else {
                        throw StorageError("\(path) belongs to history \(header.history), this data directory to \(history); it was copied in from another directory. Move it out, or restore the data directory from a backup", isDataProblem: true)
                    }
                    marked = true
                    offset = next
                default:
                    // A header cut short: only possible in a segment nothing was committed to.
                    if isNewest, JournalFormat.completeCommit(in: raw, after: 0) == nil { return 0 }
                    throw StorageError("\(path) is corrupt at offset 0 (an unreadable segment header) and commits follow; restore the data directory from a backup, or inspect it with hubd --check-data \(directory)", isDataProblem: true)
                }
            }
            legacy = !marked
            return marked
                ? try markedSegment(raw, from: offset, path: path, isNewest: isNewest, nextFirst: nextFirst, directory: directory)
                : try legacySegment(raw, path: path, isNewest: isNewest, directory: directory)
        }

        /// A format 2 segment: records count once a complete commit mark covers them.
        private mutating func markedSegment(_ raw: UnsafeRawBufferPointer, from start: Int, path: String, isNewest: Bool,
                                            nextFirst: UInt64?, directory: String) throws(StorageError) -> Int? {
            var offset = start
            var committedEnd = start
            var committedSeq: UInt64?
            var group: [(LogRecord, Int)] = []
            var tail: String?
            while offset < raw.count {
                switch JournalFormat.decode(raw, at: offset) {
                case .success(let (.record(record), next)):
                    group.append((record, offset))
                    offset = next
                case .success(let (.commit(commit), next)):
                    guard JournalFormat.groupIsWhole(commit, markOffset: offset, in: raw), commit.bytes == offset - committedEnd,
                          group.last?.0.seq == commit.seq || (group.isEmpty && commit.bytes == 0) else {
                        // The mark is whole but its group is not: the group never reached the disk whole.
                        tail = "a commit whose records did not reach the disk whole"
                        break
                    }
                    for (record, at) in group { try accept(record, path: path, offset: at, directory: directory) }
                    group.removeAll()
                    committedEnd = next
                    committedSeq = commit.seq
                    offset = next
                    continue
                case .success((.header, _)):
                    tail = "a second segment header"
                case .failure(let failure):
                    tail = failure.description
                }
                if tail != nil { break }
            }
            let uncommitted = raw.count - committedEnd
            guard uncommitted > 0 else { return nil }
            if let tail, JournalFormat.completeCommit(in: raw, after: offset) != nil {
                throw StorageError("\(path) is corrupt at offset \(offset) (\(tail)) and complete commits follow; this is not an unacknowledged tail, so nothing is dropped. Restore the data directory from a backup, or inspect it with hubd --check-data \(directory)", isDataProblem: true)
            }
            if isNewest { return committedEnd }
            // An older segment with an uncommitted tail: a group whose write failed and could not
            // be cut back before the hub stopped. The next segment must go on after its last commit.
            let last = committedSeq ?? (expected - 1)
            guard let nextFirst, nextFirst == last + 1 || nextFirst <= expected else {
                throw StorageError("\(path) has \(uncommitted) uncommitted bytes after offset \(committedEnd), and the next segment does not continue after its last commit (seq \(last)); restore the data directory from a backup (hubd --check-data \(directory) shows the details)", isDataProblem: true)
            }
            warnings.append("\(path): \(uncommitted) bytes after the last complete commit (offset \(committedEnd)) were never acknowledged; ignored")
            return nil
        }

        /// A format 1 segment: every whole record counts; damage is a torn tail only at the
        /// very end of the newest segment.
        private mutating func legacySegment(_ raw: UnsafeRawBufferPointer, path: String, isNewest: Bool,
                                            directory: String) throws(StorageError) -> Int? {
            var offset = 0
            while offset < raw.count {
                switch JournalFormat.decode(raw, at: offset) {
                case .success(let (.record(record), next)):
                    try accept(record, path: path, offset: offset, directory: directory)
                    offset = next
                case .success:
                    throw StorageError("\(path) is corrupt at offset \(offset) (a format 2 item in a format 1 segment); restore the data directory from a backup, or inspect it with hubd --check-data \(directory)", isDataProblem: true)
                case .failure(let failure):
                    if isNewest, JournalFormat.validRecord(in: raw, after: offset) == nil { return offset }
                    throw StorageError("\(path) is corrupt at offset \(offset) (\(failure.description)) and whole records follow; this is not a torn tail, so nothing is dropped. Restore the data directory from a backup, or inspect it with hubd --check-data \(directory)", isDataProblem: true)
                }
            }
            return nil
        }
    }
}
