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

/// Everything `hubd`'s command line says, as a value: read by ``parse(_:accounts:)``, a pure
/// function over one table of flags (``table(appList:accounts:)``), from which the help's
/// OPTIONS section and "did you mean" are made too.
struct HubOptions: Equatable {
    /// What the command line asks for besides serving.
    enum Request: Equatable {
        /// Serve (or `--check-data`, `--export`, which the options say).
        case serve
        /// Print the help.
        case help
        /// Print the version.
        case version
        /// Print the apps.
        case listApps
    }

    typealias D = HubConfiguration.Defaults

    var request = Request.serve
    /// `--app` (`nil`: the first app).
    var appName: String?
    var socket: String?
    var socketMode: mode_t?
    var socketGroup: UInt32?
    var allowedUIDs: Set<UInt32> = []
    var maxClients: Int?
    var maxFrameBytes = D.maxFrameBytes
    var maxQueueBytes = D.maxQueuedBytesPerReplica
    var dataDirectory: String?
    /// `--log nats://…`, as given.
    var logURL: String?
    var natsCredentials: String?
    var logKeyFile: String?
    var logUnauthenticated = false
    var natsReplicas: Int?
    var retainActions: Int?
    var fsyncMode: FsyncMode?
    var snapshotEvery: Int?
    var dedupWindow: Int?
    var backlogBytes: Int?
    var checkpointEvery: Int?
    var checkpointInterval: Duration?
    var idleTimeout: Duration?
    var welcomeTimeout: Duration?
    var checkDeterminism = false
    /// `--upgrade`: move the history to the newest version once, at start.
    var upgrade = false
    var logTimestamps: Bool?
    var logLevel = HubLogger.Level.info
    var checkData: String?
    var repair = false
    var export: String?
    var exportAt: UInt64?

    /// Reads a command line.
    ///
    /// The flags are read in order; `--help`, `--version` and `--list-apps` end the reading
    /// (what follows is not read). Then the flags that need others are checked.
    ///
    /// - Parameters:
    ///   - arguments: The arguments, the executable first.
    ///   - accounts: Turns user and group names into ids (`--allow-uid`, `--socket-group`).
    /// - Returns: The options.
    /// - Throws: ``UsageError``: an unknown flag (with the closest one), a missing or bad
    ///   value, or a flag without the one it needs.
    static func parse(_ arguments: [String], accounts: AccountLookup = .system) throws(UsageError) -> HubOptions {
        let program = executableName(arguments.first, otherwise: "hubd")
        let options = try table(appList: "", accounts: accounts).parse(arguments, into: HubOptions(), program: program)
        if options.request == .serve { try options.check() }
        return options
    }

    /// Checks the flags that need others.
    ///
    /// - Throws: ``UsageError`` naming the flag and what it needs.
    func check() throws(UsageError) {
        if dataDirectory == nil && logURL == nil {
            if fsyncMode != nil { throw UsageError("--fsync needs --data-dir (an in-memory hub has no journal)") }
            if snapshotEvery != nil { throw UsageError("--snapshot-every needs --data-dir (an in-memory hub has no snapshots)") }
            if dedupWindow != nil { throw UsageError("--dedup-window needs --data-dir (an in-memory hub keeps the default window for its run)") }
        }
        if logURL == nil {
            if natsReplicas != nil { throw UsageError("--nats-replicas needs --log nats://…") }
            if natsCredentials != nil { throw UsageError("--nats-credentials needs --log nats://…") }
            if logKeyFile != nil { throw UsageError("--log-key-file needs --log nats://…") }
            if logUnauthenticated { throw UsageError("--log-unauthenticated needs --log nats://…") }
            if retainActions != nil { throw UsageError("--retain-actions needs --log nats://…") }
        } else {
            if fsyncMode != nil, dataDirectory == nil {
                throw UsageError("--fsync is for a file journal; with --log nats:// the stream's durability is NATS's (use --nats-replicas 3; see docs/OPERATIONS.md, \"Across hosts\")")
            }
            if let retainActions, retainActions < D.retainedActions {
                throw UsageError("--retain-actions must be at least \(D.retainedActions) (the actions every hub's resume window holds), got \(retainActions)")
            }
            if logKeyFile != nil, logUnauthenticated { throw UsageError("--log-key-file and --log-unauthenticated: give one") }
        }
        if repair && checkData == nil { throw UsageError("--repair needs --check-data DIR") }
        if exportAt != nil && export == nil { throw UsageError("--at needs --export DIR") }
    }

