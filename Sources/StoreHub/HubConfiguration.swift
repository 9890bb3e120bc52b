#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import SyncCore
import SyncPOSIX
import SyncProtocol

/// How a hub listens, where it keeps its order, and what it tolerates.
///
/// Every default lives in ``Defaults``; `hubd --help` prints them from there.
public struct HubConfiguration: Sendable {
    /// The defaults of every setting, in one place.
    public enum Defaults {
        /// `--max-frame-bytes`: 1 MiB.
        public static let maxFrameBytes = Frame.defaultMaxPayloadBytes
        /// `--max-queue-bytes`: 64 MiB.
        public static let maxQueuedBytesPerReplica = 64 << 20
        /// `--snapshot-every`.
        public static let snapshotEvery = 100_000
        /// Journal records kept behind the newest snapshot (and the least the backlog holds).
        public static let retainedActions = 10_000
        /// `--backlog-bytes`: 64 MiB.
        public static let backlogBytes = 64 << 20
        /// `--checkpoint-every`.
        public static let checkpointEvery = 10_000
        /// `--checkpoint-interval`, in milliseconds (0: off): one second.
        public static let checkpointIntervalMilliseconds = 1_000
        /// `--dedup-window`.
        public static let dedupWindow = 1_000
        /// `--idle-timeout`, in seconds.
        public static let idleTimeoutSeconds = 10
        /// `--welcome-timeout`, in seconds.
        public static let welcomeTimeoutSeconds = 60
        /// `--socket-mode`.
        public static let socketMode: mode_t = 0o600
        /// The most clients `--max-clients` defaults to.
        public static let maxClientsCeiling = 10_000
        /// Descriptors the hub keeps for itself (its log, snapshots, the listener, pipes), or
        /// half the open-files limit when that is lower.
        public static let reservedDescriptors = 32
        /// Input read from one connection and not yet handled, beyond one frame.
        public static let inputSlackBytes = 256 << 10
        /// Private replies queued for one connection before the hub stops reading its requests.
        public static let replyBacklogBytes = 4 << 20
        /// The fsync mode.
        public static let fsync = FsyncMode.batch
    }

    /// The Unix socket path to listen on.
    public var socketPath: String
    /// The largest value ``maxFrameBytes`` may take: 1 GiB.
    public static let maxFrameBytesCeiling = 1 << 30

