import Foundation
import SyncCore
import SyncPOSIX
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The envelope every baseline moves: an `action` frame exactly as the hub sends it.
func benchEnvelope() throws -> [UInt8] {
    var frame: [UInt8] = []
    try Frame.appendActionEnvelope(seq: 123_456, origin: 3, id: .number(4242),
                                   action: ["type": "increment", "path": "/counters/3", "by": 1], to: &frame)
    return frame
}

/// Waits until `fd` is writable (or 1 s passed).
private func waitWritable(_ fd: Int32) {
    _ = UnixSocket.waitUntil(fd, writable: true, timeoutMilliseconds: 1000)
}

/// Subscriber processes of the baselines (this executable in `--raw-sub` or `--redis-sub`
/// mode): each prints `ready`, counts what arrives and prints `done` after `count`.
final class SubscriberGroup {
    let workers: [WorkerProcess]

    init(mode: String, socket: String, count: Int, processes: Int) throws {
        workers = try (0..<processes).map { _ in try WorkerProcess(arguments: [mode, "--socket", socket, "--count", "\(count)"]) }
    }

    func waitReady() throws {
        for worker in workers where worker.readLine() != "ready" { throw SystemError("a subscriber failed to start") }
    }

    func waitDone() throws {
        for worker in workers where worker.readLine() != "done" { throw SystemError("a subscriber failed") }
    }

    func stop() { workers.forEach { $0.kill() } }
}

/// `raw.throughput`: the transport's limit. A minimal hub (no decoding, no reducer, no
/// journal) writes the same already-encoded envelopes, 64 per write, to `replicas`
/// subscriber processes over the same kind of socket; deliveries per second per subscriber.
func rawThroughput(replicas: Int, frames: Int) throws -> Result {
    let directory = NSTemporaryDirectory() + "sync-bench-raw-\(getpid())"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let listener = try UnixSocket.listen(at: directory + "/raw.sock")
    defer { _ = listener.close() }
    let group = try SubscriberGroup(mode: "--raw-sub", socket: directory + "/raw.sock", count: frames, processes: replicas)
    defer { group.stop() }
    var subscribers: [Int32] = []
    defer { subscribers.forEach { UnixSocket.close($0) } }
    let deadline = ContinuousClock.now + .seconds(30)
    while subscribers.count < replicas {
        guard ContinuousClock.now < deadline else { throw SystemError("raw subscribers did not connect") }
        if let fd = try UnixSocket.accept(listener.fd) { subscribers.append(fd) } else { usleep(500) }
    }
    try group.waitReady()
    let envelope = try benchEnvelope()
    var batch: [UInt8] = []
    for _ in 0..<64 { batch.append(contentsOf: envelope) }
    let start = ContinuousClock.now
    // One position per subscriber into an endless repetition of `batch`, like the hub's backlog.
    let total = frames * envelope.count
    var written = [Int](repeating: 0, count: replicas)
    var pending = replicas
    while pending > 0 {
        pending = 0
        var blocked = true
        for (index, fd) in subscribers.enumerated() where written[index] < total {
            let offset = written[index] % batch.count
            let length = min(batch.count - offset, total - written[index])
            let result = batch.withUnsafeBytes { UnixSocket.write(fd, UnsafeRawBufferPointer(rebasing: $0[offset..<(offset + length)])) }
            if case .bytes(let n) = result {
                written[index] += n
                blocked = false
            } else if case .failed = result {
                throw SystemError("a raw subscriber went away")
            }
            if written[index] < total { pending += 1 }
        }
        if blocked, let first = subscribers.indices.first(where: { written[$0] < total }) { waitWritable(subscribers[first]) }
    }
    try group.waitDone()
    let elapsed = nanoseconds(ContinuousClock.now - start)
    return Result(scenario: "raw.throughput", params: [("replicas", JSON(replicas)), ("frame_bytes", JSON(envelope.count))],
                  metrics: [("actions_per_s", Double(frames) / elapsed * 1e9)])
}

