import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SyncPOSIX
import SyncLocks
import Synchronization

/// The `nats-server` the shared-log tests start, or `nil` (they are then skipped, one line
/// each): `$STORESYNC_NATS_SERVER` when it is set (`.ci/run` sets it to the pinned server it
/// installs in the build area), else the first `nats-server` on `PATH`.
let natsServerPath: String? = {
    let environment = ProcessInfo.processInfo.environment
    if let chosen = environment["STORESYNC_NATS_SERVER"], !chosen.isEmpty {
        return access(chosen, X_OK) == 0 ? chosen : nil
    }
    let candidates = (environment["PATH"] ?? "").split(separator: ":").map { "\($0)/nats-server" }
    return candidates.first { access($0, X_OK) == 0 }
}()

/// The one line a skipped shared-log test prints.
let natsMissing = ProcessInfo.processInfo.environment["STORESYNC_NATS_SERVER"].map { "STORESYNC_NATS_SERVER=\($0) is not an executable nats-server, so this shared-log test was skipped" }
    ?? "nats-server is not installed, so this shared-log test was skipped; run `bash .ci/run` (it installs the pinned server and sets STORESYNC_NATS_SERVER), or put nats-server 2.10.23 or later on PATH"

/// A TCP port nothing listens on now (the kernel's choice), on 127.0.0.1.
func freeTCPPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw HarnessError("socket: \(errno)") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw -> Int32 in
            guard bind(fd, raw, length) == 0 else { return -1 }
            return getsockname(fd, raw, &length)
        }
    }
    guard bound == 0 else { throw HarnessError("bind: \(errno)") }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// One `nats-server -js` of a test, on loopback (or an address in a test's namespace), with a
/// store directory inside the test's fixture; killed by PID with the fixture.
final class NATSServer: Sendable {
    let name: String
    let host: String
    let port: Int
    let clusterPort: Int
    let storeDirectory: String
    /// `ip netns exec NS` prefix, when it runs in a network namespace.
    let namespace: String?
    private let routes: [String]
    private let fixture: Fixture
    private let current = Locked<ChildProcess?>(nil)

    /// - Parameters:
    ///   - fixture: The test's fixture (directory and child processes).
    ///   - name: The server's name (also its store directory's).
    ///   - host: The address it listens on.
    ///   - port: Its client port (`nil`: a free one on loopback).
    ///   - clusterPort: Its cluster port, with `routes`, for a cluster.
    ///   - routes: `host:port` of the other members' cluster ports.
    ///   - namespace: The network namespace it runs in.
    init(fixture: Fixture, name: String = "nats", host: String = "127.0.0.1", port: Int? = nil,
         clusterPort: Int = 0, routes: [String] = [], namespace: String? = nil) throws {
        self.fixture = fixture
        self.name = name
        self.host = host
        self.port = try port ?? freeTCPPort()
        self.clusterPort = clusterPort
        self.routes = routes
        self.namespace = namespace
        storeDirectory = fixture.directory + "/\(name)-store"
    }

    /// `host:port` for `--log nats://…`.
    var address: String { "\(host):\(port)" }

    /// Starts it (again, on the same port and store) and waits until it takes connections.
    func start() async throws {
        guard let path = natsServerPath else { throw HarnessError(natsMissing) }
        var arguments = ["-js", "-a", host, "-p", String(port), "-sd", storeDirectory, "-n", name]
        if clusterPort != 0 {
            arguments += ["--cluster_name", "storesync-test", "--cluster", "nats://\(host):\(clusterPort)",
                          "--routes", routes.map { "nats://\($0)" }.joined(separator: ",")]
        }
        let child: ChildProcess
        if let namespace {
            child = try fixture.spawn(ipCommand ?? "/usr/sbin/ip", ["netns", "exec", namespace, path] + arguments, name: name)
        } else {
            child = try fixture.spawn(path, arguments, name: name)
        }
        current.withLock { $0 = child }
        let host = self.host, port = self.port, name = self.name
        // nats-server logs this line once it takes client connections.
        try await waitUntil("\(name) to listen on \(host):\(port); stderr: \(child.errorLines.suffix(5))") {
            guard child.isRunning else { throw HarnessError("\(name) exited: \(child.errorLines.suffix(10))") }
            return child.errorLines.contains { $0.contains("Server is ready") }
        }
    }

    /// Kills it (SIGKILL) and waits for the exit.
    func kill() async throws {
        guard let child = current.withLock({ $0 }) else { return }
        child.signal(SIGKILL)
        _ = try await child.waitForExit()
    }

    /// Its process, while started.
    var process: ChildProcess? { current.withLock { $0 } }
}
