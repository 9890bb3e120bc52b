import BuiltinApps
import Foundation
import StoreHub
import StoreReplica
import SyncCore
import SyncPOSIX
import Synchronization

/// A hub on a thread of this process, on a fresh temporary socket.
final class BenchHub: Sendable {
    let socket: String
    let directory: String
    private let stopHub: @Sendable () -> Void
    private let finished = Atomic<Bool>(false)

    /// Starts a hub of the json app; with `fsync`, on a data directory of its own with that mode.
    convenience init(fsync: FsyncMode? = nil, configure: (inout HubConfiguration) -> Void = { _ in }) throws {
        try self.init(app: JSONApp(), fsync: fsync, configure: configure)
    }

    /// Starts a hub of `app`; with `fsync`, on a data directory of its own with that mode.
    init<App: SyncApp>(app: App, fsync: FsyncMode? = nil, configure: (inout HubConfiguration) -> Void = { _ in }) throws {
        directory = NSTemporaryDirectory() + "sync-bench-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var configuration = HubConfiguration(socketPath: directory + "/hub.sock")
        if let fsync {
            configuration.dataDirectory = directory + "/data"
            configuration.fsync = fsync
        }
        configure(&configuration)
        let hub = try Hub(app: app, configuration: configuration)
        socket = configuration.socketPath
        stopHub = { hub.stop() }
        Thread.detachNewThread { [self] in
            try? hub.run()
            finished.store(true, ordering: .releasing)
        }
    }

