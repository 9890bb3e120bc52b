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
        typealias D = HubConfiguration.Defaults
        let usage = """
            \(program) — a StoreSync hub: owns the root store and the order of actions, serves replicas.

            USAGE: \(program) [--app NAME] [--socket PATH] [--socket-mode MODE] [--socket-group GROUP]
                        [--allow-uid UID[,UID…]] [--max-clients N]
                        [--data-dir DIR [--fsync MODE] [--snapshot-every N] [--dedup-window N]]
                        [--log file:DIR | --log nats://[USER:PASS@]HOST:PORT[,HOST:PORT…]/STREAM
                         [--log-key-file FILE | --log-unauthenticated] [--nats-credentials FILE]
                         [--nats-replicas N] [--retain-actions N]]
                        [--backlog-bytes N] [--checkpoint-every N] [--checkpoint-interval SECONDS]
                        [--idle-timeout SECONDS]
                        [--welcome-timeout SECONDS] [--check-determinism] [--log-timestamps on|off]
                        [--log-level LEVEL] [--max-frame-bytes N] [--max-queue-bytes N]
                   \(program) --check-data DIR [--repair]
                   \(program) --export DIR [--at SEQ]
                   \(program) --list-apps | --version | --help

            OPTIONS:
              --app NAME             The app (reducer) to run: \(appList).
                                     Every replica must run the same app; see --list-apps.
              --socket PATH          The Unix socket to listen on. Default: $STORESYNC_SOCKET, else
                                     $XDG_RUNTIME_DIR/storesync/APP.sock, else
                                     ${TMPDIR:-/tmp}/storesync-UID/APP.sock (APP: the app's name,
                                     e.g. counter.sock, so hubs of two apps never share a default
                                     socket). A missing directory is
                                     created 0700 (0750 with --socket-group). The directory must be a
                                     real directory (not a symbolic link) owned by this user or root
                                     and writable by no one else (a sticky root-owned one such as /tmp
                                     is allowed); otherwise the hub refuses to start and says why. A
                                     live hub on the path is never displaced; a stale socket file is
                                     replaced.
              --socket-mode MODE     The socket file's mode, octal (default \(String(D.socketMode, radix: 8))): only this user may
                                     connect. 0660 with --socket-group lets the group connect.
              --socket-group GROUP   Share the socket with a group (name or number): the socket and a
                                     directory the hub creates belong to it, and its members pass the
                                     peer check below.
              --allow-uid UID[,UID…] Users (names or numbers) who may attach besides this user and
                                     root. Every connection's peer credentials are checked
                                     (SO_PEERCRED): anyone else gets error forbidden and is closed,
                                     whatever the socket's mode.
              --max-clients N        The most connections served at once (default: the open-files
                                     limit minus \(D.reservedDescriptors) kept for the hub's own files, at most
                                     \(D.maxClientsCeiling)). One more gets error too-many-clients and is closed. At
                                     start the hub raises its soft open-files limit to the hard limit.
              --data-dir DIR         Keep the state in DIR (created 0700): a journal of every sequenced
                                     action and periodic snapshots, so a restarted hub (even after
                                     kill -9) recovers every acknowledged action and keeps its history
                                     id. One hub per directory. Without it (and without --log nats://)
                                     the hub is in memory and nothing survives the process.
              --log file:DIR         The same as --data-dir DIR.
              --log nats://…/STREAM  Keep the order in a NATS JetStream stream shared with hubs on other
                                     hosts (see docs/OPERATIONS.md, "Across hosts"). With --data-dir
                                     the hub also keeps local snapshots there for a fast restart.
              --log-key-file FILE    With --log nats://: the key that authenticates the stream's records
                                     (HMAC-SHA-256), shared by every hub of the stream: one key per
                                     line, at least 32 bytes (head -c 32 /dev/urandom | base64), the
                                     first signs, all verify. Without it:
                                     $CREDENTIALS_DIRECTORY/storesync-log-key (systemd LoadCredential=).
                                     A hub on a stream without a key refuses to start.
              --log-unauthenticated  With --log nats://: run without a key, on a network where every
                                     NATS user is trusted: anyone who can publish to the stream can
                                     then forge actions (said at every start).
              --nats-credentials FILE
                                     With --log nats://: the NATS user and password (lines user=… and
                                     password=…) or token (token=…), from a file only its owner can
                                     read. Without it: $CREDENTIALS_DIRECTORY/nats-credentials
                                     (systemd LoadCredential=), then STORESYNC_NATS_USER and
                                     STORESYNC_NATS_PASSWORD, or STORESYNC_NATS_TOKEN. Credentials in
                                     the URL work too, but every local user sees them (ps).
              --nats-replicas N      With --log nats://: the stream's replicas when this hub creates it
                                     (default 1; 3 across hosts).
              --retain-actions N     With --log nats://: keep at least N actions (at least \(D.retainedActions))
                                     behind the newest shared snapshot, and let the stream be trimmed
                                     before them (default: keep every action).
              --fsync MODE           When journal records reach the disk (needs --data-dir):
                                     always  each action is fsynced on its own before it is broadcast
                                             or acknowledged: nothing acknowledged is ever lost, even
                                             on power loss; slowest.
                                     batch   (default) group commit: the actions of one event-loop pass
                                             share one fsync before any is broadcast or acknowledged:
                                             the same promise as always, far fewer fsyncs.
                                     never   written to the OS before broadcast, fsynced only when a
                                             segment is closed (full at 64 MiB, at a snapshot, at a stop):
                                             a hub crash loses nothing, a power loss or kernel crash can
                                             lose the last seconds; recovery yields a consistent prefix.
              --snapshot-every N     Write a snapshot every N actions (default \(D.snapshotEvery); also at a clean
                                     shutdown); older journal segments are then deleted, keeping at
                                     least the last \(D.retainedActions) actions. Needs --data-dir or
                                     --log nats:// (whose snapshots are also shared with every hub).
              --dedup-window N       Per client session (hello "session"), remember at least the last
                                     N sequenced dispatch ids (default \(D.dedupWindow)), in memory, in snapshots
                                     and through the journal: a dispatch re-sent after a reconnect or
                                     a hub restart is answered duplicate with its original seq, never
                                     applied twice. Sessions idle for 24 hours are forgotten; at most
                                     10000 sessions are kept (the one whose last dispatch is oldest
                                     goes first, logged). Needs --data-dir (an in-memory hub uses the
                                     default).
              --backlog-bytes N      The resume window in memory (default \(D.backlogBytes)): it holds at least
                                     the last \(D.retainedActions) actions, and more while they fit in N bytes. A
                                     replica that comes back with hello "resume" inside it is sent
                                     only what it missed; further behind, a full welcome.
              --checkpoint-every N   After every action whose seq is a multiple of N (default \(D.checkpointEvery)),
                                     send every replica a checkpoint with the state's digest; a
                                     replica that differs re-hydrates by itself. Costs one digest of
                                     the whole state per N actions. 0 sends none.
              --checkpoint-interval SECONDS
                                     While actions flow, also send a checkpoint after the first
                                     action once this long has passed since the last one
                                     (decimals allowed; default 1; 0: by seq only). A flow starts
                                     with an action after a quiet spell of two intervals, and its
                                     first interval carries none: a replica that differs learns it
                                     within about two intervals of steady traffic.
              --idle-timeout SECONDS A connection that has not attached and sends no complete frame
                                     (hello, status, sync) for this long, or that holds half a frame
                                     this long, gets error timeout and is closed (default \(D.idleTimeoutSeconds)).
                                     Attached replicas that only listen are never timed out.
              --welcome-timeout SECONDS
                                     A client that has not read its whole welcome this long after the
                                     hub queued it gets error slow-consumer and is closed (default \(D.welcomeTimeoutSeconds)); so is
                                     a replica dropped as a slow consumer that has not read the rest of
                                     its frame and that error by then. The state in a welcome is one
                                     copy shared by every joining client and does not count against
                                     --max-queue-bytes.
              --check-determinism    Apply every action to two copies of the state (one decoded again
                                     from the wire) and refuse, with reject rejected, one whose results
                                     differ: catches a reducer that reads a clock, a random source or a
                                     global before it diverges replicas. Costs two more reducer runs
                                     and two digests of the whole state per action (not during
                                     recovery): for staging and tests.
              --log-timestamps on|off
                                     Start every log line with the time, RFC 3339 in UTC with
                                     milliseconds (2026-11-28T12:45:01.123Z). Default: on when stderr
                                     is a terminal, off otherwise (journald adds its own).
              --log-level LEVEL      The least level of the lines logged: trace, debug, info,
                                     notice, warning, error or critical. Default: info (every line
                                     there is); notice keeps what an operator acts on (serving,
                                     outages, refusals, the log back), warning only warnings and
                                     errors.
              --check-data DIR       Verify every snapshot and journal record in DIR offline, replay it,
                                     print a summary (format, seqs, sizes, digest) and exit (0: usable,
                                     1: not).
              --repair               With --check-data: truncate a torn tail (what follows the last
                                     complete commit), saying exactly what is removed.
              --export DIR           Print what DIR holds as NDJSON on stdout and exit (read-only):
                                     {"type":"history",…}, the records kept before the newest
                                     snapshot, {"type":"snapshot","seq":…,"digest":…,"state":…}, then
                                     every record after it as {"type":"action","seq":…,"origin":…,
                                     "id":…,"action":…} (with "session" and "checkpoint" when set).
              --at SEQ               With --export: print instead the state as it was right after SEQ,
                                     rebuilt with the app's reducer from the newest snapshot at or
                                     before SEQ (or from the start, while the journal holds seq 1);
                                     exit 1 saying what can be rebuilt when SEQ is older.
              --max-frame-bytes N    The largest frame payload a client may send (default \(D.maxFrameBytes),
                                     at most \(HubConfiguration.maxFrameBytesCeiling)). Replicas learn it from the welcome and refuse
                                     a larger dispatch themselves; a client that sends a longer frame
                                     gets error frame-too-large and is closed. An action whose
                                     canonical form no longer fits one frame is rejected on its own.
                                     The hub reads at most N + \(D.inputSlackBytes) unhandled bytes from one
                                     connection before it waits for them to be handled.
              --max-queue-bytes N    How far one replica may fall behind, in bytes owed to it
                                     (default \(D.maxQueuedBytesPerReplica)); past it that replica is dropped so it never
                                     holds back the others. Sequenced frames are held once, in a
                                     backlog all replicas share, so memory does not grow with the
                                     number of replicas.
              --list-apps            Print the apps with their fingerprints and exit.
              --version              Print the StoreSync version and exit.
              -h, --help             Print this help and exit.

            Logs go to stderr (never blocking the hub: if stderr is not read, lines are dropped and
            counted); the first lines say the open-files limit and where the state lives. Under
            systemd (NOTIFY_SOCKET) the hub sends READY=1 once it serves, STOPPING=1 when it stops,
            and WATCHDOG=1 when WatchdogSec= is set; with socket activation (LISTEN_FDS) it serves
            the socket it is given instead of binding one.
            SIGINT, SIGTERM or SIGHUP: stop accepting, remove the socket, flush queued frames followed
            by a shutting-down error to every client, write a snapshot, exit 0. If the journal cannot
            be written (a full disk), dispatches are refused with reject unavailable, nothing is lost,
            and the hub resumes by itself when writing works again.
            Exit status: 0 after a clean stop; 1 the hub could not start (message on stderr) or its
            event loop failed; 2 bad usage; 3 the hub stopped because a failed journal write could
            not be undone (restart it: recovery keeps what is durable); 4 the data directory or log
            cannot be used as it is (corrupt, a gap, another app): restore it or fix the setup.
            """

        var appName = defaultApp
        var socketFlag: String?
        var maxFrameBytes = D.maxFrameBytes
        var maxQueueBytes = D.maxQueuedBytesPerReplica
        var dataDirectory: String?
        var logURL: String?
        var natsCredentials: String?
        var logKeyFile: String?
        var logUnauthenticated = false
        var logTimestamps: Bool?
        var logLevel = HubLogger.Level.info
        var natsReplicas: Int?
        var retainActions: Int?
        var fsyncMode: FsyncMode?
        var snapshotEvery: Int?
        var dedupWindow: Int?
        var checkDeterminism = false
        var backlogBytes: Int?
        var checkpointEvery: Int?
        var checkpointInterval: Duration?
        var idleTimeout: Duration?
        var welcomeTimeout: Duration?
        var maxClients: Int?
        var socketMode: mode_t?
        var socketGroup: UInt32?
        var allowedUIDs: Set<UInt32> = []
        var checkData: String?
        var export: String?
        var exportAt: UInt64?
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

        func seconds(for flag: String, _ arguments: inout ArgumentCursor) -> Duration {
            let text = value(for: flag, &arguments)
            guard let seconds = Double(text), seconds > 0, seconds <= 86_400 else {
                hubFail("\(flag) needs a number of seconds above 0 and at most 86400, got \"\(text)\"", status: 2)
            }
            return .milliseconds(max(1, Int(seconds * 1000)))
        }

        let flags = ["--app", "--socket", "--socket-mode", "--socket-group", "--allow-uid", "--max-clients", "--data-dir",
                     "--log", "--log-key-file", "--log-unauthenticated", "--nats-credentials", "--nats-replicas", "--retain-actions", "--fsync", "--snapshot-every", "--dedup-window",
                     "--backlog-bytes", "--checkpoint-every", "--checkpoint-interval", "--idle-timeout", "--welcome-timeout", "--check-determinism", "--log-timestamps", "--log-level",
                     "--max-frame-bytes", "--max-queue-bytes", "--check-data", "--repair", "--export", "--at", "--list-apps", "--version", "--help"]
        while let argument = arguments.next() {
            switch argument {
            case "-h", "--help":
                print(usage)
                exit(0)
            case "--version":
                print("\(program) (StoreSync \(StoreSyncVersion.current))")
                exit(0)
            case "--list-apps":
                for app in apps {
                    let kind = type(of: app)
                    print("\(hubPad(kind.name, 9)) \(hubPad(kind.fingerprint, 11)) \(kind.summary)")
                }
                exit(0)
            case "--app": appName = value(for: argument, &arguments)
            case "--socket": socketFlag = value(for: argument, &arguments)
            case "--socket-mode":
                let text = value(for: argument, &arguments)
                guard let mode = mode_t(text, radix: 8), mode <= 0o777, mode & 0o600 == 0o600 else {
                    hubFail("--socket-mode needs an octal mode from 600 to 777 that lets the hub's user read and write, e.g. 0660, got \"\(text)\"", status: 2)
                }
                socketMode = mode
            case "--socket-group":
                let text = value(for: argument, &arguments)
                guard let gid = Accounts.gid(text) else { hubFail("--socket-group: no group \"\(text)\" on this system", status: 2) }
                socketGroup = gid
            case "--allow-uid":
                for part in value(for: argument, &arguments).split(separator: ",") {
                    guard let uid = Accounts.uid(String(part)) else { hubFail("--allow-uid: no user \"\(part)\" on this system", status: 2) }
                    allowedUIDs.insert(uid)
                }
            case "--max-clients": maxClients = positiveInt(for: argument, &arguments)
            case "--max-frame-bytes":
                maxFrameBytes = positiveInt(for: argument, &arguments)
                guard maxFrameBytes <= HubConfiguration.maxFrameBytesCeiling else {
                    hubFail("--max-frame-bytes is at most \(HubConfiguration.maxFrameBytesCeiling) (1 GiB), got \(maxFrameBytes)", status: 2)
                }
            case "--max-queue-bytes": maxQueueBytes = positiveInt(for: argument, &arguments)
            case "--data-dir": dataDirectory = value(for: argument, &arguments)
            case "--log":
                let text = value(for: argument, &arguments)
                if text.hasPrefix("file:") {
                    let directory = String(text.dropFirst("file:".count))
                    guard !directory.isEmpty else { hubFail("--log file: needs a directory, e.g. --log file:/var/lib/storesync", status: 2) }
                    if let dataDirectory, dataDirectory != directory {
                        hubFail("--log \(text) and --data-dir \(dataDirectory) name two directories; give one", status: 2)
                    }
                    dataDirectory = directory
                } else if text.hasPrefix("nats://") {
                    logURL = text
                } else {
                    hubFail("--log is file:DIR or nats://[USER:PASS@]HOST:PORT[,HOST:PORT…]/STREAM, got \"\(SharedLogConfiguration.redact(text))\"", status: 2)
                }
            case "--nats-credentials": natsCredentials = value(for: argument, &arguments)
            case "--log-key-file": logKeyFile = value(for: argument, &arguments)
            case "--log-unauthenticated": logUnauthenticated = true
            case "--nats-replicas": natsReplicas = positiveInt(for: argument, &arguments)
            case "--retain-actions": retainActions = positiveInt(for: argument, &arguments)
            case "--fsync":
                let text = value(for: argument, &arguments)
                guard let mode = FsyncMode(rawValue: text) else {
                    hubFail("--fsync is always, batch or never, got \"\(text)\"", status: 2)
                }
                fsyncMode = mode
            case "--snapshot-every": snapshotEvery = positiveInt(for: argument, &arguments)
            case "--dedup-window": dedupWindow = positiveInt(for: argument, &arguments)
            case "--check-determinism": checkDeterminism = true
            case "--log-timestamps":
                let text = value(for: argument, &arguments)
                switch text {
                case "on": logTimestamps = true
                case "off": logTimestamps = false
                default: hubFail("--log-timestamps is on or off, got \"\(ControlCharacters.escaped(text))\"", status: 2)
                }
            case "--log-level":
                let text = value(for: argument, &arguments)
                guard let level = HubLogger.Level(name: text) else {
                    hubFail("--log-level is one of \(HubLogger.Level.allCases.map(\.description).joined(separator: ", ")), got \"\(ControlCharacters.escaped(text))\"", status: 2)
                }
                logLevel = level
            case "--backlog-bytes": backlogBytes = positiveInt(for: argument, &arguments)
            case "--checkpoint-every":
                let text = value(for: argument, &arguments)
                guard let number = Int(text), number >= 0 else { hubFail("--checkpoint-every needs a whole number (0: no checkpoints), got \"\(text)\"", status: 2) }
                checkpointEvery = number
            case "--checkpoint-interval":
                let text = value(for: argument, &arguments)
                guard let number = Double(text), number >= 0, number <= 86_400 else {
                    hubFail("--checkpoint-interval needs a number of seconds from 0 to 86400 (0: by seq only), got \"\(text)\"", status: 2)
                }
                checkpointInterval = .milliseconds(Int(number * 1000))
            case "--idle-timeout": idleTimeout = seconds(for: argument, &arguments)
            case "--welcome-timeout": welcomeTimeout = seconds(for: argument, &arguments)
            case "--check-data": checkData = value(for: argument, &arguments)
            case "--export": export = value(for: argument, &arguments)
            case "--at":
                let text = value(for: argument, &arguments)
                guard let seq = UInt64(text) else { hubFail("--at needs a seq (a whole number), got \"\(text)\"", status: 2) }
                exportAt = seq
            case "--repair": repair = true
            default:
                let hint = closestFlag(argument, among: flags).map { " (did you mean \($0)?)" } ?? ""
                hubFail("unknown argument \"\(argument)\"\(hint); see \(program) --help", status: 2)
            }
        }

        if dataDirectory == nil && logURL == nil {
            if fsyncMode != nil { hubFail("--fsync needs --data-dir (an in-memory hub has no journal)", status: 2) }
            if snapshotEvery != nil { hubFail("--snapshot-every needs --data-dir (an in-memory hub has no snapshots)", status: 2) }
            if dedupWindow != nil { hubFail("--dedup-window needs --data-dir (an in-memory hub keeps the default window for its run)", status: 2) }
        }
        if logURL == nil {
            if natsReplicas != nil { hubFail("--nats-replicas needs --log nats://…", status: 2) }
            if natsCredentials != nil { hubFail("--nats-credentials needs --log nats://…", status: 2) }
            if logKeyFile != nil { hubFail("--log-key-file needs --log nats://…", status: 2) }
            if logUnauthenticated { hubFail("--log-unauthenticated needs --log nats://…", status: 2) }
            if retainActions != nil { hubFail("--retain-actions needs --log nats://…", status: 2) }
        } else if logURL?.hasPrefix("nats://") == true {
            if fsyncMode != nil, dataDirectory == nil {
                hubFail("--fsync is for a file journal; with --log nats:// the stream's durability is NATS's (use --nats-replicas 3; see docs/OPERATIONS.md, \"Across hosts\")", status: 2)
            }
            if let retainActions, retainActions < HubConfiguration.Defaults.retainedActions {
                hubFail("--retain-actions must be at least \(HubConfiguration.Defaults.retainedActions) (the actions every hub's resume window holds), got \(retainActions)", status: 2)
            }
        }
        if repair && checkData == nil { hubFail("--repair needs --check-data DIR", status: 2) }
        if exportAt != nil && export == nil { hubFail("--at needs --export DIR", status: 2) }
        if let export, let exportAt {
            guard let fingerprint = DataDirectory.fingerprint(of: export) else {
                hubFail("\(export) is not a StoreSync data directory (no readable storesync.json)", status: 1)
            }
            guard let app = apps.first(where: { JSONKey(type(of: $0).fingerprint) == JSONKey(fingerprint) }) else {
                hubFail("\(export) was written by app \(fingerprint), which this \(program) does not have", status: 1)
            }
            func printState<App: SyncApp>(_ app: App) -> Never {
                do throws(StorageError) {
                    Console.out(try DataDirectory.state(export, app: app, at: exportAt).canonicalString)
                    exit(0)
                } catch {
                    hubFail(error.message, status: 1)
                }
            }
            printState(app)
        }
        if let export {
            do throws(StorageError) {
                try DataDirectory.export(export) { line in Console.out(line.canonicalString) }
                exit(0)
            } catch {
                hubFail(error.message, status: 1)
            }
        }
        var sharedLog: SharedLogConfiguration?
        if let logURL {
            switch SharedLogConfiguration.parse(logURL) {
            case .success(var configuration):
                if let natsReplicas { configuration.replicas = natsReplicas }
                configuration.retainActions = retainActions.map { UInt64($0) }
                switch SharedLogCredentials.resolve(into: &configuration, file: natsCredentials,
                                                    environment: environmentValues(["CREDENTIALS_DIRECTORY", "STORESYNC_NATS_USER", "STORESYNC_NATS_PASSWORD", "STORESYNC_NATS_TOKEN"])) {
                case .success(let source):
                    if source != nil {
                        // From here on the process holds a secret: no core dump may carry it.
                        SecretFile.keepOutOfCoreDumps()
                    }
                    if source == "the --log URL" {
                        Console.error("\(program): warning: the NATS credentials are in the --log URL, where every local user can read them (ps); put them in a file given with --nats-credentials FILE (docs/OPERATIONS.md §20, \"Credentials\")")
                    }
                case .failure(let error):
                    hubFail("--nats-credentials: \(error.message)", status: 2)
                }
                if logKeyFile != nil, logUnauthenticated {
                    hubFail("--log-key-file and --log-unauthenticated: give one", status: 2)
                }
                let credentialsDirectory = environmentValues(["CREDENTIALS_DIRECTORY"])["CREDENTIALS_DIRECTORY"]
                switch LogKeys.load(file: logKeyFile, credentialsDirectory: logUnauthenticated ? nil : credentialsDirectory) {
                case .success(let keys?):
                    configuration.keys = keys
                    SecretFile.keepOutOfCoreDumps()
                case .success(nil):
                    guard logUnauthenticated else {
                        hubFail("--log \(configuration.redacted) needs the key that authenticates the stream's records, shared by every hub of the stream: make one with `head -c 32 /dev/urandom | base64 > /etc/storesync/log-key; chmod 600 /etc/storesync/log-key`, copy it to every hub's host, and give it with --log-key-file FILE (or LoadCredential=storesync-log-key:FILE under systemd). On a network where every NATS user is trusted, --log-unauthenticated runs without one (docs/OPERATIONS.md §20)", status: 2)
                    }
                    configuration.keys = .unauthenticated
                case .failure(let error):
                    hubFail("--log-key-file: \(error.message)", status: 2)
                }
                sharedLog = configuration
            case .failure(let error):
                hubFail("--log: \(error.message)", status: 2)
            }
        }

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

        let logs = LogWriter(prefix: "\(program): ")
        let stamped = logTimestamps ?? LogTimestamp.standardErrorIsTerminal
        var configuration = HubConfiguration(
            socketPath: SocketPath.resolve(explicit: socketFlag, app: appName),
            maxFrameBytes: maxFrameBytes,
            maxQueuedBytesPerReplica: maxQueueBytes,
            // The library names no program: each line is `PROGRAM: [warning: |error: ]MESSAGE`.
            logger: HubLogger(logLevel: logLevel) { level, message, metadata in
                let line = HubLogger.line(program: program, level: level, message: message, metadata: metadata)
                logs.write(stamped ? LogTimestamp.now() + " " + line : line)
            }
        )
        configuration.dataDirectory = dataDirectory
        configuration.sharedLog = sharedLog
        if let fsyncMode { configuration.fsync = fsyncMode }
        if let snapshotEvery { configuration.snapshotEvery = snapshotEvery }
        if let dedupWindow { configuration.dedupWindow = dedupWindow }
        if let backlogBytes { configuration.backlogBytes = backlogBytes }
        if let checkpointEvery { configuration.checkpointEvery = checkpointEvery }
        if let checkpointInterval { configuration.checkpointInterval = checkpointInterval }
        if let idleTimeout { configuration.idleTimeout = idleTimeout }
        if let welcomeTimeout { configuration.welcomeTimeout = welcomeTimeout }
        if let socketMode { configuration.socketMode = socketMode }
        configuration.socketGroup = socketGroup
        configuration.allowedUIDs = allowedUIDs
        configuration.maxClients = maxClients
        configuration.checkDeterminism = checkDeterminism
        serve(app, configuration: configuration, logs: logs)
    }
}

