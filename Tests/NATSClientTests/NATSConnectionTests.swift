import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NATSClient
import SyncLocks
import Synchronization
import Testing

/// A NATS server of a few lines, on loopback, that follows a script: enough to pin down what
/// the client does with bytes a real server may send in one piece.
private final class FakeNATSServer: Sendable {
    let port: Int
    private let listener: Int32
    private let done = DispatchSemaphore(value: 0)

    /// - Parameter script: Runs on the server's thread with the accepted connection: read
    ///   lines with `readUntil`, write bytes with `send`.
    init(script: @escaping @Sendable (FakeNATSServer, Int32) -> Void) throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(listener, raw, length) == 0 && listen(listener, 1) == 0 && getsockname(listener, raw, &length) == 0
            }
        }
        guard ok else { throw NATSTestError("cannot listen: \(errno)") }
        port = Int(UInt16(bigEndian: address.sin_port))
        let thread = Thread { [self] in
            let fd = accept(listener, nil, nil)
            if fd >= 0 {
                script(self, fd)
                close(fd)
            }
            done.signal()
        }
        thread.start()
    }

    deinit { close(listener) }

    /// Waits for the script to finish (at most 10 s).
    func finish() { _ = done.wait(timeout: .now() + .seconds(10)) }

    /// Reads until `marker` has arrived; returns everything read.
    func readUntil(_ fd: Int32, _ marker: String) -> String {
        var text = ""
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !text.contains(marker) {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            text += String(decoding: buffer[0..<count], as: UTF8.self)
        }
        return text
    }

    /// Writes `text` in one `write`.
    func send(_ fd: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
}

private struct NATSTestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

@Suite("NATSConnection against a scripted server")
struct NATSConnectionTests {
    @Test("a message that arrives in the same read as a request's reply, after it, is kept for the next read")
    func messageAfterReplyIsKept() throws {
        let server = try FakeNATSServer { server, fd in
            server.send(fd, "INFO {\"server_id\":\"fake\",\"max_payload\":1048576,\"headers\":true}\r\n")
            _ = server.readUntil(fd, "PING\r\n")
            server.send(fd, "PONG\r\n")
            // SUB other 1, SUB INBOX.r.* 2, then PUB api INBOX.r.1 0.
            let text = server.readUntil(fd, ".r.1 ")
            guard let line = text.split(separator: "\r\n").first(where: { $0.hasPrefix("PUB api") }) else { return }
            let reply = line.split(separator: " ")[2]
            server.send(fd, "MSG \(reply) 2 2\r\nok\r\nMSG other 1 3\r\nxyz\r\n")
            _ = server.readUntil(fd, "never")
        }
        let connection = try NATSConnection.connect(servers: ["127.0.0.1:\(server.port)"], name: "test")
        defer {
            connection.close()
            server.finish()
        }
        let other = connection.subscribe("other")
        let answer = try connection.request("api", payload: [])
        #expect(answer.payload == Array("ok".utf8))
        let later = try connection.read(timeoutMilliseconds: 1_000)
        #expect(later.map(\.sid) == [other])
        #expect(later.first?.payload == Array("xyz".utf8))
    }
}

