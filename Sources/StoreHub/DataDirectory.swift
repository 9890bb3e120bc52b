import SyncCore
import SyncPOSIX

/// Offline inspection of a hub's data directory, in the spirit of `redis-check-aof`.
public enum DataDirectory {
    /// What a check found.
    public struct Report: Sendable {
        /// One line per fact or problem, for a person.
        public var lines: [String]
        /// Whether the directory is usable as it is (after a repair, if one was asked for).
        public var healthy: Bool
    }

    /// The app fingerprint recorded in a data directory, if it has one.
    ///
    /// - Parameter directory: The data directory.
    /// - Returns: The fingerprint, e.g. `counter@1`.
    public static func fingerprint(of directory: String) -> String? {
        guard let bytes = try? FileSystem.read(directory + "/" + FileLog.metaName),
              let json = try? JSON(parsing: bytes) else { return nil }
        return json["app"]?.stringValue
    }

    /// Verifies every snapshot and journal record; with `repair`, truncates a torn tail
    /// (saying exactly what it removes). Refuses to repair a directory a running hub holds, or
    /// one a hub would refuse (a symbolic link, another user's, writable by others: see
    /// `FileSystem.checkPrivateDirectory(_:)`); a check without repair reports that as a warning.
    ///
    /// - Parameters:
    ///   - directory: The data directory.
    ///   - app: The app that wrote it, to replay the journal and report the final digest.
    ///   - repair: Truncate a torn tail at the end of the newest segment.
    /// - Returns: The report.
    @inlinable
    public static func check<App: SyncApp>(_ directory: String, app: App, repair: Bool) -> Report {
        check(directory, engine: HubEngine(app: app), repair: repair)
    }

    /// Writes what a data directory holds as NDJSON, oldest first, for other tools: a
    /// `{"type":"history",…}` line, the journal records kept before the newest snapshot, the
    /// snapshot (`{"type":"snapshot","seq":…,"digest":…,"state":…}`), then every record after
    /// it. Each record is `{"type":"action","seq":…,"origin":…,"id":…,"action":…}` with
    /// `"session"`, `"checkpoint"` and its stamp (`"time"` in milliseconds since the Unix
    /// epoch, `"origin_name"`) when it has them; an upgrade record is
    /// `{"type":"upgrade","seq":…,"origin":…,"id":…,"from":…,"to":…,"digest":…}` with its stamp.
    /// The `history` line's `"app"` is the version the history runs now. Read-only: nothing is repaired or
    /// locked (a running hub may be appending meanwhile; the export ends where it read).
    ///
    /// - Parameters:
    ///   - directory: The data directory.
    ///   - write: Called with each line, in order.
    /// - Throws: ``StorageError`` when the directory cannot be read (the message says where).
    public static func export(_ directory: String, write: (JSON) -> Void) throws(StorageError) {
        guard let fingerprint = fingerprint(of: directory) else {
            throw StorageError("\(directory) is not a StoreSync data directory (no readable \(FileLog.metaName))")
        }
        let recovery = try FileLog.recover(directory: directory, fingerprint: fingerprint, accepts: nil, repair: false, create: false)
        let start = recovery.start
        write(["type": "history", "history": .string(start.history), "app": .string(recovery.app)])
        func line(_ record: LogRecord) -> JSON {
            if let upgrade = record.upgrade {
                var members: [JSONKey: JSON] = ["type": "upgrade", "seq": JSON(record.seq), "origin": JSON(record.origin),
                                                "id": record.id.json, "from": .string(upgrade.from), "to": .string(upgrade.to),
                                                "digest": .string(upgrade.digest)]
                record.stamp.write(into: &members)
                return .object(members)
            }
            var members: [JSONKey: JSON] = ["type": "action", "seq": JSON(record.seq), "origin": JSON(record.origin),
                                            "id": record.id.json, "action": record.action]
            if let session = record.session { members["session"] = .string(session) }
            if let checkpoint = record.checkpoint { members["checkpoint"] = .string(checkpoint) }
            record.stamp.write(into: &members)
            return .object(members)
        }
        for record in start.window where record.seq <= (start.snapshot?.seq ?? 0) { write(line(record)) }
        if let snapshot = start.snapshot {
            write(["type": "snapshot", "seq": JSON(snapshot.seq), "digest": .string(snapshot.digest), "state": snapshot.state])
        }
        for record in start.records { write(line(record)) }
        for warning in start.warnings { Console.error("warning: \(warning)") }
    }

