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

/// The hub: the single order of actions over its log, and the server of replicas. The state it
/// has applied lives in its sequencer (`Applier`); it keeps no store of its own.
///
/// Create it (which binds the socket, so a bad path or a live hub fails right away),
/// then call ``run(stopOn:)`` on a thread of its own; it returns after ``stop()`` or a
/// signal on the given descriptor, having flushed what was queued and removed the socket.
///
///     let hub = try Hub(app: CounterApp(), configuration: .init(socketPath: path))
///     try hub.run()
///
/// All sockets, the store and the sequence counter belong to the one thread inside
/// `run`; other threads may only call ``stop()`` and read the immutable properties.
public final class Hub<App: SyncApp>: Sendable {
    /// The app every replica must run.
    public let app: App
    /// The app's work (decode, apply, snapshot), specialised where the hub was created.
    @usableFromInline let engine: HubEngine
    /// The configuration.
    public let configuration: HubConfiguration
    /// This run's id, 16 hex digits, sent in `welcome` and `status`.
    public let hubID: String

    private let listener: ListeningSocket
    /// The sequencer, built (and the data directory recovered) at init; `run` takes it.
    private let prepared: Locked<Sequencer?>
    /// The id of this hub's sequence of actions (kept in the data directory).
    public let history: String
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private let stopRequested = Atomic<Bool>(false)
    private let running = Atomic<Bool>(false)

    /// Binds the socket.
    ///
    /// - Parameters:
    ///   - app: The app.
    ///   - configuration: Where to listen and the limits.
    /// - Throws: ``HubError`` when the path is too long or unusable, or another hub owns it.
    @inlinable
    public convenience init(app: App, configuration: HubConfiguration) throws(HubError) {
        // Inlinable so the engine's closures are specialised for `App` in the caller's module;
        // from generic code, the engine a module that knows `App` registered (``HubSpecialization``).
        let engine = HubSpecialization.engine(for: app, checkDeterminism: configuration.checkDeterminism)
            ?? HubEngine(app: app, checkDeterminism: configuration.checkDeterminism)
        try self.init(app: app, engine: engine,
                      configuration: configuration)
    }

    /// The versions of the app this hub carries: the configuration's chain when it has `app`'s
    /// version, else `app`'s own.
    static func versions(engine: HubEngine, configuration: HubConfiguration) -> HubVersions {
        let chain = configuration.versions.flatMap { $0.contains(engine.fingerprint) ? $0 : nil } ?? engine.chain
        return HubVersions(chain: chain, primary: engine, checkDeterminism: configuration.checkDeterminism)
    }

    @usableFromInline
    init(app: App, engine: HubEngine, configuration: HubConfiguration) throws(HubError) {
        self.app = app
        self.engine = engine
        self.configuration = configuration
        self.hubID = Digest.hex(UInt64.random(in: 0...UInt64.max))
        // A socket path that names something else is refused before anything is prepared (a
        // data directory, a lock file), so a failed start leaves nothing behind.
        if configuration.listeningDescriptor == nil, let problem = UnixSocket.notASocket(configuration.socketPath) {
            throw HubError(problem)
        }
        // No process-wide SIGPIPE setting: every socket write uses MSG_NOSIGNAL / SO_NOSIGPIPE.
        let ends: (read: Int32, write: Int32)
        do throws(SystemError) {
            ends = try UnixSocket.makePipe()
        } catch {
            throw HubError("cannot create the hub's wake pipe: \(error.message)", errno: error.errno)
        }
        wakeRead = ends.read
        wakeWrite = ends.write
        let sequencer: Sequencer
        do throws(StorageError) {
            sequencer = try Self.makeSequencer(engine: engine, configuration: configuration)
        } catch {
            UnixSocket.close(ends.read)
            UnixSocket.close(ends.write)
            throw HubError(error.message, kind: error.isDataProblem ? .dataUnusable : .failed)
        }
        history = sequencer.history
        if configuration.upgradeAtStart, let problem = Self.upgradeAtStart(sequencer, logger: configuration.logger) {
            sequencer.close()
            UnixSocket.close(ends.read)
            UnixSocket.close(ends.write)
            throw HubError(problem, kind: .failed)
        }
        do throws(SystemError) {
            if let fd = configuration.listeningDescriptor {
                guard let path = Systemd.unixListenerPath(fd) else {
                    throw SystemError("descriptor \(fd), passed by the service manager (LISTEN_FDS), is not a listening Unix stream socket; set ListenStream= to a path in the .socket unit")
                }
                listener = ListeningSocket(adopting: fd, path: path.isEmpty ? configuration.socketPath : path)
            } else {
                listener = try UnixSocket.listen(at: configuration.socketPath, mode: configuration.socketMode,
                                                 group: configuration.socketGroup)
            }
        } catch {
            sequencer.close()
            UnixSocket.close(ends.read)
            UnixSocket.close(ends.write)
            throw HubError(error)
        }
        prepared = Locked(sequencer)
    }