    /// The largest frame payload a client may send, in bytes (default 1 MiB, at most
    /// ``maxFrameBytesCeiling``); it is told to every replica in `welcome`.
    public var maxFrameBytes: Int {
        didSet { maxFrameBytes = Self.clampFrameLimit(maxFrameBytes) }
    }
    /// The most bytes the hub queues for one replica that is not reading, the state of its
    /// `welcome` aside; past it the replica is dropped (`slow-consumer`) so it never holds
    /// back the others (default 64 MiB).
    public var maxQueuedBytesPerReplica: Int
    /// Receives the hub's events (listening, attach, detach, outages, errors), each with its
    /// level; the program chooses where they go and how they read (default: discarded).
    public var logger: HubLogger
    /// The data directory for the journal and snapshots; `nil` keeps everything in memory
    /// (nothing survives the process) unless ``sharedLog`` names a replicated log.
    public var dataDirectory: String?
    /// A replicated log shared by hubs on several hosts (`nats://…`); `nil` for a log of
    /// this hub's own (the data directory, or memory).
    public var sharedLog: SharedLogConfiguration?
    /// When journal records reach the disk (with a data directory); default ``FsyncMode/batch``.
    public var fsync: FsyncMode = Defaults.fsync
    /// A snapshot is written every this many actions (and at a clean shutdown).
    public var snapshotEvery: Int = Defaults.snapshotEvery
    /// Journal records kept behind the newest snapshot, at least (the resume window).
    public var retainedActions: Int = Defaults.retainedActions
    /// The in-memory resume window's byte budget: it holds at least the last
    /// ``retainedActions`` actions, and more while they fit in this many bytes (default 64 MiB).
    public var backlogBytes: Int = Defaults.backlogBytes
    /// A `checkpoint` (the state's digest) follows every action whose seq is a multiple of
    /// this (default 10,000; 0 sends none).
    public var checkpointEvery: Int = Defaults.checkpointEvery
    /// While actions flow, also a `checkpoint` after the first action once this much time has
    /// passed since the last one (default one second; `nil` or zero: by seq only). A flow starts
    /// with an action after a quiet spell of two intervals and its first interval carries none, so a
    /// replica that differs learns it within about two intervals of steady traffic, and a few
    /// dispatches at a time are never followed by a checkpoint.
    public var checkpointInterval: Duration? = .milliseconds(Defaults.checkpointIntervalMilliseconds)
    /// Applies every action to two copies of the state and refuses (`rejected`) one whose
    /// results differ: a reducer that reads a clock, a random source or a global is caught
    /// before it diverges the replicas (default off: two more reducer runs and two state digests per live action; recovery is not checked).
    public var checkDeterminism = false
    /// Every version of the app the hub carries, oldest first, when it carries newer ones than
    /// the app it is created with (a hub given `todos@1` to serve a history of that version,
    /// built with `todos@2`): the chain of the newest version (``SyncApp/versions``). `nil`
    /// (the default): the app's own chain. The hub serves the version its history runs, says
    /// the newest as `status.upgradable_to`, holds the `hello` of a replica of a newer version
    /// until the history is upgraded, and upgrades it on request (an `upgrade` message).
    public var versions: AppVersionChain?
    /// Upgrades the history to the newest version the hub carries once, at start, after
    /// recovery (`hubd --upgrade`); a refusal stops the start with its reason.
    public var upgradeAtStart = false
    /// Dispatch ids remembered per client session, at least (default 1,000).
    public var dedupWindow: Int = Defaults.dedupWindow
    /// A connection that is not attached and sends no complete frame for this long, or that
    /// holds half a frame this long, is closed with `timeout` (default 10 s).
    public var idleTimeout: Duration = .seconds(Defaults.idleTimeoutSeconds)
    /// A client that has not read its whole `welcome` this long after it was queued is
    /// dropped (`slow-consumer`); so is a replica dropped as a slow consumer that has not read
    /// the rest of its frame and the error by then (default 60 s).
    public var welcomeTimeout: Duration = .seconds(Defaults.welcomeTimeoutSeconds)
    /// The most connections served at once; one more gets `error` `too-many-clients` and is
    /// closed. `nil` (the default): the open-files limit minus
    /// ``Defaults/reservedDescriptors`` (or minus half of it, when the limit is under twice the
    /// reserve), at most ``Defaults/maxClientsCeiling``.
    public var maxClients: Int?
    /// The socket file's mode (default 0600: the hub's user only).
    public var socketMode: mode_t = Defaults.socketMode
    /// A group the socket (and its directory) is shared with; its members may attach.
    public var socketGroup: UInt32?
    /// Other users who may attach, besides the hub's own user and root.
    public var allowedUIDs: Set<UInt32> = []
    /// A listening socket passed by a service manager (socket activation), served instead of
    /// binding ``socketPath``.
    public var listeningDescriptor: Int32?
    /// A descriptor that becomes readable when the hub should stop before it serves (the
    /// signal pipe `hubd` passes to ``Hub/run(stopOn:)``): a hub still waiting for its shared
    /// log at start gives up at once instead of after its patience.
    public var stopDescriptor: Int32?
    /// Tells systemd (when `NOTIFY_SOCKET` is set) `READY=1` once serving, `STOPPING=1` at
    /// shutdown, and `WATCHDOG=1` while the loop runs (when `WATCHDOG_USEC` is set).
    public var notifySystemd = true

    /// Creates a configuration.
    ///
    /// - Parameters:
    ///   - socketPath: The socket path.
    ///   - maxFrameBytes: The frame size limit, clamped to 1…``maxFrameBytesCeiling``.
    ///   - maxQueuedBytesPerReplica: The per-replica output limit.
    ///   - logger: Where the hub's events go; the default discards them.
    public init(
        socketPath: String,
        maxFrameBytes: Int = Defaults.maxFrameBytes,
        maxQueuedBytesPerReplica: Int = Defaults.maxQueuedBytesPerReplica,
        logger: HubLogger = .discarding
    ) {
        self.socketPath = socketPath
        self.maxFrameBytes = Self.clampFrameLimit(maxFrameBytes)
        self.maxQueuedBytesPerReplica = maxQueuedBytesPerReplica
        self.logger = logger
    }

    private static func clampFrameLimit(_ value: Int) -> Int { min(max(value, 1), maxFrameBytesCeiling) }

    /// The connection limit in force: ``maxClients``, or derived from the open-files limit.
    public var effectiveMaxClients: Int {
        if let maxClients { return max(1, maxClients) }
        let limit = Int(clamping: DescriptorLimit.current)
        let reserve = min(Defaults.reservedDescriptors, limit / 2)
        return max(1, min(Defaults.maxClientsCeiling, limit - reserve))
    }
}

