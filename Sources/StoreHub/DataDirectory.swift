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
    /// (saying exactly what it removes). Refuses to repair a directory a running hub holds.
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

    @usableFromInline
    static func check(_ directory: String, engine: HubEngine, repair: Bool) -> Report {
        var lines: [String] = []
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
            let recovery = try FileLog.recover(directory: directory, fingerprint: engine.fingerprint, repair: repair,
                                               create: false)
            let start = recovery.start
            lines.append("app \(engine.fingerprint), history \(start.history), format \(recovery.format)")
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
                                          note: { _ in })
            let first = start.records.first?.seq ?? (start.snapshot?.seq ?? 0)
            lines.append("journal: \(start.records.count) records after the snapshot (seq \(first)…\(sequencer.appliedSeq)), contiguous, every checksum ok")
            lines.append("recovered state: seq \(sequencer.appliedSeq), digest \(sequencer.speculativeSnapshot().digest)")
            let torn = start.warnings.contains { $0.contains("torn tail") }
            return Report(lines: lines, healthy: !torn || repair)
        } catch {
            lines.append(error.message)
            return Report(lines: lines, healthy: false)
        }
    }
}