/// The flag closest to a mistyped one (at most two edits away), for "did you mean".
///
/// - Parameters:
///   - typed: What was typed.
///   - flags: The known flags.
/// - Returns: The closest flag, or `nil` when none is close.
func closestFlag(_ typed: String, among flags: [String]) -> String? {
    guard typed.hasPrefix("-") else { return nil }
    let scored = flags.map { ($0, editDistance(typed, $0)) }.min { $0.1 < $1.1 }
    guard let (flag, distance) = scored, distance <= max(2, typed.count / 4) else { return nil }
    return flag
}

/// The Levenshtein distance between two strings (by characters).
func editDistance(_ a: String, _ b: String) -> Int {
    let a = Array(a), b = Array(b)
    guard !a.isEmpty else { return b.count }
    guard !b.isEmpty else { return a.count }
    var previous = Array(0...b.count)
    var current = [Int](repeating: 0, count: b.count + 1)
    for i in 1...a.count {
        current[0] = i
        for j in 1...b.count {
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
        }
        swap(&previous, &current)
    }
    return previous[b.count]
}

fileprivate func hubPad(_ text: String, _ width: Int) -> String {
    text + String(repeating: " ", count: max(0, width - text.count))
}

fileprivate func hubFail(_ message: String, status: Int32) -> Never {
    Console.error("\(HubCommand.program): \(message)")
    exit(status)
}