    /// Opens the log (recovering the data directory, if any) and replays it into the applied state.
    private static func makeSequencer(engine: HubEngine, configuration: HubConfiguration) throws(StorageError) -> Sequencer {
        let logger = configuration.logger
        let versions = Self.versions(engine: engine, configuration: configuration)
        let log: any HubLog
        if let shared = configuration.sharedLog {
            log = JetStreamLog(configuration: shared, fingerprint: engine.fingerprint, accepts: versions.fingerprints,
                               dataDirectory: configuration.dataDirectory,
                               stopDescriptor: configuration.stopDescriptor, logger: logger)
        } else if let directory = configuration.dataDirectory {
            log = FileLog(directory: directory, fingerprint: engine.fingerprint, accepts: versions.fingerprints, mode: configuration.fsync,
                          retainedActions: UInt64(max(0, configuration.retainedActions)))
        } else {
            log = MemoryLog()
        }
        let started = ContinuousClock.now
        let sequencer = try Sequencer(engine: engine, versions: versions, log: log, snapshotEvery: configuration.snapshotEvery,
                                      backlogActions: configuration.retainedActions, backlogBytes: configuration.backlogBytes,
                                      checkpointEvery: configuration.checkpointEvery, checkpointInterval: configuration.checkpointInterval,
                                      dedupWindow: configuration.dedupWindow,
                                      logger: logger)
        if let start = sequencer.recoveredFrom, !(log is MemoryLog) {
            let elapsed = ContinuousClock.now - started
            let milliseconds = Int(nanoseconds: elapsed) / 1_000_000
            let files = start.sources.isEmpty ? "a new data directory" : start.sources.joined(separator: ", ")
            let base = start.snapshot.map { "snapshot at seq \($0.seq)" } ?? "no snapshot"
            let mode = configuration.sharedLog == nil ? "fsync \(configuration.fsync.rawValue)" : "log \(log.status.location)"
            logger.notice("recovered seq \(sequencer.appliedSeq) (\(base) + \(start.records.count) journal records) from \(files) in \(milliseconds) ms; history \(start.history), \(mode)")
        }
        sequencer.dropRecovery()
        if JSONKey(sequencer.engine.fingerprint) != JSONKey(versions.newest) {
            logger.notice("the history runs \(sequencer.engine.fingerprint): serving that version, which this hub carries beside \(versions.newest) (status upgradable_to; replica-cli upgrade, or hubd --upgrade, moves it)")
        }
        return sequencer
    }

    /// `hubd --upgrade`: upgrades the history to the newest version once, before serving,
    /// after catching up with the log (on a shared log, what other hubs wrote since it was
    /// opened). A log that is not available yet, or an upgrade record that lost its place to
    /// another hub's record, is waited for and tried again, for up to a minute.
    ///
    /// - Returns: Why it was refused, or `nil`.
    private static func upgradeAtStart(_ sequencer: Sequencer, logger: HubLogger) -> String? {
        let deadline = ContinuousClock.now + .seconds(60)
        var waitingFor = "the log did not take the upgrade record"
        var inFlight: String?
        while ContinuousClock.now < deadline {
            let result = sequencer.pump(now: .now)
            if let broken = result.broken { return "--upgrade: \(broken.message)" }
            if let halted = result.halted { return "--upgrade: \(halted)" }
            if let target = inFlight, !sequencer.isUpgrading {
                // Taken (the sequencer said so in the log), or its place went to another record.
                if JSONKey(sequencer.engine.fingerprint) == JSONKey(target) { return nil }
                inFlight = nil
            }
            if sequencer.isUpgrading || !sequencer.isJudging {
                // Catching up, or the upgrade record in flight.
                sequencer.waitForLog(milliseconds: 20)
                continue
            }
            switch sequencer.upgrade(to: nil, dryRun: false, id: .string("hubd --upgrade"), origin: 0, originName: "", detaches: []) {
            case .refused(let error) where error.code == .unavailable:
                waitingFor = error.message
                sequencer.waitForLog(milliseconds: 200)
            case .refused(let error):
                return "--upgrade refused: \(error.message)"
            case .report(let report, let proposed):
                guard proposed else {
                    logger.notice("--upgrade: the history already runs \(report.to) (seq \(report.seq)); nothing changed")
                    return nil
                }
                // Taken at a later turn, or its place lost to another hub's record: asked again.
                inFlight = report.to
            }
        }
        return "--upgrade: \(waitingFor) (waited 60 s)"
    }

