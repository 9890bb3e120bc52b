import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SyncCore
import SyncPOSIX
import Testing

/// A datagram socket standing in for systemd's `NOTIFY_SOCKET`.
final class NotifyListener {
    let path: String
    let fd: Int32

    init(path: String) throws {
        self.path = path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: \(errno)") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let bound = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0 else { throw HarnessError("bind \(path): \(errno)") }
    }

    deinit { close(fd) }

    /// The next datagram, or `nil` after `timeoutMilliseconds` (scaled).
    func next(timeoutMilliseconds: Int32 = 10_000) -> String? {
        guard UnixSocket.waitUntil(fd, timeoutMilliseconds: Int32(clamping: Int(timeoutMilliseconds) * deadlineScale)) else {
            return nil
        }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        return count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : nil
    }

    /// Waits for a datagram containing `text`, skipping others.
    func waitFor(_ text: String) throws -> String {
        while let datagram = next() {
            if datagram.contains(text) { return datagram }
        }
        throw HarnessError("no notification with \(text)")
    }
}

extension MultiProcessTests {
    @Suite("A hub systemd can trust: notify, watchdog, socket activation, signals, logs")
    struct ServiceTests {
        @Test("NOTIFY_SOCKET: READY=1 with STATUS after binding, WATCHDOG=1 while serving, STOPPING=1 at the end")
        func notify() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let listener = try NotifyListener(path: fixture.directory + "/notify")
            let hubd = try Executables.url("hubd").path
            let hub = try fixture.spawn("/usr/bin/env", ["NOTIFY_SOCKET=" + listener.path, "WATCHDOG_USEC=200000", hubd,
                                                         "--socket", fixture.socket, "--app", "json"])
            let ready = try listener.waitFor("READY=1")
            #expect(ready.contains("STATUS=serving json@1") && ready.contains("MAINPID=\(hub.pid)"), "\(ready)")
            // Ready means serving: the socket answers at once.
            #expect(try HubStatusProbe.status(fixture.socket).seq == 0)
            _ = try listener.waitFor("WATCHDOG=1")
            _ = try listener.waitFor("WATCHDOG=1")
            hub.signal(SIGTERM)
            let stopping = try listener.waitFor("STOPPING=1")
            #expect(stopping.contains("STATUS=stopping at seq 0"), "\(stopping)")
            #expect(try await hub.waitForExit() == 0)
        }