    /// The help: the synopsis, the OPTIONS section made from the table, and what follows.
    ///
    /// - Parameters:
    ///   - program: The executable's name.
    ///   - apps: The apps it serves (the first is the default).
    /// - Returns: The text.
    static func usage(program: String, apps: [String]) -> String {
        let appList: String
        if apps.count <= 1 {
            appList = "\(apps.first ?? "") (the only one; the flag may be left out)"
        } else {
            appList = "\(apps[0]) (default), " + apps.dropFirst().dropLast().joined(separator: ", ")
                + (apps.count > 2 ? ", " : "") + "or \(apps[apps.count - 1])"
        }
        return """
            \(program) — a StoreSync hub: owns the root store and the order of actions, serves replicas.

            USAGE: \(program) [--app NAME] [--socket PATH] [--socket-mode MODE] [--socket-group GROUP]
                        [--allow-uid UID[,UID…]] [--max-clients N]
                        [--data-dir DIR [--fsync MODE] [--snapshot-every N] [--dedup-window N]]
                        [--log file:DIR | --log nats://[USER:PASS@]HOST:PORT[,HOST:PORT…]/STREAM
                         [--log-key-file FILE | --log-unauthenticated] [--nats-credentials FILE]
                         [--nats-replicas N] [--retain-actions N]]
                        [--backlog-bytes N] [--checkpoint-every N] [--checkpoint-interval SECONDS]
                        [--idle-timeout SECONDS]
                        [--welcome-timeout SECONDS] [--check-determinism] [--upgrade] [--log-timestamps on|off]
                        [--log-level LEVEL] [--max-frame-bytes N] [--max-queue-bytes N]
                   \(program) --check-data DIR [--repair]
                   \(program) --export DIR [--at SEQ]
                   \(program) --list-apps | --version | --help

            OPTIONS:
            \(table(appList: appList, accounts: .system).optionsHelp)

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
    }

    /// `hubd`'s flags, in the order the help lists them: each one's name, value, help and
    /// check, written once.
    ///
    /// - Parameters:
    ///   - appList: The apps, in words, for `--app`'s help.
    ///   - accounts: Turns user and group names into ids.
    /// - Returns: The table.
    static func table(appList: String, accounts: AccountLookup) -> FlagTable<HubOptions> {
        FlagTable(flags: [
            .value("--app", "--app NAME", help: [
                "The app (reducer) to run: \(appList).",
                "Every replica must run the same app; see --list-apps.",
                "NAME@VERSION runs that version of it exactly.",
            ], into: \.appName),
            .value("--socket", "--socket PATH", help: [
                "The Unix socket to listen on. Default: $STORESYNC_SOCKET, else",
                "$XDG_RUNTIME_DIR/storesync/APP.sock, else",
                "${TMPDIR:-/tmp}/storesync-UID/APP.sock (APP: the app's name,",
                "e.g. counter.sock, so hubs of two apps never share a default",
                "socket). A missing directory is",
                "created 0700 (0750 with --socket-group). The directory must be a",
                "real directory (not a symbolic link) owned by this user or root",
                "and writable by no one else (a sticky root-owned one such as /tmp",
                "is allowed); otherwise the hub refuses to start and says why. A",
                "live hub on the path is never displaced; a stale socket file is",
                "replaced.",
            ], into: \.socket),
            .value("--socket-mode", "--socket-mode MODE", help: [
                "The socket file's mode, octal (default \(String(D.socketMode, radix: 8))): only this user may",
                "connect. 0660 with --socket-group lets the group connect.",
            ]) { options, text throws(UsageError) in
                guard let mode = mode_t(text, radix: 8), mode <= 0o777, mode & 0o600 == 0o600 else {
                    throw UsageError("--socket-mode needs an octal mode from 600 to 777 that lets the hub's user read and write, e.g. 0660, got \"\(shown(text))\"")
                }
                options.socketMode = mode
            },
            .value("--socket-group", "--socket-group GROUP", help: [
                "Share the socket with a group (name or number): the socket and a",
                "directory the hub creates belong to it, and its members pass the",
                "peer check below.",
            ]) { options, text throws(UsageError) in
                guard let gid = accounts.gid(text) else { throw UsageError("--socket-group: no group \"\(shown(text))\" on this system") }
                options.socketGroup = gid
            },
            .value("--allow-uid", "--allow-uid UID[,UID…]", help: [
                "Users (names or numbers) who may attach besides this user and",
                "root. Every connection's peer credentials are checked",
                "(SO_PEERCRED): anyone else gets error forbidden and is closed,",
                "whatever the socket's mode.",
            ]) { options, text throws(UsageError) in
                for part in text.split(separator: ",") {
                    guard let uid = accounts.uid(String(part)) else { throw UsageError("--allow-uid: no user \"\(shown(String(part)))\" on this system") }
                    options.allowedUIDs.insert(uid)
                }
            },
            .value("--max-clients", "--max-clients N", help: [
                "The most connections served at once (default: the open-files",
                "limit minus \(D.reservedDescriptors) kept for the hub's own files, at most",
                "\(D.maxClientsCeiling)). One more gets error too-many-clients and is closed. At",
                "start the hub raises its soft open-files limit to the hard limit.",
            ]) { options, text throws(UsageError) in
                options.maxClients = try positiveInteger(text, for: "--max-clients")
            },
            .value("--data-dir", "--data-dir DIR", help: [
                "Keep the state in DIR (created 0700): a journal of every sequenced",
                "action and periodic snapshots, so a restarted hub (even after",
                "kill -9) recovers every acknowledged action and keeps its history",
                "id. One hub per directory. Without it (and without --log nats://)",
                "the hub is in memory and nothing survives the process.",
            ], into: \.dataDirectory),
            Flag(names: ["--log"], takesValue: true, ends: false,
                 help: [("--log file:DIR", [
                     "The same as --data-dir DIR.",
                 ]),
                        ("--log nats://…/STREAM", [
                            "Keep the order in a NATS JetStream stream shared with hubs on other",
                            "hosts (see docs/OPERATIONS.md, \"Across hosts\"). With --data-dir",
                            "the hub also keeps local snapshots there for a fast restart.",
                        ])]) { options, text throws(UsageError) in
                if text.hasPrefix("file:") {
                    let directory = String(text.dropFirst("file:".count))
                    guard !directory.isEmpty else { throw UsageError("--log file: needs a directory, e.g. --log file:/var/lib/storesync") }
                    if let dataDirectory = options.dataDirectory, dataDirectory != directory {
                        throw UsageError("--log \(shown(text)) and --data-dir \(shown(dataDirectory)) name two directories; give one")
                    }
                    options.dataDirectory = directory
                } else if text.hasPrefix("nats://") {
                    options.logURL = text
                } else {
                    throw UsageError("--log is file:DIR or nats://[USER:PASS@]HOST:PORT[,HOST:PORT…]/STREAM, got \"\(SharedLogConfiguration.redact(text))\"")
                }
            },
            .value("--log-key-file", "--log-key-file FILE", help: [
                "With --log nats://: the key that authenticates the stream's records",
                "(HMAC-SHA-256), shared by every hub of the stream: one key per",
                "line, at least 32 bytes (head -c 32 /dev/urandom | base64), the",
                "first signs, all verify. Without it:",
                "$CREDENTIALS_DIRECTORY/storesync-log-key (systemd LoadCredential=).",
                "A hub on a stream without a key refuses to start.",
            ], into: \.logKeyFile),
            .switch("--log-unauthenticated", help: [
                "With --log nats://: run without a key, on a network where every",
                "NATS user is trusted: anyone who can publish to the stream can",
                "then forge actions (said at every start).",
            ]) { options in options.logUnauthenticated = true },
            .value("--nats-credentials", "--nats-credentials FILE", help: [
                "With --log nats://: the NATS user and password (lines user=… and",
                "password=…) or token (token=…), from a file only its owner can",
                "read. Without it: $CREDENTIALS_DIRECTORY/nats-credentials",
                "(systemd LoadCredential=), then STORESYNC_NATS_USER and",
                "STORESYNC_NATS_PASSWORD, or STORESYNC_NATS_TOKEN. Credentials in",
                "the URL work too, but every local user sees them (ps).",
            ], into: \.natsCredentials),
            .value("--nats-replicas", "--nats-replicas N", help: [
                "With --log nats://: the stream's replicas when this hub creates it",
                "(default 1; 3 across hosts).",
            ]) { options, text throws(UsageError) in
                options.natsReplicas = try positiveInteger(text, for: "--nats-replicas")
            },
            .value("--retain-actions", "--retain-actions N", help: [
                "With --log nats://: keep at least N actions (at least \(D.retainedActions))",
                "behind the newest shared snapshot, and let the stream be trimmed",
                "before them (default: keep every action).",
            ]) { options, text throws(UsageError) in
                options.retainActions = try positiveInteger(text, for: "--retain-actions")
            },
            .value("--fsync", "--fsync MODE", help: [
                "When journal records reach the disk (needs --data-dir):",
                "always  each action is fsynced on its own before it is broadcast",
                "        or acknowledged: nothing acknowledged is ever lost, even",
                "        on power loss; slowest.",
                "batch   (default) group commit: the actions of one event-loop pass",
                "        share one fsync before any is broadcast or acknowledged:",
                "        the same promise as always, far fewer fsyncs.",
                "never   written to the OS before broadcast, fsynced only when a",
                "        segment is closed (full at 64 MiB, at a snapshot, at a stop):",
                "        a hub crash loses nothing, a power loss or kernel crash can",
                "        lose the last seconds; recovery yields a consistent prefix.",
            ]) { options, text throws(UsageError) in
                guard let mode = FsyncMode(rawValue: text) else { throw UsageError("--fsync is always, batch or never, got \"\(shown(text))\"") }
                options.fsyncMode = mode
            },
            .value("--snapshot-every", "--snapshot-every N", help: [
                "Write a snapshot every N actions (default \(D.snapshotEvery); also at a clean",
                "shutdown); older journal segments are then deleted, keeping at",
                "least the last \(D.retainedActions) actions. Needs --data-dir or",
                "--log nats:// (whose snapshots are also shared with every hub).",
            ]) { options, text throws(UsageError) in
                options.snapshotEvery = try positiveInteger(text, for: "--snapshot-every")
            },
            .value("--dedup-window", "--dedup-window N", help: [
                "Per client session (hello \"session\"), remember at least the last",
                "N sequenced dispatch ids (default \(D.dedupWindow)), in memory, in snapshots",
                "and through the journal: a dispatch re-sent after a reconnect or",
                "a hub restart is answered duplicate with its original seq, never",
                "applied twice. Sessions idle for 24 hours are forgotten; at most",
                "10000 sessions are kept (the one whose last dispatch is oldest",
                "goes first, logged). Needs --data-dir (an in-memory hub uses the",
                "default).",
            ]) { options, text throws(UsageError) in
                options.dedupWindow = try positiveInteger(text, for: "--dedup-window")
            },
            .value("--backlog-bytes", "--backlog-bytes N", help: [
                "The resume window in memory (default \(D.backlogBytes)): it holds at least",
                "the last \(D.retainedActions) actions, and more while they fit in N bytes. A",
                "replica that comes back with hello \"resume\" inside it is sent",
                "only what it missed; further behind, a full welcome.",
            ]) { options, text throws(UsageError) in
                options.backlogBytes = try positiveInteger(text, for: "--backlog-bytes")
            },
            .value("--checkpoint-every", "--checkpoint-every N", help: [
                "After every action whose seq is a multiple of N (default \(D.checkpointEvery)),",
                "send every replica a checkpoint with the state's digest; a",
                "replica that differs re-hydrates by itself. Costs one digest of",
                "the whole state per N actions. 0 sends none.",
            ]) { options, text throws(UsageError) in
                guard let number = Int(text), number >= 0 else {
                    throw UsageError("--checkpoint-every needs a whole number (0: no checkpoints), got \"\(shown(text))\"")
                }
                options.checkpointEvery = number
            },
            .value("--checkpoint-interval", "--checkpoint-interval SECONDS", help: [
                "While actions flow, also send a checkpoint after the first",
                "action once this long has passed since the last one",
                "(decimals allowed; default 1; 0: by seq only). A flow starts",
                "with an action after a quiet spell of two intervals, and its",
                "first interval carries none: a replica that differs learns it",
                "within about two intervals of steady traffic.",
            ]) { options, text throws(UsageError) in
                guard let number = Double(text), number >= 0, number <= 86_400 else {
                    throw UsageError("--checkpoint-interval needs a number of seconds from 0 to 86400 (0: by seq only), got \"\(shown(text))\"")
                }
                options.checkpointInterval = .milliseconds(Int(number * 1000))
            },
            .value("--idle-timeout", "--idle-timeout SECONDS", help: [
                "A connection that has not attached and sends no complete frame",
                "(hello, status, sync) for this long, or that holds half a frame",
                "this long, gets error timeout and is closed (default \(D.idleTimeoutSeconds)).",
                "Attached replicas that only listen are never timed out.",
            ]) { options, text throws(UsageError) in
                options.idleTimeout = try secondsValue(text, for: "--idle-timeout")
            },
            .value("--welcome-timeout", "--welcome-timeout SECONDS", help: [
                "A client that has not read its whole welcome this long after the",
                "hub queued it gets error slow-consumer and is closed (default \(D.welcomeTimeoutSeconds)); so is",
                "a replica dropped as a slow consumer that has not read the rest of",
                "its frame and that error by then. The state in a welcome is one",
                "copy shared by every joining client and does not count against",
                "--max-queue-bytes.",
            ]) { options, text throws(UsageError) in
                options.welcomeTimeout = try secondsValue(text, for: "--welcome-timeout")
            },
            .switch("--check-determinism", help: [
                "Apply every action to two copies of the state (one decoded again",
                "from the wire) and refuse, with reject rejected, one whose results",
                "differ: catches a reducer that reads a clock, a random source or a",
                "global before it diverges replicas. Costs two more reducer runs",
                "and two digests of the whole state per action (not during",
                "recovery): for staging and tests.",
            ]) { options in options.checkDeterminism = true },
            .switch("--upgrade", help: [
                "Once recovered, upgrade the history to the newest version of the",
                "app this hub carries (see --list-apps), then serve: the state is",
                "migrated and an upgrade record is sequenced. Nothing happens when",
                "the history already runs it; a refused upgrade (no path, the",
                "migration threw, the state too large) stops the start with why.",
                "On a shared log it first catches up, waiting up to 60 s for the",
                "stream. A running hub is upgraded with replica-cli upgrade instead.",
            ]) { options in options.upgrade = true },
            .value("--log-timestamps", "--log-timestamps on|off", help: [
                "Start every log line with the time, RFC 3339 in UTC with",
                "milliseconds (2026-11-28T12:45:01.123Z). Default: on when stderr",
                "is a terminal, off otherwise (journald adds its own).",
            ]) { options, text throws(UsageError) in
                switch text {
                case "on": options.logTimestamps = true
                case "off": options.logTimestamps = false
                default: throw UsageError("--log-timestamps is on or off, got \"\(shown(text))\"")
                }
            },
            .value("--log-level", "--log-level LEVEL", help: [
                "The least level of the lines logged: trace, debug, info,",
                "notice, warning, error or critical. Default: info (every line",
                "there is); notice keeps what an operator acts on (serving,",
                "outages, refusals, the log back), warning only warnings and",
                "errors.",
            ]) { options, text throws(UsageError) in
                guard let level = HubLogger.Level(name: text) else {
                    throw UsageError("--log-level is one of \(HubLogger.Level.allCases.map(\.description).joined(separator: ", ")), got \"\(shown(text))\"")
                }
                options.logLevel = level
            },
            .value("--check-data", "--check-data DIR", help: [
                "Verify every snapshot and journal record in DIR offline, replay it,",
                "print a summary (format, seqs, sizes, digest) and exit (0: usable,",
                "1: not).",
            ], into: \.checkData),
            .switch("--repair", help: [
                "With --check-data: truncate a torn tail (what follows the last",
                "complete commit), saying exactly what is removed.",
            ]) { options in options.repair = true },
            .value("--export", "--export DIR", help: [
                "Print what DIR holds as NDJSON on stdout and exit (read-only):",
                "{\"type\":\"history\",…}, the records kept before the newest",
                "snapshot, {\"type\":\"snapshot\",\"seq\":…,\"digest\":…,\"state\":…}, then",
                "every record after it as {\"type\":\"action\",\"seq\":…,\"origin\":…,",
                "\"id\":…,\"action\":…} (with \"session\" and \"checkpoint\" when set),",
                "an upgrade as {\"type\":\"upgrade\",\"seq\":…,\"from\":…,\"to\":…,",
                "\"digest\":…}.",
            ], into: \.export),
            .value("--at", "--at SEQ", help: [
                "With --export: print instead the state as it was right after SEQ,",
                "rebuilt with the app's reducer from the newest snapshot at or",
                "before SEQ (or from the start, while the journal holds seq 1);",
                "exit 1 saying what can be rebuilt when SEQ is older.",
            ]) { options, text throws(UsageError) in
                guard let seq = UInt64(text) else { throw UsageError("--at needs a seq (a whole number), got \"\(shown(text))\"") }
                options.exportAt = seq
            },
            .value("--max-frame-bytes", "--max-frame-bytes N", help: [
                "The largest frame payload a client may send (default \(D.maxFrameBytes),",
                "at most \(HubConfiguration.maxFrameBytesCeiling)). Replicas learn it from the welcome and refuse",
                "a larger dispatch themselves; a client that sends a longer frame",
                "gets error frame-too-large and is closed. An action whose",
                "canonical form no longer fits one frame is rejected on its own.",
                "The hub reads at most N + \(D.inputSlackBytes) unhandled bytes from one",
                "connection before it waits for them to be handled.",
            ]) { options, text throws(UsageError) in
                let bytes = try positiveInteger(text, for: "--max-frame-bytes")
                guard bytes <= HubConfiguration.maxFrameBytesCeiling else {
                    throw UsageError("--max-frame-bytes is at most \(HubConfiguration.maxFrameBytesCeiling) (1 GiB), got \(bytes)")
                }
                options.maxFrameBytes = bytes
            },
            .value("--max-queue-bytes", "--max-queue-bytes N", help: [
                "How far one replica may fall behind, in bytes owed to it",
                "(default \(D.maxQueuedBytesPerReplica)); past it that replica is dropped so it never",
                "holds back the others. Sequenced frames are held once, in a",
                "backlog all replicas share, so memory does not grow with the",
                "number of replicas.",
            ]) { options, text throws(UsageError) in
                options.maxQueueBytes = try positiveInteger(text, for: "--max-queue-bytes")
            },
            .switch("--list-apps", ends: true, help: [
                "Print the apps with their fingerprints and exit.",
            ]) { options in options.request = .listApps },
            .switch("--version", ends: true, help: [
                "Print the StoreSync version and exit.",
            ]) { options in options.request = .version },
            .switch("-h", "--help", ends: true, help: [
                "Print this help and exit.",
            ]) { options in options.request = .help },
        ])
    }
}

/// Turns user and group names (or numbers) into ids: the system's account database, or a
/// test's table.
struct AccountLookup: Sendable {
    /// A user's id, `nil` when there is no such user.
    var uid: @Sendable (String) -> UInt32?
    /// A group's id, `nil` when there is no such group.
    var gid: @Sendable (String) -> UInt32?

    /// The system's accounts (NSS).
    static let system = AccountLookup(uid: { Accounts.uid($0) }, gid: { Accounts.gid($0) })
}