    deinit {
        if !running.load(ordering: .relaxed) {
            // Never served: release the path too (if it is still ours), so no stale socket file is left behind.
            listener.close()
            prepared.withLock { $0?.close() }
        }
        UnixSocket.close(wakeRead)
        UnixSocket.close(wakeWrite)
    }

    /// Asks ``run(stopOn:)`` to finish: stop accepting, flush queued frames, remove the socket.
    ///
    /// Safe from any thread, any number of times.
    public func stop() {
        stopRequested.store(true, ordering: .sequentiallyConsistent)
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    /// Serves clients on the calling thread until ``stop()`` or a byte on `stopFD`.
    ///
    /// - Parameter stopFD: An extra descriptor whose readability means "stop" (hubd
    ///   passes its SIGINT/SIGTERM pipe).
    /// - Throws: ``HubError`` if the event loop itself fails (every connection is then closed
    ///   and the socket removed); client errors never throw.
    public func run(stopOn stopFD: Int32? = nil) throws(HubError) {
        guard !running.exchange(true, ordering: .sequentiallyConsistent) else {
            throw HubError("this hub is already running")
        }
        guard let sequencer = prepared.withLock({ value -> Sequencer? in
            defer { value = nil }
            return value
        }) else {
            throw HubError("this hub has already run")
        }
        let loop = HubLoop(sequencer: sequencer, configuration: configuration, hubID: hubID)
        // The version the history runs (an older one of the chain until it is upgraded).
        let served = sequencer.engine.fingerprint
        let storage: String
        if let shared = configuration.sharedLog {
            storage = "shared log \(shared.redacted)" + (configuration.dataDirectory.map { ", local snapshots in \($0)" } ?? "")
        } else {
            storage = configuration.dataDirectory.map { "data directory \($0), fsync \(configuration.fsync.rawValue)" }
                ?? "in memory: nothing survives this process (use --data-dir to keep the state)"
        }
        let socket = listener.bound ? listener.path : "\(listener.path) (passed by the service manager)"
        configuration.logger.notice("serving app \(served) on \(socket) (hub \(hubID), history \(history), \(storage)); admits \(loop.accessDescription); at most \(loop.clientLimit) clients")
        if configuration.notifySystemd {
            Systemd.notify("READY=1\nSTATUS=serving \(served) at seq \(loop.seq) on \(listener.path)\nMAINPID=\(getpid())")
        }
        do throws(SystemError) {
            try loop.serve(listener: listener, wake: wakeRead, stopFD: stopFD, stopRequested: stopRequested)
        } catch {
            let socket = loop.socketRemoved ? "the socket removed" : "the socket left alone (the path no longer names this hub's socket)"
            throw HubError("the hub's event loop failed: \(error.message); every connection was closed and \(socket)", errno: error.errno)
        }
        if let broken = loop.brokenLog {
            throw HubError("stopped at seq \(loop.seq) to stay consistent with its log: \(broken.message)", kind: .logBroken)
        }
        let where_ = listener.bound ? (loop.socketRemoved ? "socket \(listener.path) removed" : "\(listener.path) now names another file, left in place")
            : "socket \(listener.path) left to the service manager"
        configuration.logger.notice("stopped at seq \(loop.seq); \(where_)")
    }
}