    /// The state as it was right after `seq`, rebuilt from what the directory holds: from the
    /// newest snapshot at or before `seq`, or from the initial state when the journal still
    /// starts at seq 1, replaying the records up to `seq` with the app's reducer. Read-only.
    ///
    /// - Parameters:
    ///   - directory: The data directory.
    ///   - app: The app that wrote it.
    ///   - seq: The seq to stop after.
    /// - Returns: The state's JSON.
    /// - Throws: ``StorageError`` saying what can be rebuilt when `seq` cannot.
    public static func state<App: SyncApp>(_ directory: String, app: App, at seq: UInt64) throws(StorageError) -> JSON {
        let engine = HubEngine(app: app)
        let recovery = try FileLog.recover(directory: directory, fingerprint: App.fingerprint,
                                           accepts: engine.chain.fingerprints, repair: false, create: false)
        let start = recovery.start
        let all = start.window.filter { $0.seq <= (start.snapshot?.seq ?? 0) } + start.records
        let newest = start.records.last?.seq ?? start.snapshot?.seq ?? 0
        guard seq <= newest else {
            throw StorageError("\(directory) holds actions up to seq \(newest); seq \(seq) is not there")
        }
        var replay = LogStart(history: start.history)
        if let snapshot = start.snapshot, snapshot.seq <= seq {
            replay.snapshot = snapshot
            replay.fingerprint = start.fingerprint
            replay.records = start.records.filter { $0.seq <= seq }
        } else if all.first?.seq == 1 {
            replay.fingerprint = FileLog.version(at: 0, upgrades: recovery.upgrades,
                                                 genesis: recovery.upgrades.first?.upgrade.from ?? recovery.meta.app)
            replay.records = all.filter { $0.seq <= seq }
        } else {
            let oldest = min(start.snapshot?.seq ?? UInt64.max, all.first.map { $0.seq - 1 } ?? UInt64.max)
            throw StorageError("\(directory) can rebuild states from seq \(oldest == UInt64.max ? newest : oldest) on (its newest snapshot and the journal after it); seq \(seq) is older than what it keeps")
        }
        // The hub's own replay: engines for each version, migrations at upgrade records.
        let sequencer: Sequencer
        do throws(StorageError) {
            sequencer = try Sequencer(engine: engine, log: ReplayLog(replay), snapshotEvery: Int.max, backlogActions: 0,
                                      backlogBytes: 0, checkpointEvery: 0, dedupWindow: 1, logger: .discarding)
        } catch {
            throw StorageError("\(directory) does not replay to seq \(seq): \(error.message)")
        }
        let state = sequencer.appliedState()
        guard let json = try? JSON(parsing: UnsafeRawBufferPointer(rebasing: state.bytes.memory[0..<state.bytes.count])) else {
            throw StorageError("the state at seq \(seq) in \(directory) does not parse back")
        }
        return json
    }

    @usableFromInline
    static func check(_ directory: String, engine: HubEngine, repair: Bool) -> Report {
        var lines: [String] = []
        // A directory the hub would refuse (§5 of docs/OPERATIONS.md): a check only reports
        // it, a repair (which writes there) is refused like the hub.
        do throws(SystemError) {
            try FileSystem.checkPrivateDirectory(directory)
        } catch {
            if repair { return Report(lines: [error.message], healthy: false) }
            lines.append("warning: a hub run by this user would not start here: \(error.message)")
        }
        var lockFD: Int32?
        if repair {
            do throws(SystemError) {
                guard let fd = try FileSystem.lockExclusive(directory + "/lock") else {
                    return Report(lines: ["a hub is running on \(directory) (it holds \(directory)/lock); stop it before --repair"], healthy: false)
                }
                lockFD = fd
            } catch {
                return Report(lines: [error.message], healthy: false)
            }
        }
        defer { if let lockFD { FileSystem.close(lockFD) } }
        do throws(StorageError) {
            let recovery = try FileLog.recover(directory: directory, fingerprint: engine.fingerprint,
                                               accepts: engine.chain.fingerprints, repair: repair, create: false)
            let start = recovery.start
            lines.append("app \(ControlCharacters.escaped(recovery.app)), history \(start.history), format \(recovery.format)")
            for (seq, upgrade) in recovery.upgrades {
                lines.append("upgrade at seq \(seq): \(ControlCharacters.escaped(upgrade.from)) → \(ControlCharacters.escaped(upgrade.to)), digest \(upgrade.digest)")
            }
            for (seq, path) in (try? FileLog.listSnapshots(directory)) ?? [] {
                switch FileLog.readSnapshot(path) {
                case .success(let snapshot):
                    lines.append("snapshot \(path): seq \(seq), \(FileSystem.size(path) ?? 0) bytes, digest \(snapshot.digest), ok")
                case .failure(let error):
                    lines.append("snapshot \(error.message)")
                }
            }
            for (first, name) in recovery.segments {
                let path = directory + "/" + name
                lines.append("segment \(path): first seq \(first), \(FileSystem.size(path) ?? 0) bytes")
            }
            lines.append(contentsOf: start.warnings)
            let sequencer = try Sequencer(engine: engine, log: ReplayLog(start), snapshotEvery: Int.max,
                                          backlogActions: 0, backlogBytes: 0, checkpointEvery: 0, dedupWindow: 1,
                                          logger: .discarding)
            let first = start.records.first?.seq ?? (start.snapshot?.seq ?? 0)
            lines.append("journal: \(start.records.count) records after the snapshot (seq \(first)…\(sequencer.appliedSeq)), contiguous, every checksum ok")
            lines.append("recovered state: seq \(sequencer.appliedSeq), digest \(sequencer.speculativeState().digest)")
            let torn = start.warnings.contains { $0.contains("torn tail") }
            return Report(lines: lines, healthy: !torn || repair)
        } catch {
            lines.append(error.message)
            return Report(lines: lines, healthy: false)
        }
    }
}
