#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import StoreHub
import SyncCore
import SyncPOSIX

/// The whole of `hubd` as a library entry point, for a daemon of your own app:
///
/// ```swift
/// @main struct MyHub {
///     static func main() { HubCommand.main(app: MyApp()) }
/// }
/// ```
///
/// Every `hubd` flag (socket, limits, data directory, fsync, snapshots, resume window,
/// checkpoints, sessions, idle timeout, determinism check, `--check-data`), the same signals,
/// logging and exit statuses (0 after a clean stop, 1 when the hub cannot start, 2 for bad
/// usage). `--help` and messages use the executable's name.
public enum HubCommand {
    /// The executable's name, for usage and messages.
    static var program: String { executableName(CommandLine.arguments.first, otherwise: "hubd") }

    /// Runs a hub for one app, configured by the command line; never returns.
    ///
    /// - Parameter app: The app.
    public static func main<App: SyncApp>(app: App) -> Never {
        main(apps: [app])
    }

    /// Runs a hub for one of several apps (chosen with `--app`, the first by default),
    /// configured by the command line; never returns.
    ///
    /// - Parameters:
    ///   - apps: The apps this executable serves (at least one).
    ///   - commandLine: The arguments, the executable first (default: this process's).
    public static func main(apps: [any SyncApp], commandLine: [String] = CommandLine.arguments) -> Never {
        let program = executableName(commandLine.first, otherwise: Self.program)
        guard let first = apps.first else { hubFail("no app to serve", status: 1) }
        let defaultApp = type(of: first).name
        let names = apps.map { type(of: $0).name }.joined(separator: ", ")
        let appList: String = {
            let all = apps.map { type(of: $0).name }
            if all.count == 1 { return "\(all[0]) (the only one; the flag may be left out)" }
            return "\(all[0]) (default), " + all.dropFirst().dropLast().joined(separator: ", ")
                + (all.count > 2 ? ", " : "") + "or \(all[all.count - 1])"
        }()
        let usage = """
            \(program) — a StoreSync hub: owns the root store and the order of actions, serves replicas.

            USAGE: \(program) [--app NAME] [--socket PATH]
                        [--data-dir DIR [--fsync MODE] [--snapshot-every N] [--dedup-window N]]
                        [--backlog-bytes N] [--checkpoint-every N] [--idle-timeout SECONDS]
                        [--check-determinism]
                        [--max-frame-bytes N] [--max-queue-bytes N]
                   \(program) --check-data DIR [--repair]
                   \(program) --list-apps | --help

            OPTIONS:
              --app NAME             The app (reducer) to run: \(appList).
                                     Every replica must run the same app; see --list-apps.
              --socket PATH          The Unix socket to listen on. Default: $STORESYNC_SOCKET, else
                                     $XDG_RUNTIME_DIR/storesync/hub.sock, else
                                     ${TMPDIR:-/tmp}/storesync-UID/hub.sock. The directory is created
                                     with mode 0700, the socket gets mode 0600. A live hub on the path
                                     is never displaced; a stale socket file is replaced.
              --data-dir DIR         Keep the state in DIR (created 0700): a journal of every sequenced
                                     action and periodic snapshots, so a restarted hub (even after
                                     kill -9) recovers every acknowledged action and keeps its history
                                     id. One hub per directory. Without it the hub is in memory and
                                     nothing survives the process.
              --fsync MODE           When journal records reach the disk (needs --data-dir):
                                     always  each action is fsynced on its own before it is broadcast
                                             or acknowledged: nothing acknowledged is ever lost, even
                                             on power loss; slowest.
                                     batch   (default) group commit: the actions of one event-loop pass
                                             share one fsync before any is broadcast or acknowledged:
                                             the same promise as always, far fewer fsyncs.
                                     never   written to the OS before broadcast, fsynced only when a
                                             64 MiB segment fills: a hub crash loses nothing, a power
                                             loss or kernel crash can lose the last seconds; recovery
                                             yields a consistent prefix.
              --snapshot-every N     Write a snapshot every N actions (default 100000; also at a clean
                                     shutdown); older journal segments are then deleted, keeping at
                                     least the last 10000 actions. Needs --data-dir.
              --dedup-window N       Per client session (hello "session"), remember at least the last
                                     N sequenced dispatch ids (default 1000), in memory, in snapshots
                                     and through the journal: a dispatch re-sent after a reconnect or
                                     a hub restart is answered duplicate with its original seq, never
                                     applied twice. Sessions idle for 24 hours are forgotten; at most
                                     10000 sessions are kept (least recently used first out). Needs
                                     --data-dir (an in-memory hub uses the default).
              --backlog-bytes N      The resume window in memory (default 67108864): it holds at least
                                     the last 10000 actions, and more while they fit in N bytes. A
                                     replica that comes back with hello "resume" inside it is sent
                                     only what it missed; further behind, a full welcome.
              --checkpoint-every N   After every action whose seq is a multiple of N (default 10000),
                                     send every replica a checkpoint with the state's digest; a
                                     replica that differs re-hydrates by itself. Costs one digest of
                                     the whole state per N actions. 0 sends none.
              --idle-timeout SECONDS A connection that has not attached and sends no complete frame
                                     (hello, status, sync) for this long, or that holds half a frame
                                     this long, gets error timeout and is closed (default 10).
                                     Attached replicas that only listen are never timed out.
              --check-determinism    Apply every action to two copies of the state (one decoded again
                                     from the wire) and refuse, with reject rejected, one whose results
                                     differ: catches a reducer that reads a clock, a random source or a
                                     global before it diverges replicas. Costs two more reducer runs
                                     and two digests of the whole state per action (not during
                                     recovery): for staging and tests.
              --check-data DIR       Verify every snapshot and journal record in DIR offline, replay it,
                                     print a summary (seqs, sizes, digest) and exit (0: usable, 1: not).
              --repair               With --check-data: truncate a torn tail (an incomplete or damaged
                                     last record), saying exactly what is removed.
              --max-frame-bytes N    The largest frame payload a client may send (default 1048576,
                                     at most 1073741824). Replicas learn it from the welcome and refuse
                                     a larger dispatch themselves; a client that sends a longer frame
                                     gets error frame-too-large and is closed. An action whose
                                     canonical form no longer fits one frame is rejected on its own.
              --max-queue-bytes N    How far one replica may fall behind, in bytes owed to it
                                     (default 67108864); past it that replica is dropped so it never
                                     holds back the others. Sequenced frames are held once, in a
                                     backlog all replicas share, so memory does not grow with the
                                     number of replicas.
              --list-apps            Print the apps with their fingerprints and exit.
              -h, --help             Print this help and exit.

            Logs go to stderr; the first line says where the state lives (data directory or memory).
            SIGINT or SIGTERM: stop accepting, remove the socket, flush queued frames followed by a
            shutting-down error to every client, write a snapshot, exit 0. If the journal cannot be
            written (a full disk), dispatches are refused with reject unavailable, nothing is lost, and
            the hub resumes by itself when writing works again. Exit status 1: the hub could not start
            (message on stderr: a corrupt data directory names the file and offset); 2: bad usage.
            """

        var appName = defaultApp
        var socketFlag: String?
        var maxFrameBytes = 1 << 20
        var maxQueueBytes = 64 << 20
        var dataDirectory: String?
        var fsyncMode: FsyncMode?
        var snapshotEvery: Int?
        var dedupWindow: Int?
        var checkDeterminism = false
        var backlogBytes: Int?
        var checkpointEvery: Int?
        var idleTimeout: Duration?
        var checkData: String?
        var repair = false
        var arguments = ArgumentCursor(commandLine)

        func value(for flag: String, _ arguments: inout ArgumentCursor) -> String {
            guard let next = arguments.next() else { hubFail("\(flag) needs a value; see \(program) --help", status: 2) }
            return next
        }

        func positiveInt(for flag: String, _ arguments: inout ArgumentCursor) -> Int {
            let text = value(for: flag, &arguments)
            guard let number = Int(text), number > 0 else { hubFail("\(flag) needs a positive integer, got \"\(text)\"", status: 2) }
            return number
        }

        while let argument = arguments.next() {
            switch argument {
            case "-h", "--help":
                print(usage)
                exit(0)
            case "--list-apps":
                for app in apps {
                    let kind = type(of: app)
                    print("\(hubPad(kind.name, 9)) \(hubPad(kind.fingerprint, 11)) \(kind.summary)")
                }
                exit(0)
            case "--app": appName = value(for: argument, &arguments)
            case "--socket": socketFlag = value(for: argument, &arguments)
            case "--max-frame-bytes":
                maxFrameBytes = positiveInt(for: argument, &arguments)
                guard maxFrameBytes <= HubConfiguration.maxFrameBytesCeiling else {
                    hubFail("--max-frame-bytes is at most \(HubConfiguration.maxFrameBytesCeiling) (1 GiB), got \(maxFrameBytes)", status: 2)
                }
            case "--max-queue-bytes": maxQueueBytes = positiveInt(for: argument, &arguments)
            case "--data-dir": dataDirectory = value(for: argument, &arguments)
            case "--fsync":
                let text = value(for: argument, &arguments)
                guard let mode = FsyncMode(rawValue: text) else {
                    hubFail("--fsync is always, batch or never, got \"\(text)\"", status: 2)
                }
                fsyncMode = mode
            case "--snapshot-every": snapshotEvery = positiveInt(for: argument, &arguments)
            case "--dedup-window": dedupWindow = positiveInt(for: argument, &arguments)
            case "--check-determinism": checkDeterminism = true
            case "--backlog-bytes": backlogBytes = positiveInt(for: argument, &arguments)
            case "--checkpoint-every":
                let text = value(for: argument, &arguments)
                guard let number = Int(text), number >= 0 else { hubFail("--checkpoint-every needs a whole number (0: no checkpoints), got \"\(text)\"", status: 2) }
                checkpointEvery = number
            case "--idle-timeout":
                let text = value(for: argument, &arguments)
                guard let seconds = Double(text), seconds > 0, seconds <= 86_400 else {
                    hubFail("--idle-timeout needs a number of seconds above 0 and at most 86400, got \"\(text)\"", status: 2)
                }
                idleTimeout = .milliseconds(max(1, Int(seconds * 1000)))
            case "--check-data": checkData = value(for: argument, &arguments)
            case "--repair": repair = true
            default:
                hubFail("unknown argument \"\(argument)\"; see \(program) --help", status: 2)
            }
        }

        if dataDirectory == nil {
            if fsyncMode != nil { hubFail("--fsync needs --data-dir (an in-memory hub has no journal)", status: 2) }
            if snapshotEvery != nil { hubFail("--snapshot-every needs --data-dir (an in-memory hub has no snapshots)", status: 2) }
            if dedupWindow != nil { hubFail("--dedup-window needs --data-dir (an in-memory hub keeps the default window for its run)", status: 2) }
        }
        if repair && checkData == nil { hubFail("--repair needs --check-data DIR", status: 2) }

        func check<App: SyncApp>(_ app: App, _ directory: String, repair: Bool) -> Never {
            let report = DataDirectory.check(directory, app: app, repair: repair)
            for line in report.lines { print(line) }
            exit(report.healthy ? 0 : 1)
        }

        if let checkData {
            guard let fingerprint = DataDirectory.fingerprint(of: checkData) else {
                hubFail("\(checkData) is not a StoreSync data directory (no readable storesync.json)", status: 1)
            }
            guard let app = apps.first(where: { JSONKey(type(of: $0).fingerprint) == JSONKey(fingerprint) }) else {
                hubFail("\(checkData) was written by app \(fingerprint), which this \(program) does not have", status: 1)
            }
            check(app, checkData, repair: repair)
        }

        guard let app = apps.first(where: { JSONKey(type(of: $0).name) == JSONKey(appName) }) else {
            hubFail("unknown app \"\(appName)\"; the apps are \(names) (\(program) --list-apps)", status: 2)
        }

        var configuration = HubConfiguration(
            socketPath: SocketPath.resolve(explicit: socketFlag),
            maxFrameBytes: maxFrameBytes,
            maxQueuedBytesPerReplica: maxQueueBytes,
            log: { line in Console.error(line) }
        )
        configuration.dataDirectory = dataDirectory
        if let fsyncMode { configuration.fsync = fsyncMode }
        if let snapshotEvery { configuration.snapshotEvery = snapshotEvery }
        if let dedupWindow { configuration.dedupWindow = dedupWindow }
        if let backlogBytes { configuration.backlogBytes = backlogBytes }
        if let checkpointEvery { configuration.checkpointEvery = checkpointEvery }
        if let idleTimeout { configuration.idleTimeout = idleTimeout }
        configuration.checkDeterminism = checkDeterminism
        serve(app, configuration: configuration)
    }
}