        @Test("LISTEN_FDS: the hub serves the socket it is given, and leaves it in place when it stops")
        func socketActivation() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let hubd = try Executables.url("hubd").path
            let script = """
                import os, socket, sys
                s = socket.socket(socket.AF_UNIX)
                s.bind(sys.argv[1]); s.listen(16)
                if s.fileno() != 3: os.dup2(s.fileno(), 3)
                os.set_inheritable(3, True)
                env = dict(os.environ, LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
                os.execve(sys.argv[2], [sys.argv[2], "--app", "json"], env)
                """
            let hub = try fixture.spawn("/usr/bin/python3", ["-c", script, fixture.socket, hubd])
            try await waitUntil("the activated hub to serve; \(hub.errorLines)") {
                (try? HubStatusProbe.status(fixture.socket)) != nil
            }
            let client = try fixture.attachedRawClient()
            try client.send(["type": "dispatch", "id": 1, "action": ["type": "set", "path": "/a", "value": 1]])
            #expect(try client.receive()["seq"] == 1)
            client.close()
            try await waitUntil("the start-up line") { hub.errorLines.contains { $0.contains("passed by the service manager") } }
            hub.signal(SIGTERM)
            #expect(try await hub.waitForExit() == 0)
            #expect(FileSystem.exists(fixture.socket), "the service manager's socket must stay")
            #expect(hub.errorLines.contains { $0.contains("left to the service manager") }, "\(hub.errorLines)")
        }

        @Test("SIGHUP is a clean stop: replicas told shutting-down, a final snapshot, exit 0")
        func hangUp() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            let hub = try await fixture.startHub(extra: ["--data-dir", data])
            let client = try fixture.attachedRawClient()
            defer { client.close() }
            try client.send(["type": "dispatch", "id": 1, "action": ["type": "set", "path": "/a", "value": 1]])
            #expect(try client.receive()["seq"] == 1)
            hub.signal(SIGHUP)
            #expect(try client.receive()["error"]?["code"] == "shutting-down")
            #expect(try await hub.waitForExit() == 0)
            #expect(try FileSystem.list(data).contains { $0.hasPrefix("snapshot-") })
        }

        @Test("the shipped systemd units pass systemd-analyze verify and keep their exposure scores")
        func shippedUnits() async throws {
            let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
                .deletingLastPathComponent().deletingLastPathComponent().path
            let hubd = try Executables.url("hubd").path
            let check = try ChildProcess("/bin/sh", [root + "/Scripts/systemd-verify.sh", root, hubd])
            let status = try await check.waitForExit(timeout: .seconds(120))
            if status == 77 {
                print("skipped: systemd-analyze is not installed, so the systemd units were not verified")
                return
            }
            #expect(status == 0, "\((check.lines + check.errorLines).joined(separator: "\n"))")
        }

        @Test("a hub waiting at start for a shared log nobody serves says so, and stops at once on SIGTERM (exit 0)")
        func stopWhileWaitingForSharedLog() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let port = try freeTCPPort()
            let hub = try fixture.spawn("hubd", ["--socket", fixture.socket, "--app", "json", "--log", "nats://127.0.0.1:\(port)/S", "--log-unauthenticated"])
            try await waitUntil("the waiting line; \(hub.errorLines)") { hub.errorLines.contains { $0.contains("waiting for the shared log") } }
            #expect(!FileSystem.exists(fixture.socket), "nothing is served before the log answers")
            let asked = ContinuousClock.now
            hub.signal(SIGTERM)
            #expect(try await hub.waitForExit() == 0)
            #expect(ContinuousClock.now - asked < .seconds(5))
            #expect(hub.errorLines.contains { $0.contains("stopped before serving") }, "\(hub.errorLines)")
        }

        @Test("a stderr nobody reads never stops the hub: lines are dropped and counted, then the count is logged")
        func logsNeverBlock() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let fifo = fixture.directory + "/stderr"
            #expect(mkfifo(fifo, 0o600) == 0)
            // The read end is open (so the hub can open the write end) but not read yet.
            let reader = open(fifo, O_RDONLY | O_NONBLOCK)
            #expect(reader >= 0)
            defer { close(reader) }
            let hubd = try Executables.url("hubd").path
            _ = try fixture.spawn("/bin/sh", ["-c", "exec \"$0\" --socket \"$1\" --app json 2> \"$2\"", hubd, fixture.socket, fifo])
            try await waitUntil("hubd to listen") { (try? HubStatusProbe.status(fixture.socket)) != nil }
            // Each attach and disconnect is a log line: far more than the pipe and the queue hold.
            for n in 0..<6_000 {
                let client = try RawClient(path: fixture.socket)
                try client.send(["type": "hello", "protocol": 1, "app": "json", "name": .string("n\(n)")])
                _ = try client.receive()
                client.close()
            }
            // Still serving, at once.
            #expect(try HubStatusProbe.status(fixture.socket).seq == 0)
            // Now read: the lines that fit, and then the count of those dropped.
            var text: [UInt8] = []
            try await waitUntil("the dropped-lines notice") {
                var buffer = [UInt8](repeating: 0, count: 65536)
                let count = buffer.withUnsafeMutableBytes { read(reader, $0.baseAddress, $0.count) }
                if count > 0 { text += buffer[0..<count] }
                return String(decoding: text, as: UTF8.self).contains("log lines dropped")
            }
        }
    }
}