/// A replicated log shared by hubs (NATS JetStream): `nats://[USER:PASS@]HOST:PORT[,HOST:PORT…]/STREAM`.
public struct SharedLogConfiguration: Sendable, Equatable {
    /// The servers, `host:port`, tried in order.
    public var servers: [String]
    /// The stream's name.
    public var stream: String
    /// A user name, with ``password``.
    public var user: String?
    /// The password.
    public var password: String?
    /// A token (`nats://TOKEN@host…`), instead of user and password.
    public var token: String?
    /// Replicas of the stream when this hub creates it (`--nats-replicas`, default 1; 3
    /// recommended across hosts).
    public var replicas: Int = 1
    /// Records kept behind the newest shared snapshot (`--retain-actions`); `nil` keeps all.
    public var retainActions: UInt64?
    /// The keys that tag the log's records (``LogKeys``); without one, records are only
    /// chained by SHA-256 (`--log-unauthenticated`).
    package var keys: LogKeys = .unauthenticated

    /// Parses `nats://[USER:PASS@]HOST:PORT[,HOST:PORT…]/STREAM` (or `TOKEN@`).
    ///
    /// - Parameter text: The URL.
    /// - Returns: The configuration, or why the text is not one.
    public static func parse(_ text: String) -> Result<SharedLogConfiguration, StorageError> {
        // Every message names the URL without its credentials.
        let shown = redact(text)
        guard text.hasPrefix("nats://") else {
            return .failure(StorageError("a shared log is nats://[USER:PASS@]HOST:PORT[,HOST:PORT…]/STREAM, got \(shown)"))
        }
        var rest = Substring(text.dropFirst("nats://".count))
        guard let slash = rest.lastIndex(of: "/") else {
            return .failure(StorageError("\(shown) names no stream: add /STREAM, e.g. nats://127.0.0.1:4222/storesync"))
        }
        let stream = String(rest[rest.index(after: slash)...])
        rest = rest[..<slash]
        guard !stream.isEmpty, stream.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else {
            return .failure(StorageError("the stream name \"\(ControlCharacters.escaped(redact(stream)))\" must be letters, digits, - and _"))
        }
        var user: String?, password: String?, token: String?
        if let at = rest.lastIndex(of: "@") {
            let credentials = rest[..<at]
            rest = rest[rest.index(after: at)...]
            if let colon = credentials.firstIndex(of: ":") {
                user = String(credentials[..<colon])
                password = String(credentials[credentials.index(after: colon)...])
            } else {
                token = String(credentials)
            }
        }
        let servers = rest.split(separator: ",").map { server -> String in
            server.contains(":") ? String(server) : String(server) + ":4222"
        }
        guard !servers.isEmpty else { return .failure(StorageError("\(shown) names no server")) }
        for server in servers {
            guard let colon = server.lastIndex(of: ":"), let port = Int(server[server.index(after: colon)...]),
                  (1...65535).contains(port), colon != server.startIndex else {
                return .failure(StorageError("\"\(ControlCharacters.escaped(server))\" in \(shown) is not HOST:PORT"))
            }
        }
        var configuration = SharedLogConfiguration(servers: servers, stream: stream)
        configuration.user = user
        configuration.password = password
        configuration.token = token
        return .success(configuration)
    }

    /// A URL as it may be shown: whatever stands before an `@` (credentials) is replaced by
    /// `***`, and control characters are escaped. For text that did not parse as well as
    /// text that did: a message never holds a password.
    ///
    /// - Parameter text: A URL, or something given where one was expected.
    /// - Returns: The text without credentials.
    public static func redact(_ text: String) -> String {
        guard let at = text.lastIndex(of: "@") else { return ControlCharacters.escaped(text) }
        // The scheme, `xxx://`, stays.
        var start = text.startIndex
        if let colon = text.firstIndex(of: ":"), colon < at, text[colon...].hasPrefix("://") {
            start = text.index(colon, offsetBy: 3)
        }
        let prefix = start <= at ? text[..<start] : ""
        return ControlCharacters.escaped(prefix + "***@" + text[text.index(after: at)...])
    }

    /// The URL without credentials, for logs and `status`.
    public var redacted: String { "nats://" + servers.joined(separator: ",") + "/" + stream }

    /// Creates a configuration.
    ///
    /// - Parameters:
    ///   - servers: `host:port` of each server.
    ///   - stream: The stream's name.
    public init(servers: [String], stream: String) {
        self.servers = servers
        self.stream = stream
    }
}