fileprivate func serve<App: SyncApp>(_ app: App, configuration: HubConfiguration, logs: LogWriter) -> Never {
    var configuration = configuration
    if let shared = configuration.sharedLog, !shared.keys.isAuthenticated {
        logs.write("\(HubCommand.program): warning: the records of the shared log \(shared.redacted) are not authenticated (--log-unauthenticated): anyone who can publish to storesync.\(shared.stream).actions can forge actions; give every hub a key with --log-key-file (docs/OPERATIONS.md §20)")
    }
    // The library never changes SIGPIPE (its socket writes use MSG_NOSIGNAL / SO_NOSIGPIPE);
    // The hub, a daemon, ignores it so that a closed stderr pipe (its log) cannot kill it
    // before it has flushed its replicas and removed its socket.
    UnixSocket.ignoreBrokenPipes()
    func stop(_ message: String, status: Int32) -> Never {
        logs.write("\(HubCommand.program): \(message)")
        logs.flush()
        exit(status)
    }
    // Signals first: a SIGTERM that arrives as soon as the socket exists must still mean
    // "flush, remove the socket, exit 0".
    let signals: Int32
    do throws(SystemError) {
        signals = try SignalPipe.install()
    } catch {
        stop(error.message, status: 1)
    }
    let limit = DescriptorLimit.raise()
    configuration.logger.info(limit.after > limit.before
        ? "open-files limit raised from \(limit.before) to \(limit.after) (the hard limit is \(limit.hard))"
        : "open-files limit \(limit.after) (the hard limit is \(limit.hard))")
    if let passed = Systemd.listenDescriptors() {
        guard passed.count == 1, let fd = passed.first else {
            stop("the service manager passed \(passed.count) sockets (LISTEN_FDS); the hub serves exactly one: give the .socket unit one ListenStream=", status: 2)
        }
        configuration.listeningDescriptor = fd
    }
    configuration.stopDescriptor = signals
    let hub: Hub<App>
    do throws(HubError) {
        hub = try Hub(app: app, configuration: configuration)
    } catch {
        // SIGTERM while starting (waiting for a shared log): a clean stop, nothing served.
        if UnixSocket.waitUntil(signals, timeoutMilliseconds: 0) {
            stop("stopped before serving (\(error.message))", status: 0)
        }
        stop(error.message, status: error.kind == .dataUnusable ? 4 : 1)
    }
    do throws(HubError) {
        try hub.run(stopOn: signals)
    } catch {
        stop(error.message, status: error.kind == .logBroken ? 3 : 1)
    }
    logs.flush()
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

/// The values of the named environment variables that are set.
///
/// - Parameter names: The variables.
/// - Returns: Name to value, for the ones that are set.
private func environmentValues(_ names: [String]) -> [String: String] {
    var values: [String: String] = [:]
    for name in names {
        if let value = getenv(name) { values[name] = String(cString: value) }
    }
    return values
}
