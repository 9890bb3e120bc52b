import SyncCore

/// How a hub listens and what it tolerates.
public struct HubConfiguration: Sendable {
    /// The Unix socket path to listen on.
    public var socketPath: String
    /// The largest value ``maxFrameBytes`` may take: 1 GiB.
    public static let maxFrameBytesCeiling = 1 << 30

    /// The largest frame payload a client may send, in bytes (default 1 MiB, at most
    /// ``maxFrameBytesCeiling``); it is told to every replica in `welcome`.
    public var maxFrameBytes: Int {
        didSet { maxFrameBytes = Self.clampFrameLimit(maxFrameBytes) }
    }
    /// The most bytes the hub queues for one replica that is not reading; past it the
    /// replica is dropped (`slow-consumer`) so it never holds back the others (default 64 MiB).
    public var maxQueuedBytesPerReplica: Int
    /// Receives one line per notable event (listening, attach, detach, errors).
    public var log: @Sendable (String) -> Void
    /// The data directory for the journal and snapshots; `nil` keeps everything in memory
    /// (nothing survives the process).
    public var dataDirectory: String?
    /// When journal records reach the disk (with a data directory); default ``FsyncMode/batch``.
    public var fsync: FsyncMode = .batch
    /// A snapshot is written every this many actions (and at a clean shutdown).
    public var snapshotEvery: Int = 100_000
    /// Journal records kept behind the newest snapshot, at least (the resume window).
    public var retainedActions: Int = 10_000
    /// The in-memory resume window's byte budget: it holds at least the last
    /// ``retainedActions`` actions, and more while they fit in this many bytes (default 64 MiB).
    public var backlogBytes: Int = 64 << 20
    /// A `checkpoint` (the state's digest) follows every action whose seq is a multiple of
    /// this (default 10,000; 0 sends none).
    public var checkpointEvery: Int = 10_000
    /// Applies every action to two copies of the state and refuses (`rejected`) one whose
    /// results differ: a reducer that reads a clock, a random source or a global is caught
    /// before it diverges the replicas (default off: two more reducer runs and two state digests per live action; recovery is not checked).
    public var checkDeterminism = false
    /// Dispatch ids remembered per client session, at least (default 1,000).
    public var dedupWindow: Int = 1_000
    /// A connection that is not attached and sends no complete frame for this long, or that
    /// holds half a frame this long, is closed with `timeout` (default 10 s).
    public var idleTimeout: Duration = .seconds(10)

    /// Creates a configuration.
    ///
    /// - Parameters:
    ///   - socketPath: The socket path.
    ///   - maxFrameBytes: The frame size limit, clamped to 1…``maxFrameBytesCeiling``.
    ///   - maxQueuedBytesPerReplica: The per-replica output limit.
    ///   - log: The log sink; the default discards.
    public init(
        socketPath: String,
        maxFrameBytes: Int = Frame.defaultMaxPayloadBytes,
        maxQueuedBytesPerReplica: Int = 64 << 20,
        log: @escaping @Sendable (String) -> Void = { _ in }
    ) {
        self.socketPath = socketPath
        self.maxFrameBytes = Self.clampFrameLimit(maxFrameBytes)
        self.maxQueuedBytesPerReplica = maxQueuedBytesPerReplica
        self.log = log
    }

    private static func clampFrameLimit(_ value: Int) -> Int { min(max(value, 1), maxFrameBytesCeiling) }
}
