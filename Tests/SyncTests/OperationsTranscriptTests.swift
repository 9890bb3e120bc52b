import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// docs/OPERATIONS.md §20's outputs that need no NATS server (refusals at start, a hub waiting
// for a server that is not there, a server too old), run and compared as README's are in
// ReadmeTranscriptTests.swift. The section's other outputs need a NATS cluster and are marked
// excerpts there.

private let operations = "docs/OPERATIONS.md"

/// A run compared with the page, in a fixture holding a log key (a test key, mode 600).
private func keyedRun() throws -> (fixture: Fixture, run: TranscriptRun, key: String) {
    let fixture = try Fixture()
    let run = TranscriptRun(fixture: fixture, page: operations)
    do {
        let key = try writeSecret(fixture.directory + "/log-key", "0123456789abcdef0123456789abcdef\n", mode: 0o600)
        return (fixture, run, key)
    } catch {
        run.shutdown()
        throw error
    }
}

/// The refusals hubd prints for a shared log before it reaches any server.
@Test("docs/OPERATIONS.md §20's start-up refusals are what hubd prints", arguments: [
    ("nats-no-key", ["--log", "nats://127.0.0.1:42103/ledger"], 2),
    ("nats-fsync", ["--log", "nats://127.0.0.1:42103/ledger", "--log-key-file", "KEY", "--fsync", "always"], 2),
] as [(String, [String], Int32)])
func operationsRefusals(name: String, arguments: [String], status: Int32) async throws {
    let (fixture, run, key) = try keyedRun()
    defer { run.shutdown() }
    let hub = try fixture.spawn("hubd", ["--socket", fixture.socket] + arguments.map { $0 == "KEY" ? key : $0 })
    hub.closeInput()
    #expect(try await hub.waitForExit() == status)
    try run.compare(name, hub.errorLines)
}

/// A hub started with no server on the port waits; SIGTERM stops it before it serves.
@Test("docs/OPERATIONS.md §20's hub waiting for NATS, stopped with SIGTERM, prints what the page shows")
func operationsWaitingForNATS() async throws {
    let (fixture, run, key) = try keyedRun()
    defer { run.shutdown() }
    let port = try freeTCPPort()
    run.paths = [("127.0.0.1:42102", "127.0.0.1:\(port)")]
    let hub = try fixture.spawn("hubd", ["--socket", fixture.socket, "--app", "counter",
                                         "--log", "nats://127.0.0.1:\(port)/orders", "--log-key-file", key])
    try await waitUntil("hubd to say it waits; stderr: \(hub.errorLines)", timeout: .seconds(15)) {
        hub.errorLines.contains { $0.contains("waiting for the shared log") }
    }
    hub.signal(SIGTERM)
    #expect(try await hub.waitForExit() == 0)
    try run.compare("nats-waiting", hub.errorLines)
}

/// A server whose `INFO` says 2.9.10 is refused at once (a listener stands in for the server).
@Test("docs/OPERATIONS.md §20's refusal of a nats-server older than 2.10.23 is what hubd prints")
func operationsOldServer() async throws {
    let (fixture, run, key) = try keyedRun()
    defer { run.shutdown() }
    let server = try OldNATSServer()
    defer { server.stop() }
    run.paths = [("127.0.0.1:42101", "127.0.0.1:\(server.port)")]
    let hub = try fixture.spawn("hubd", ["--socket", fixture.socket, "--app", "counter",
                                         "--log", "nats://127.0.0.1:\(server.port)/ledger", "--log-key-file", key])
    hub.closeInput()
    #expect(try await hub.waitForExit(timeout: .seconds(15)) == 1)
    try run.compare("nats-old-server", hub.errorLines)
}

/// Writes `text` to a new file of mode `mode`; returns its path.
private func writeSecret(_ path: String, _ text: String, mode: mode_t) throws -> String {
    try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    guard chmod(path, mode) == 0 else { throw HarnessError("chmod \(path): errno \(errno)") }
    return path
}

/// A TCP listener on loopback that greets every connection with the `INFO` of a nats-server
/// 2.9.10, then answers its PINGs until the client leaves.
private final class OldNATSServer: Sendable {
    let port: Int
    private let fd: Int32

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw -> Int32 in
                guard bind(fd, raw, length) == 0, listen(fd, 8) == 0 else { return -1 }
                return getsockname(fd, raw, &length)
            }
        }
        guard bound == 0 else {
            close(fd)
            throw HarnessError("bind or listen: errno \(errno)")
        }
        self.fd = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread {
            while true {
                let client = accept(fd, nil, nil)
                guard client >= 0 else {
                    close(fd)
                    return
                }
                Thread.detachNewThread {
                    let info = #"INFO {"server_id":"NOLDSERVER","server_name":"old","version":"2.9.10","proto":1,"go":"go1.19.8","host":"127.0.0.1","port":4222,"headers":true,"max_payload":1048576,"jetstream":true}"# + "\r\n"
                    _ = Array(info.utf8).withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    // Every PING read gets its PONG (the client checks the link before the release).
                    var buffer = [UInt8](repeating: 0, count: 4096)
                    while case let n = buffer.withUnsafeMutableBytes({ recv(client, $0.baseAddress, $0.count, 0) }), n > 0 {
                        if String(decoding: buffer[0..<n], as: UTF8.self).contains("PING") {
                            _ = Array("PONG\r\n".utf8).withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                        }
                    }
                    close(client)
                }
            }
        }
    }

    /// Stops accepting (the thread's `accept` fails once the socket is shut down, and closes it).
    func stop() {
        _ = shutdown(fd, Int32(SHUT_RDWR))
    }
}
