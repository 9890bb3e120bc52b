import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import StoreHub
import SyncCore
import SyncPOSIX
import SyncProtocol
import SyncLocks
import Synchronization

/// A temporary directory for one test's socket, and every child process the test starts.
///
/// `shutdown()` (call it in a `defer`) kills every child still running with SIGKILL, by
/// PID, and removes the directory, whether the test passed or failed.
final class Fixture: Sendable {
    let directory: String
    let socket: String
    private let children = Locked<[ChildProcess]>([])

    init() throws {
        // Writing to a child that was killed must fail with EPIPE, not kill the test runner.
        UnixSocket.ignoreBrokenPipes()
        var template = Array("/tmp/sst-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ buffer -> UnsafeMutablePointer<CChar>? in
            guard let base = buffer.baseAddress else { return nil }
            return mkdtemp(base)
        }) else {
            throw HarnessError("mkdtemp failed")
        }
        directory = String(cString: made)
        socket = directory + "/hub.sock"
    }

    /// Starts `hubd` on this fixture's socket and waits until it accepts connections.
    @discardableResult
    func startHub(app: String = "json", extra: [String] = []) async throws -> ChildProcess {
        let hub = try spawn("hubd", ["--socket", socket, "--app", app] + extra)
        try await waitUntil("hubd to listen on \(socket); stderr: \(hub.errorLines)") {
            guard hub.isRunning else { throw HarnessError("hubd exited: \(hub.errorLines)") }
            return (try? HubStatusProbe.status(socket)) != nil
        }
        return hub
    }

    /// A raw client that has said `hello` for the json app and read its `welcome`.
    func attachedRawClient(name: String? = nil) throws -> RawClient {
        let client = try RawClient(path: socket)
        var hello: [JSONKey: JSON] = ["type": "hello", "protocol": 1, "app": "json"]
        if let name { hello["name"] = .string(name) }
        try client.send(.object(hello))
        guard try client.receive()["type"] == "welcome" else { throw HarnessError("expected welcome") }
        return client
    }

    /// Starts an executable with `--socket` pointing at this fixture.
    func spawn(_ executable: String, _ arguments: [String], name: String? = nil,
               environment: [String: String] = [:]) throws -> ChildProcess {
        let child = try ChildProcess(executable, arguments, name: name, environment: environment)
        children.withLock { $0.append(child) }
        return child
    }

    /// Starts `replica-cli` with this fixture's socket.
    func cli(_ arguments: [String], name: String? = nil) throws -> ChildProcess {
        try spawn("replica-cli", ["--socket", socket] + arguments, name: name)
    }

    /// Runs `replica-cli` to completion and returns (status, stdout lines, stderr lines).
    func runCLI(_ arguments: [String]) async throws -> (status: Int32, out: [String], err: [String]) {
        let child = try cli(arguments)
        child.closeInput()
        let status = try await child.waitForExit()
        return (status, child.lines, child.errorLines)
    }

    /// Kills every child still running and removes the temporary directory.
    func shutdown() {
        let running = children.withLock({ $0 }).filter(\.isRunning)
        for child in running { child.signal(SIGKILL) }
        // SIGKILL is delivered asynchronously: a hub still running could write a journal
        // segment into the directory while it is being removed, and leave it behind.
        let deadline = ContinuousClock.now + .seconds(10)
        while running.contains(where: \.isRunning), ContinuousClock.now < deadline { usleep(1_000) }
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Asks a hub for its status over a raw connection (no replica-cli).
enum HubStatusProbe {
    static func status(_ path: String) throws -> HubStatus {
        let client = try RawClient(path: path)
        defer { client.close() }
        try client.send(["type": "status"])
        guard case .status(let status) = try HubMessage(json: try client.receive()) else {
            throw HarnessError("expected status")
        }
        return status
    }
}

/// A protocol client written against docs/PROTOCOL.md with raw bytes, for fault injection.
final class RawClient {
    let fd: Int32
    private var decoder = FrameDecoder(maxPayloadBytes: 64 << 20)

    init(path: String) throws {
        fd = try UnixSocket.connect(to: path)
    }

    func close() { UnixSocket.close(fd) }

    /// Half-closes: the hub reads end-of-file, this side can still read.
    func shutdownWrite() {
        #if canImport(Darwin)
        _ = Darwin.shutdown(fd, SHUT_WR)
        #else
        _ = Glibc.shutdown(fd, Int32(SHUT_WR))
        #endif
    }

    func send(_ json: JSON) throws { try sendBytes(Frame.encode(json)) }

    func sendBytes(_ bytes: [UInt8]) throws {
        try UnixSocket.writeAll(fd, bytes)
    }

    /// The next message, or `nil` at end of file.
    func receiveOrEOF(timeoutMilliseconds: Int32 = 10_000) throws -> JSON? {
        var buffer = [UInt8](repeating: 0, count: 65536)
        let timeoutMilliseconds = Int32(clamping: Int(timeoutMilliseconds) * deadlineScale)
        while true {
            if let frame = try decoder.nextFrame() { return try JSON(parsing: frame) }
            guard UnixSocket.waitUntil(fd, timeoutMilliseconds: timeoutMilliseconds) else {
                throw HarnessError("no message within \(timeoutMilliseconds) ms")
            }
            switch buffer.withUnsafeMutableBytes({ UnixSocket.read(fd, into: $0) }) {
            case .bytes(let n): buffer.withUnsafeBytes { decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            case .wouldBlock: continue
            case .endOfFile, .failed: return nil
            }
        }
    }

    /// The next message if one arrives within `timeoutMilliseconds` (not scaled), else `nil`.
    ///
    /// - Throws: ``HarnessError`` at end of file.
    func poll(timeoutMilliseconds: Int32) throws -> JSON? {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            if let frame = try decoder.nextFrame() { return try JSON(parsing: frame) }
            guard UnixSocket.waitUntil(fd, timeoutMilliseconds: timeoutMilliseconds) else { return nil }
            switch buffer.withUnsafeMutableBytes({ UnixSocket.read(fd, into: $0) }) {
            case .bytes(let n): buffer.withUnsafeBytes { decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            case .wouldBlock: continue
            case .endOfFile, .failed: throw HarnessError("the hub closed the connection")
            }
        }
    }

    func receive() throws -> JSON {
        guard let message = try receiveOrEOF() else { throw HarnessError("the hub closed the connection") }
        return message
    }
}

/// A hub run on a thread of its own in this process.
final class HubThread: Sendable {
    private let done = Atomic<Bool>(false)
    private let stopHub: @Sendable () -> Void

    /// Starts `hub.run()` on a new thread.
    init<App: SyncApp>(_ hub: Hub<App>) {
        stopHub = { hub.stop() }
        Thread.detachNewThread { [self] in
            try? hub.run()
            done.store(true, ordering: .releasing)
        }
    }

    /// Stops the hub and waits until `run` has returned (its final snapshot written), so the
    /// fixture's directory can be removed after.
    func stop() async throws {
        stopHub()
        try await waitUntil("the hub thread to finish") { done.load(ordering: .acquiring) }
    }
}