fileprivate func hubPad(_ text: String, _ width: Int) -> String {
    text + String(repeating: " ", count: max(0, width - text.count))
}

fileprivate func hubFail(_ message: String, status: Int32) -> Never {
    Console.error("\(HubCommand.program): \(message)")
    exit(status)
}

fileprivate func serve<App: SyncApp>(_ app: App, configuration: HubConfiguration) -> Never {
    // The library never changes SIGPIPE (its socket writes use MSG_NOSIGNAL / SO_NOSIGPIPE);
    // The hub, a daemon, ignores it so that a closed stderr pipe (its log) cannot kill it
    // before it has flushed its replicas and removed its socket.
    UnixSocket.ignoreBrokenPipes()
    // Signals first: a SIGTERM that arrives as soon as the socket exists must still mean
    // "flush, remove the socket, exit 0".
    let signals: Int32
    do throws(SystemError) {
        signals = try SignalPipe.install()
    } catch {
        hubFail(error.message, status: 1)
    }
    let hub: Hub<App>
    do throws(HubError) {
        hub = try Hub(app: app, configuration: configuration)
    } catch {
        hubFail(error.message, status: 1)
    }
    do throws(HubError) {
        try hub.run(stopOn: signals)
    } catch {
        hubFail(error.message, status: 1)
    }
    exit(0)
}


/// The last path component of an executable's path (`/usr/local/bin/hubd` → `hubd`), for
/// usage and messages.
///
/// - Parameters:
///   - path: `argv[0]`, if any.
///   - fallback: The name when there is none.
/// - Returns: The name.
func executableName(_ path: String?, otherwise fallback: String) -> String {
    guard let path, let last = path.split(separator: "/").last else { return fallback }
    return String(last)
}