@Suite("NATSConnection: what a hostile or unusual server cannot make it do")
struct NATSConnectionRefusalTests {
    @Test("a server that requires TLS is refused before CONNECT: no credentials reach it")
    func tlsRequiredGetsNoCredentials() throws {
        let received = Locked("")
        let server = try FakeNATSServer { server, fd in
            server.send(fd, "INFO {\"server_id\":\"fake\",\"max_payload\":1048576,\"headers\":true,\"tls_required\":true}\r\n")
            // Whatever the client sends until it hangs up.
            let text = server.readUntil(fd, "never")
            received.withLock { $0 = text }
        }
        #expect {
            _ = try NATSConnection.connect(servers: ["127.0.0.1:\(server.port)"], user: "storesync", password: "hub-secret-pw", name: "test")
        } throws: { error in
            guard let error = error as? NATSError else { return false }
            return error.kind == .unsupported && error.message.contains("requires TLS") && !error.message.contains("hub-secret-pw")
        }
        server.finish()
        #expect(received.withLock { $0 }.isEmpty)
    }

    @Test("a server that floods messages while the client waits for a reply breaks the connection, bounded")
    func floodWhileWaitingIsBounded() throws {
        let server = try FakeNATSServer { server, fd in
            server.send(fd, "INFO {\"server_id\":\"fake\",\"max_payload\":1048576,\"headers\":true}\r\n")
            _ = server.readUntil(fd, "PING\r\n")
            server.send(fd, "PONG\r\n")
            _ = server.readUntil(fd, "PUB api")
            let chunk = String(repeating: "MSG other 1 1\r\nx\r\n", count: 4096)
            for _ in 0..<((NATSConnection.maxQueuedMessages / 4096) + 2) { server.send(fd, chunk) }
            _ = server.readUntil(fd, "never")
        }
        let connection = try NATSConnection.connect(servers: ["127.0.0.1:\(server.port)"], name: "test")
        defer {
            connection.close()
            server.finish()
        }
        connection.subscribe("other")
        #expect {
            _ = try connection.request("api", payload: [], timeoutMilliseconds: 10_000)
        } throws: { error in
            (error as? NATSError)?.kind == .protocolError
        }
    }
}

@Suite("JetStream's acknowledgement subjects and server releases")
struct JetStreamSubjectTests {
    @Test("v1 (9 tokens) and v2 (11 and 12 tokens) give the same stream sequence and pending count")
    func bothForms() {
        let v1 = JetStreamAckSubject("$JS.ACK.ledger.c1.1.42.40.1700000000000000000.3")
        let v2 = JetStreamAckSubject("$JS.ACK._.ACCHASH.ledger.c1.1.42.40.1700000000000000000.3")
        let v2Token = JetStreamAckSubject("$JS.ACK.hub.ACCHASH.ledger.c1.1.42.40.1700000000000000000.3.Xy7")
        for ack in [v1, v2, v2Token] {
            #expect(ack?.stream == "ledger")
            #expect(ack?.consumer == "c1")
            #expect(ack?.streamSequence == 42)
            #expect(ack?.consumerSequence == 40)
            #expect(ack?.pending == 3)
        }
    }

    @Test("anything else is not an acknowledgement subject", arguments: [
        "", "$JS.ACK", "_INBOX.abc.1", "$JS.ACK.ledger.c1.1.-5.40.0.3", "$JS.ACK.ledger.c1.1.99999999999999999999999.40.0.3",
        "$JS.ACK.ledger.c1.1.4 2.40.0.3", "$JS.NAK.ledger.c1.1.42.40.0.3", "$JS.ACK..c1.1.42.40.0.3",
        "$JS.ACK.a.b.ledger.c1.1.42.40.0.3.t.extra", "$JS.ACK.ledger.c1.1.42.40.0",
    ])
    func malformed(_ reply: String) {
        #expect(JetStreamAckSubject(reply) == nil)
    }

    @Test("server releases read and order as numbers; suffixes are ignored")
    func versions() {
        #expect(NATSServerVersion("2.12.8") == NATSServerVersion(2, 12, 8))
        #expect(NATSServerVersion("2.11.0-RC.1") == NATSServerVersion(2, 11, 0))
        #expect(NATSServerVersion("2.9.10")! < NATSServerVersion("2.10.23")!)
        // What `nats-server --version` prints (no newline from 2.12.8, one from others).
        #expect(NATSServerVersion(announced: "nats-server: v2.12.8") == NATSServerVersion(2, 12, 8))
        #expect(NATSServerVersion(announced: "nats-server: v2.9.10\n") == NATSServerVersion(2, 9, 10))
        #expect(NATSServerVersion(announced: "usage: nats-server [options]") == nil)
        #expect(NATSServerVersion("2.10.23")! < NATSServerVersion("2.12.8")!)
        #expect(NATSServerVersion("v2.12.8") == nil)
        #expect(NATSServerVersion("2.12") == nil)
        #expect(NATSServerVersion("2.-1.0") == nil)
        #expect(NATSServerVersion("99999999999.1.1") == nil)
    }
}
