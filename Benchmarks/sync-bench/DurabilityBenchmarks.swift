import BuiltinApps
import Foundation
import StoreHub
import StoreReplica
import SyncCore
import SyncPOSIX
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A raw client: `hello` (optionally resuming), then counts `action` frames as they arrive.
final class RawBenchClient {
    let fd: Int32
    private var decoder = FrameDecoder(maxPayloadBytes: 1 << 30)
    private var buffer = [UInt8](repeating: 0, count: 1 << 20)
    /// The welcome, as JSON.
    private(set) var welcome: JSON = .null
    /// `action` frames read along with the welcome, not yet counted by ``readActions(_:)``.
    private var early = 0
    private static let actionPrefix = Array(#"{"type":"action""#.utf8)

    init(socket: String, resume: JSON? = nil) throws {
        fd = try UnixSocket.connect(to: socket)
        var hello: [JSONKey: JSON] = ["type": "hello", "protocol": 1, "app": "json"]
        if let resume { hello["resume"] = resume }
        try UnixSocket.writeAll(fd, Frame.encode(JSON.object(hello)))
        while welcome == .null {
            try readSome { frame in
                if frame.starts(with: Self.actionPrefix) {
                    early += 1
                } else if let json = try? JSON(parsing: frame), json["type"] == "welcome" {
                    welcome = json
                }
            }
        }
    }

    deinit { UnixSocket.close(fd) }

    /// Reads once and hands every complete frame to `body`.
    func readSome(_ body: ([UInt8]) -> Void) throws {
        let n = buffer.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress, $0.count) }
        guard n > 0 else { throw SystemError("the hub closed the benchmark's connection") }
        buffer.withUnsafeBytes { decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        while let frame = try decoder.nextFrame() { body(frame) }
    }

    /// Counts `action` frames until `count` have arrived.
    func readActions(_ count: Int) throws {
        var seen = early
        early = 0
        while seen < count {
            try readSome { frame in if frame.starts(with: Self.actionPrefix) { seen += 1 } }
        }
    }

    /// Dispatches `count` sets of `/n`, pipelined (at most `window` outstanding), and waits for all.
    func dispatchPipelined(_ count: Int, window: Int = 4_096) throws {
        let prefix = Self.actionPrefix
        var sent = 0, seen = early
        early = 0
        while seen < count {
            if sent < count, sent - seen < window {
                var chunk: [UInt8] = []
                for _ in 0..<min(256, count - sent) {
                    sent += 1
                    chunk += try Frame.encode(ClientMessage.dispatch(id: .number(sent),
                                                                     action: ["type": "set", "path": "/n", "value": JSON(sent)]))
                }
                try UnixSocket.writeAll(fd, chunk)
                continue
            }
            try readSome { frame in if frame.starts(with: prefix) { seen += 1 } }
        }
    }
}

/// A new replica attaching to a state of about `stateBytes`: from connect to an applied,
/// digest-checked welcome.
func hydrate(stateBytes: Int) throws -> Result {
    let hub = try BenchHub()
    defer { hub.stop() }
    let writer = try RawBenchClient(socket: hub.socket)
    let piece = 64 << 10
    var chunk: [UInt8] = []
    for index in 0..<max(1, stateBytes / piece) {
        chunk += try Frame.encode(ClientMessage.dispatch(id: .number(index), action: [
            "type": "set", "path": .string("/k\(index)"), "value": .string(String(repeating: "x", count: piece - 16)),
        ]))
    }
    try UnixSocket.writeAll(writer.fd, chunk)
    try writer.readActions(max(1, stateBytes / piece))
    var samples: [Double] = []
    for _ in 0..<7 {
        let start = ContinuousClock.now
        let replica = try Replica.attach(app: JSONApp(), socketPath: hub.socket, reconnect: .never)
        samples.append(nanoseconds(ContinuousClock.now - start) / 1e6)
        replica.close()
    }
    return Result(scenario: "hydrate", params: [("state_bytes", JSON(stateBytes))], metrics: [("ms", median(samples))])
}

/// A replica that missed `actions` actions resuming: from `hello` with `resume` to the last
/// missed action read.
func resume(actions: Int) throws -> Result {
    let hub = try BenchHub()
    defer { hub.stop() }
    let history = try RawBenchClient(socket: hub.socket).welcome["history"] ?? .null
    let writer = try RawBenchClient(socket: hub.socket)
    try writer.dispatchPipelined(actions)
    var samples: [Double] = []
    for _ in 0..<7 {
        let start = ContinuousClock.now
        let client = try RawBenchClient(socket: hub.socket, resume: ["history": history, "seq": 0])
        guard client.welcome["resumed"] == true else { throw SystemError("the hub did not resume: \(client.welcome)") }
        try client.readActions(actions)
        samples.append(nanoseconds(ContinuousClock.now - start) / 1e6)
    }
    return Result(scenario: "resume", params: [("actions", JSON(actions))], metrics: [("ms", median(samples))])
}

/// `sync-bench --hub-child DIR --socket S --count N`: a hub on a data directory (`--fsync
/// never`, a snapshot every N actions, none for 0), to be killed with SIGKILL by the recovery
/// benchmark; with DIR empty, in memory (for the memory benchmark).
func runHubChild(socket: String, dataDirectory: String, snapshotEvery: Int) -> Never {
    var configuration = HubConfiguration(socketPath: socket)
    if !dataDirectory.isEmpty {
        configuration.dataDirectory = dataDirectory
        configuration.fsync = .never
        configuration.snapshotEvery = snapshotEvery > 0 ? snapshotEvery : Int.max / 2
    }
    do {
        try Hub(app: JSONApp(), configuration: configuration).run()
    } catch {
        Console.error("sync-bench hub child: \(error.message)")
        exit(1)
    }
    exit(0)
}

/// A hub killed with SIGKILL after `actions` actions and started again: how long recovery
/// takes until it could serve. With `snapshotEvery` 0 there is no snapshot and the whole
/// journal is replayed; otherwise the newest snapshot is loaded and the journal after it replayed.
func recovery(actions: Int, snapshotEvery: Int) throws -> Result {
    let child = try HubChildProcess(snapshotEvery: snapshotEvery)
    defer { child.stop() }
    try RawBenchClient(socket: child.socket).dispatchPipelined(actions)
    child.crash()
    let socket = child.socket, data = child.dataDirectory ?? ""
    var configuration = HubConfiguration(socketPath: socket)
    configuration.dataDirectory = data
    configuration.fsync = .never
    let start = ContinuousClock.now
    let hub = try Hub(app: JSONApp(), configuration: configuration)
    let seconds = nanoseconds(ContinuousClock.now - start) / 1e9
    // Release the directory's lock and socket the way a hub does: run, then stop.
    let finished = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
        try? hub.run()
        finished.signal()
    }
    hub.stop()
    finished.wait()
    return Result(scenario: "recovery", params: [("actions", JSON(actions)), ("snapshot_every", JSON(snapshotEvery))],
                  metrics: [("s", seconds)])
}