/// `sync-bench --raw-sub --socket S --count N`: connects, counts `N` frames, prints `done`.
func runRawSubscriber(socket: String, count: Int) -> Never {
    do {
        let fd = try UnixSocket.connect(to: socket)
        Console.out("ready")
        var decoder = FrameDecoder()
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        var seen = 0
        while seen < count {
            let n = buffer.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { throw SystemError("the raw hub closed the connection") }
            buffer.withUnsafeBytes { decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            while try decoder.decodeNext({ _ in () }) != nil { seen += 1 }
        }
        Console.out("done")
    } catch {
        Console.error("sync-bench raw subscriber: \(error)")
        exit(1)
    }
    exit(0)
}

/// `redis.throughput`: `redis-server` on a Unix socket of its own; one publisher pipelining
/// PUBLISH of the same envelope bytes (64 outstanding) to `replicas` subscriber processes
/// that count deliveries. `nil` when `redis-server` is not on PATH.
func redisThroughput(replicas: Int, messages: Int) throws -> Result? {
    guard let server = findOnPath("redis-server") else { return nil }
    let directory = NSTemporaryDirectory() + "sync-bench-redis-\(getpid())"
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let socket = directory + "/redis.sock"
    let redis = Process()
    redis.executableURL = URL(fileURLWithPath: server)
    redis.arguments = ["--port", "0", "--unixsocket", socket, "--save", "", "--appendonly", "no",
                       "--dir", directory, "--client-output-buffer-limit", "pubsub", "0", "0", "0"]
    redis.standardOutput = FileHandle.nullDevice
    redis.standardError = FileHandle.nullDevice
    try redis.run()
    defer { redis.terminate(); redis.waitUntilExit() }
    let deadline = ContinuousClock.now + .seconds(10)
    var publisher: Int32 = -1
    while publisher < 0 {
        guard ContinuousClock.now < deadline, redis.isRunning else { throw SystemError("redis-server did not start") }
        if let fd = try? UnixSocket.connect(to: socket) { publisher = fd } else { usleep(2_000) }
    }
    defer { UnixSocket.close(publisher) }
    let group = try SubscriberGroup(mode: "--redis-sub", socket: socket, count: messages, processes: replicas)
    defer { group.stop() }
    try group.waitReady()
    // Every subscriber is subscribed once PUBSUB NUMSUB says so.
    while !String(decoding: try redisCommand(publisher, ["PUBSUB", "NUMSUB", "bench"]), as: UTF8.self).hasSuffix(":\(replicas)\r\n") {
        guard ContinuousClock.now < deadline else { throw SystemError("redis subscribers did not subscribe") }
        usleep(2_000)
    }
    let envelope = try benchEnvelope()
    let command = resp(["PUBLISH", "bench"].map { Array($0.utf8) } + [envelope])
    var window: [UInt8] = []
    for _ in 0..<64 { window.append(contentsOf: command) }
    let start = ContinuousClock.now
    var sent = 0
    var replies = RESPReader()
    var buffer = [UInt8](repeating: 0, count: 64 << 10)
    while sent < messages {
        let now = min(64, messages - sent)
        try UnixSocket.writeAll(publisher, Array(window[0..<(now * command.count)]))
        sent += now
        var answered = 0
        while answered < now {
            let n = buffer.withUnsafeMutableBytes { Foundation.read(publisher, $0.baseAddress, $0.count) }
            guard n > 0 else { throw SystemError("redis-server closed the publisher's connection") }
            answered += buffer.withUnsafeBytes { replies.count(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        }
    }
    try group.waitDone()
    let elapsed = nanoseconds(ContinuousClock.now - start)
    return Result(scenario: "redis.throughput", params: [("replicas", JSON(replicas)), ("pipeline", 64),
                                                         ("message_bytes", JSON(envelope.count))],
                  metrics: [("actions_per_s", Double(messages) / elapsed * 1e9)])
}

/// `sync-bench --redis-sub --socket S --count N`: subscribes to `bench`, counts `N` messages,
/// prints `done`.
func runRedisSubscriber(socket: String, count: Int) -> Never {
    do {
        let fd = try UnixSocket.connect(to: socket)
        try UnixSocket.writeAll(fd, resp([Array("SUBSCRIBE".utf8), Array("bench".utf8)]))
        Console.out("ready")
        var reader = RESPReader()
        var buffer = [UInt8](repeating: 0, count: 256 << 10)
        // The first reply is the subscription's confirmation.
        var seen = -1
        while seen < count {
            let n = buffer.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { throw SystemError("redis-server closed the subscriber's connection") }
            seen += buffer.withUnsafeBytes { reader.count(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
        }
        Console.out("done")
    } catch {
        Console.error("sync-bench redis subscriber: \(error)")
        exit(1)
    }
    exit(0)
}

/// A RESP command: an array of bulk strings.
func resp(_ parts: [[UInt8]]) -> [UInt8] {
    var bytes = Array("*\(parts.count)\r\n".utf8)
    for part in parts {
        bytes += Array("$\(part.count)\r\n".utf8)
        bytes += part
        bytes += [13, 10]
    }
    return bytes
}

/// Sends one command and returns its raw reply (one read; replies here are small).
private func redisCommand(_ fd: Int32, _ parts: [String]) throws -> [UInt8] {
    try UnixSocket.writeAll(fd, resp(parts.map { Array($0.utf8) }))
    var buffer = [UInt8](repeating: 0, count: 4096)
    let n = buffer.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress, $0.count) }
    guard n > 0 else { throw SystemError("redis-server closed the connection") }
    return Array(buffer[0..<n])
}

/// Counts complete top-level RESP replies in a byte stream (integers, simple strings,
/// errors, bulk strings and arrays of those), carrying partial ones across reads.
struct RESPReader {
    private var pending: [UInt8] = []

    /// Adds bytes and returns how many top-level replies they completed.
    mutating func count(_ bytes: UnsafeRawBufferPointer) -> Int {
        pending.append(contentsOf: bytes)
        var index = 0, complete = 0
        while let next = Self.skipValue(pending, from: index) {
            index = next
            complete += 1
        }
        pending.removeFirst(index)
        return complete
    }

    /// The index just past the value starting at `start`, or `nil` if it is incomplete.
    private static func skipValue(_ bytes: [UInt8], from start: Int) -> Int? {
        guard start < bytes.count, let lineEnd = lineEnd(bytes, from: start + 1) else { return nil }
        var number = 0, negative = false
        for byte in bytes[(start + 1)..<lineEnd] {
            if byte == UInt8(ascii: "-") { negative = true } else { number = number &* 10 &+ Int(byte &- 48) }
        }
        if negative { number = -number }
        switch bytes[start] {
        case UInt8(ascii: "$"):
            let end = lineEnd + 2 + max(0, number) + (number >= 0 ? 2 : 0)
            return end <= bytes.count ? end : nil
        case UInt8(ascii: "*"), UInt8(ascii: ">"):
            var index = lineEnd + 2
            for _ in 0..<max(0, number) {
                guard let next = skipValue(bytes, from: index) else { return nil }
                index = next
            }
            return index
        default:
            return lineEnd + 2
        }
    }

    private static func lineEnd(_ bytes: [UInt8], from start: Int) -> Int? {
        var index = start
        while index + 1 < bytes.count {
            if bytes[index] == 13, bytes[index + 1] == 10 { return index }
            index += 1
        }
        return nil
    }
}

/// The full path of an executable on `PATH`, or `nil`.
func findOnPath(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
    for directory in path.split(separator: ":") {
        let candidate = "\(directory)/\(name)"
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
    }
    for directory in ["/usr/sbin", "/usr/local/sbin"] where FileManager.default.isExecutableFile(atPath: "\(directory)/\(name)") {
        return "\(directory)/\(name)"
    }
    return nil
}
