import BuiltinApps
import Foundation
import NATSClient
import StoreHub
import SyncCore
import SyncPOSIX
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A `nats-server -js` of the bench's own, on a free loopback port with a temporary store; or
/// three of them, a JetStream cluster on loopback (each with its own client and cluster port
/// and store), for streams with three replicas.
final class BenchNATS {
    let processes: [Process]
    let ports: [Int]
    let directory: String
    /// The first server's client port.
    var port: Int { ports[0] }
    /// The stream replicas this bench's streams get (1, or 3 on a cluster).
    var streamReplicas: Int { ports.count }

    /// The server the bench starts, or why there is none: `$STORESYNC_NATS_SERVER`, else the
    /// newest release `Scripts/install-nats-server` put in `.build/nats-server-VERSION/`, else
    /// the first `nats-server` on `PATH`; refused when older than 2.10.23, as hubs refuse it.
    static let server: (path: String?, skipped: String) = {
        let install = "run Scripts/install-nats-server (sync-bench then finds the pinned release in .build by itself), or set STORESYNC_NATS_SERVER"
        let environment = ProcessInfo.processInfo.environment
        var candidate = environment["STORESYNC_NATS_SERVER"].flatMap { $0.isEmpty ? nil : $0 }
        if candidate == nil {
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: ".build")) ?? []
            let pinned = entries.compactMap { name -> (version: NATSServerVersion, path: String)? in
                guard name.hasPrefix("nats-server-"), let version = NATSServerVersion(String(name.dropFirst("nats-server-".count))) else { return nil }
                let path = FileManager.default.currentDirectoryPath + "/.build/\(name)/bin/nats-server"
                return FileManager.default.isExecutableFile(atPath: path) ? (version, path) : nil
            }
            candidate = pinned.max { $0.version < $1.version }?.path ?? findOnPath("nats-server")
        }
        guard let path = candidate else { return (nil, "no nats-server; \(install)") }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = ["--version"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        guard (try? process.run()) != nil else { return (nil, "\(path) does not run; \(install)") }
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let oldest = JetStreamLog.oldestSupportedServer
        guard let version = NATSServerVersion(announced: text), version >= oldest else {
            return (nil, "\(path) is not nats-server \(oldest) or later (it says \(text.trimmingCharacters(in: .whitespacesAndNewlines).prefix(60))); \(install)")
        }
        return (path, "")
    }()

    /// Starts one server (`servers: 1`) or a cluster of `servers`, or returns `nil` when
    /// `nats-server` is not installed.
    init?(servers: Int = 1) throws {
        guard let path = Self.server.path else { return nil }
        let clients = try (0..<servers).map { _ in try Self.freePort() }
        let routes = try (0..<servers).map { _ in try Self.freePort() }
        ports = clients
        directory = NSTemporaryDirectory() + "sync-bench-nats-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        var started: [Process] = []
        for index in 0..<servers {
            let store = directory + "/n\(index)"
            try FileManager.default.createDirectory(atPath: store, withIntermediateDirectories: true)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: path)
            var arguments = ["-js", "-a", "127.0.0.1", "-p", String(clients[index]), "-sd", store, "-n", "bench-\(index)"]
            if servers > 1 {
                arguments += ["--cluster_name", "sync-bench", "--cluster", "nats://127.0.0.1:\(routes[index])",
                              "--routes", routes.map { "nats://127.0.0.1:\($0)" }.joined(separator: ",")]
            }
            process.arguments = arguments
            process.standardError = FileHandle.nullDevice
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            started.append(process)
        }
        processes = started
        let deadline = ContinuousClock.now + .seconds(30)
        for port in clients {
            while true {
                if let fd = try? TCPSocket.connect(host: "127.0.0.1", port: port, timeoutMilliseconds: 200) {
                    UnixSocket.close(fd)
                    break
                }
                guard ContinuousClock.now < deadline else {
                    stop()
                    throw SystemError("nats-server did not start on port \(port)")
                }
                usleep(20_000)
            }
        }
        if servers > 1 { try waitForJetStream(deadline: deadline) }
    }

    /// Waits until the cluster's JetStream answers (it elects a meta leader first).
    private func waitForJetStream(deadline: ContinuousClock.Instant) throws {
        while true {
            if let connection = try? NATSConnection.connect(servers: ["127.0.0.1:\(port)"], name: "sync-bench") {
                defer { connection.close() }
                if (try? connection.jetStream("INFO", nil)) != nil { return }
            }
            guard ContinuousClock.now < deadline else {
                stop()
                throw SystemError("the nats-server cluster did not elect a JetStream leader within 30 s")
            }
            usleep(100_000)
        }
    }

    /// `nats://127.0.0.1:PORT/STREAM` for a stream of this name.
    func url(stream: String) -> String { "nats://" + ports.map { "127.0.0.1:\($0)" }.joined(separator: ",") + "/" + stream }

    func stop() {
        for process in processes where process.isRunning { process.terminate() }
        for process in processes { process.waitUntilExit() }
        try? FileManager.default.removeItem(atPath: directory)
    }

    private static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard ok else { throw SystemError("no free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// A hub configuration on a stream of `nats`.
func sharedLog(_ nats: BenchNATS, stream: String) throws -> SharedLogConfiguration {
    switch SharedLogConfiguration.parse(nats.url(stream: stream)) {
    case .success(var configuration):
        // Records tagged as in production (HMAC-SHA-256 under a key the hubs share).
        configuration.keys = try LogKeys.parse(Array("sync-bench-log-key-0123456789abcdef0123456789".utf8), source: "the bench").get()
        configuration.replicas = nats.streamReplicas
        return configuration
    case .failure(let error): throw SystemError(error.message)
    }
}

/// `nats.publish`: the in-run baseline of the shared log. Envelope-sized messages published
/// to a JetStream stream by the hub's own NATS client, without expectations or message ids,
/// with at most `window` unacknowledged: acknowledged messages per second.
func natsPublishBaseline(_ nats: BenchNATS, messages: Int, window: Int = dispatchWindow * 4) throws -> Result {
    let connection = try NATSConnection.connect(servers: ["127.0.0.1:\(nats.port)"], name: "sync-bench")
    defer { connection.close() }
    let stream = "BASE\(UInt32.random(in: 0...UInt32.max))"
    _ = try connection.jetStream("STREAM.CREATE." + stream, [
        "name": .string(stream), "subjects": .array([.string("bench.\(stream)")]), "storage": "file",
        "num_replicas": JSON(nats.streamReplicas), "retention": "limits", "discard": "old",
    ])
    let payload = try benchEnvelope()
    let acks = connection.newInbox()
    let sid = connection.subscribe(acks + ".*")
    try connection.flush()
    var sent = 0, acknowledged = 0
    let start = ContinuousClock.now
    while acknowledged < messages {
        while sent < messages, sent - acknowledged < window {
            connection.publish("bench.\(stream)", reply: acks + "." + String(sent), payload: payload)
            sent += 1
        }
        try connection.flush()
        for message in try connection.read(timeoutMilliseconds: 1_000) where message.sid == sid {
            acknowledged += 1
        }
    }
    let elapsed = nanoseconds(ContinuousClock.now - start)
    _ = try? connection.jetStream("STREAM.DELETE." + stream, nil)
    return Result(scenario: "nats.publish", params: [("window", JSON(window)), ("stream_replicas", JSON(nats.streamReplicas))],
                  metrics: [("messages_per_s", Double(messages) / elapsed * 1e9), ("messages", Double(messages))])
}

/// `hub.throughput` with `log: nats`: `hubs` hubs on one stream of `nats`, `replicas` worker
/// processes spread over them (worker i on hub i mod hubs), each dispatching its share with
/// ``dispatchWindow`` of its own outstanding; the clock stops when every worker has applied
/// every action.
func hubThroughputNATS(_ nats: BenchNATS, hubs count: Int, replicas: Int, actions: Int) throws -> Result {
    let stream = "BENCH\(UInt32.random(in: 0...UInt32.max))"
    let configuration = try sharedLog(nats, stream: stream)
    var hubs: [BenchHub] = []
    defer { hubs.forEach { $0.stop() } }
    for _ in 0..<count {
        hubs.append(try BenchHub { $0.sharedLog = configuration })
    }
    let share = actions / replicas
    let total = share * replicas
    let workers = try (0..<replicas).map { index in
        try WorkerProcess(socket: hubs[index % hubs.count].socket, count: share, total: total, window: dispatchWindow)
    }
    defer { workers.forEach { $0.kill() } }
    for worker in workers {
        guard worker.readLine()?.hasPrefix("ready") == true else { throw SystemError("a worker failed to attach") }
    }
    // The CPU figures count the hubs (this process) and the replicas, not nats-server.
    return Result(scenario: "hub.throughput",
                  params: [("replicas", JSON(replicas)), ("app", "json"), ("fsync", "nats"), ("hubs", JSON(count)),
                           ("stream_replicas", JSON(nats.streamReplicas)), ("stalled", 0), ("window", JSON(dispatchWindow))],
                  metrics: try timedRun(workers, actions: total))
}