    func stop() {
        stopHub()
        while !finished.load(ordering: .acquiring) { usleep(1000) }
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// A worker replica process (this executable in `--worker` mode).
final class WorkerProcess {
    let process = Process()
    let input = Pipe()
    let output = Pipe()
    private var buffered = Data()

    convenience init(socket: String, count: Int, total: Int, window: Int = 0, app: String = "json") throws {
        try self.init(arguments: ["--worker", "--socket", socket, "--count", "\(count)", "--total", "\(total)", "--window", "\(window)",
                                  "--app", app])
    }

    /// Starts this executable with `arguments`.
    init(arguments: [String]) throws {
        process.executableURL = URL(fileURLWithPath: try selfExecutable())
        process.arguments = arguments
        process.standardInput = input
        process.standardOutput = output
        try process.run()
    }

    /// Blocks until the worker prints a line.
    func readLine() -> String? {
        while true {
            if let newline = buffered.firstIndex(of: 0x0A) {
                let line = String(decoding: buffered[buffered.startIndex..<newline], as: UTF8.self)
                buffered.removeSubrange(buffered.startIndex...newline)
                return line
            }
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { return nil }
            buffered.append(chunk)
        }
    }

    func send(_ line: String) { try? input.fileHandleForWriting.write(contentsOf: Data((line + "\n").utf8)) }

    func finish() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
    }

    func kill() { if process.isRunning { process.terminate() } }
}

func selfExecutable() throws -> String {
    if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") { return path }
    if let path = Bundle.main.executablePath { return path }
    throw SystemError("cannot find this executable to start workers")
}

/// The window of outstanding dispatches each throughput worker keeps (as Redis's publisher
/// keeps 64 PUBLISHes in flight).
let dispatchWindow = 64

/// Hub plus `replicas` worker processes on the json app: every worker dispatches its share
/// with at most ``dispatchWindow`` of its own outstanding, and the clock stops when every
/// worker has applied every action.
func hubThroughput(replicas: Int, actions: Int, fsync: FsyncMode? = nil, stalled: Int = 0, app: String = "json",
                   inspector: Bool = false) throws -> Result {
    let hub = app == "codable" ? try BenchHub(app: CodableCounterApp(), fsync: fsync) : try BenchHub(fsync: fsync)
    // Attached replicas that never read: the hub must not slow the others down for them.
    let stalledClients = try (0..<stalled).map { _ in try RawBenchClient(socket: hub.socket) }
    defer { withExtendedLifetime(stalledClients) {} }
    defer { hub.stop() }
    let share = actions / replicas
    let total = share * replicas
    let workers = try (0..<replicas).map { _ in
        try WorkerProcess(socket: hub.socket, count: share, total: total, window: dispatchWindow, app: app)
    }
    defer { workers.forEach { $0.kill() } }
    for worker in workers {
        guard worker.readLine()?.hasPrefix("ready") == true else { throw SystemError("a worker failed to attach") }
    }
    // With `inspector`: `replica-cli inspect` in a process of its own, and a page (here, a
    // thread reading its event stream as a browser does) receiving every action.
    let page = inspector ? try InspectorPageReader(socket: hub.socket) : nil
    defer { page?.stop() }
    var metrics = try timedRun(workers, actions: total, inspector: page?.pid)
    if let page { metrics.append(("page_bytes", Double(page.bytesRead))) }
    var params: [(String, JSON)] = [("replicas", JSON(replicas)), ("app", .string(app == "codable" ? "codable-counter" : "json")),
                                    ("fsync", .string(fsync?.rawValue ?? "memory")),
                                    ("stalled", JSON(stalled)), ("window", JSON(dispatchWindow))]
    if inspector { params.append(("inspector", 1)) }
    return Result(scenario: "hub.throughput", params: params, metrics: metrics)
}

/// Dispatch→ack and dispatch→applied-by-every-replica round trips of one replica (one
/// dispatch outstanding) while `replicas - 1` worker processes are attached, either idle or
/// together dispatching `loadRate` actions per second. With `onReader`, the dispatching task
/// prefers the replica's ``ReplicaExecutor`` (it goes on on the reader thread that applied
/// its ack); without, the global pool resumes it.
func hubLatency(replicas: Int, samples: Int, loadRate: Double, label: String,
                log: SharedLogConfiguration? = nil, onReader: Bool = false) async throws -> Result {
    let hub = try BenchHub { $0.sharedLog = log }
    defer { hub.stop() }
    let workers = try (1..<replicas).map { _ in try WorkerProcess(socket: hub.socket, count: 0, total: 0) }
    defer { workers.forEach { $0.kill() } }
    for worker in workers {
        guard worker.readLine()?.hasPrefix("ready") == true else { throw SystemError("a worker failed to attach") }
    }
    let replica = try Replica.attach(app: JSONApp(), socketPath: hub.socket, name: "latency")
    defer { replica.close() }
    let perWorker = workers.isEmpty ? 0 : loadRate / Double(workers.count)
    for worker in workers { worker.send("load \(perWorker) \(replica.replicaID)") }
    let action = JSONEdit.increment(try JSONPointer("/n"), by: 1)
    var acks: [Double] = []
    var sentAt: [UInt64: UInt64] = [:]
    var ackedAt: [UInt64: UInt64] = [:]
    acks.reserveCapacity(samples)
    let warmup = samples / 10
    try await withTaskExecutorPreference(onReader ? replica.executor : nil) {
        for index in 0..<(samples + warmup) {
            let start = monotonicNanoseconds()
            let seq = try await replica.dispatch(action)
            let end = monotonicNanoseconds()
            guard index >= warmup else { continue }
            acks.append(Double(end - start) / 1000)
            sentAt[seq] = start
            ackedAt[seq] = end
        }
    }
    // Applied everywhere: the latest of the ack here and every worker's apply of that seq.
    var latest = ackedAt
    for worker in workers {
        worker.send("stop")
        while let line = worker.readLine(), line != "end" {
            let parts = line.split(separator: " ")
            guard parts.count == 3, let seq = UInt64(parts[1]), let at = UInt64(parts[2]), let current = latest[seq] else { continue }
            latest[seq] = max(current, at)
        }
    }
    let applied = latest.compactMap { seq, at in sentAt[seq].map { Double(at &- $0) / 1000 } }
    return Result(scenario: "hub.latency", params: [("replicas", JSON(replicas)), ("load", .string(label)),
                                                    ("load_actions_per_s", JSON(Int(loadRate))),
                                                    ("log", log == nil ? "memory" : "nats"),
                                                    ("executor", onReader ? "replica" : "global")],
                  metrics: [("ack_p50_us", percentile(acks, 0.5)), ("ack_p99_us", percentile(acks, 0.99)),
                            ("ack_p999_us", percentile(acks, 0.999)),
                            ("applied_p50_us", percentile(applied, 0.5)), ("applied_p99_us", percentile(applied, 0.99))])
}

/// The in-run baseline for the hub: length-prefixed frames of an action envelope's size
/// pushed through a Unix socket pair and counted on the other side (no JSON, no store).
func socketBaseline(frames: Int) throws -> Result {
    let (writer, reader) = try UnixSocket.makeSocketPair()
    defer { UnixSocket.close(writer); UnixSocket.close(reader) }
    var envelope: [UInt8] = []
    try Frame.appendActionEnvelope(seq: 123_456, origin: 3, id: .number(4242),
                               action: ["type": "increment", "path": "/counters/3", "by": 1], to: &envelope)
    let frameSize = envelope.count
    let done = Atomic<Int>(0)
    Thread.detachNewThread {
        var decoder = FrameDecoder()
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        var count = 0
        while count < frames {
            let n = buffer.withUnsafeMutableBytes { Foundation.read(reader, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            buffer.withUnsafeBytes { decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            while let frame = try? decoder.nextFrame(), frame.count > 0 { count += 1 }
        }
        done.store(count, ordering: .releasing)
    }
    var batch: [UInt8] = []
    for _ in 0..<64 { batch.append(contentsOf: envelope) }
    let start = ContinuousClock.now
    var sent = 0
    while sent < frames {
        try UnixSocket.writeAll(writer, batch)
        sent += 64
    }
    while done.load(ordering: .acquiring) == 0 { usleep(100) }
    let elapsed = nanoseconds(ContinuousClock.now - start)
    return Result(scenario: "baseline.socket", params: [("frame_bytes", JSON(frameSize))],
                  metrics: [("frames_per_s", Double(done.load(ordering: .acquiring)) / elapsed * 1e9)])
}

/// Starts the attached workers together, waits until each has seen every action, checks that
/// they agree, and measures: actions per second, and the CPU per action of this process (the
/// hub's threads; its main thread only waits for the workers) and of every worker's threads,
/// from the scheduler's counters, over the timed part only.
///
/// - Parameters:
///   - workers: Workers that said `ready`.
///   - actions: How many actions they dispatch in all.
/// - Returns: The metrics.
func timedRun(_ workers: [WorkerProcess], actions: Int, inspector: Int32? = nil) throws -> [(String, Double)] {
    let hubBefore = CPUTime.of(getpid())
    let workersBefore = workers.map { CPUTime.of($0.process.processIdentifier) }
    let inspectorBefore = inspector.map { CPUTime.of($0) }
    let start = ContinuousClock.now
    for worker in workers { worker.send("go") }
    var digests: Set<String> = []
    for worker in workers {
        guard let line = worker.readLine(), line.hasPrefix("done") else { throw SystemError("a worker failed") }
        digests.insert(String(line.split(separator: " ").last ?? ""))
    }
    let elapsed = nanoseconds(ContinuousClock.now - start)
    let hubCPU = CPUTime.of(getpid()).since(hubBefore)
    let workerCPU = zip(workers, workersBefore).map { CPUTime.of($0.process.processIdentifier).since($1) }
    let inspectorCPU = inspector.flatMap { pid in inspectorBefore.map { CPUTime.of(pid).since($0) } }
    for worker in workers { worker.finish() }
    guard digests.count == 1 else { throw SystemError("replicas disagree: \(digests)") }
    // The inspector's process, when there is one (the page's reading thread is the bench's, in the hub's figure).
    let inspectorMetrics = inspectorCPU.map { cpu in
        [("cpu_us_per_action_inspector", (Double(cpu.total) / 1000 / Double(max(1, actions)) * 100).rounded() / 100)]
    } ?? []
    return [("actions_per_s", Double(actions) / elapsed * 1e9), ("actions", Double(actions))]
        + cpuMetrics(hub: hubCPU, workers: workerCPU, actions: actions) + inspectorMetrics
}

/// CPU microseconds per action: all processes, the hub, and the replicas by role (the
/// dispatching main thread, the reader, the writer, the rest), summed over every replica.
func cpuMetrics(hub: CPUTime, workers: [CPUTime], actions: Int) -> [(String, Double)] {
    guard hub.total > 0, actions > 0 else { return [] }
    var replicas = CPUTime()
    for worker in workers { for (role, value) in worker.byRole { replicas.byRole[role, default: 0] += value } }
    func perAction(_ nanoseconds: UInt64) -> Double { (Double(nanoseconds) / 1000 / Double(actions) * 100).rounded() / 100 }
    let reader = replicas.byRole["storesync-read"] ?? 0
    let writer = replicas.byRole["storesync-write"] ?? 0
    let dispatcher = replicas.byRole["main"] ?? 0
    return [("cpu_us_per_action", perAction(hub.total + replicas.total)), ("cpu_us_per_action_hub", perAction(hub.total)),
            ("cpu_us_per_action_replica_dispatcher", perAction(dispatcher)), ("cpu_us_per_action_replica_reader", perAction(reader)),
            ("cpu_us_per_action_replica_writer", perAction(writer)),
            ("cpu_us_per_action_replica_other", perAction(replicas.total - reader - writer - dispatcher))]
}

/// `replica-cli inspect` (this executable with `--inspector`) and one page reading its live
/// stream of actions, as a browser's `EventSource` does.
final class InspectorPageReader: @unchecked Sendable {
    // @unchecked: `fd` and `process` are set once in `init`; `read` and `stopping` are atomics;
    // the reading thread touches nothing else.
    private let process = Process()
    private let fd: Int32
    private let read = Atomic<Int>(0)
    private let stopping = Atomic<Bool>(false)
    private let done = Atomic<Bool>(false)

    /// The inspector's process id.
    var pid: Int32 { process.processIdentifier }

    /// The bytes of events the page has read.
    var bytesRead: Int { read.load(ordering: .acquiring) }

    init(socket: String) throws {
        process.executableURL = URL(fileURLWithPath: try selfExecutable())
        process.arguments = ["--inspector", "--socket", socket]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        // Its first line is the URL: inspector: http://127.0.0.1:PORT/?token=TOKEN
        var line = Data()
        while !line.contains(0x0A) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { throw SystemError("the inspector ended before printing its URL") }
            line.append(chunk)
        }
        let text = String(decoding: line.prefix { $0 != 0x0A }, as: UTF8.self)
        guard let components = URLComponents(string: String(text.dropFirst("inspector: ".count))), let port = components.port,
              let token = components.queryItems?.first(where: { $0.name == "token" })?.value else {
            throw SystemError("no URL from the inspector: \(text)")
        }
        fd = try TCPSocket.connect(host: "127.0.0.1", port: port, timeoutMilliseconds: 5_000)
        try UnixSocket.writeAll(fd, Array("GET /api/events?token=\(token) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n".utf8))
        Thread.detachNewThread { [self] in
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while !stopping.load(ordering: .relaxed) {
                _ = UnixSocket.waitUntil(fd, timeoutMilliseconds: 100)
                switch buffer.withUnsafeMutableBytes({ UnixSocket.read(fd, into: $0) }) {
                case .bytes(let count): read.add(count, ordering: .releasing)
                case .wouldBlock: continue
                case .endOfFile, .failed: stopping.store(true, ordering: .relaxed)
                }
            }
            done.store(true, ordering: .releasing)
        }
    }

    func stop() {
        stopping.store(true, ordering: .relaxed)
        while !done.load(ordering: .acquiring) { usleep(1_000) }
        UnixSocket.close(fd)
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
    }
}
