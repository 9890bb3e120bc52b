import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NATSClient
@testable import StoreHub
import SyncPOSIX
import SyncLocks
import Synchronization

/// The `nats-server` the shared-log tests start, or why there is none (the tests are then
/// skipped, one line each).
///
/// The candidate is `$STORESYNC_NATS_SERVER` when it is set, else the pinned release that
/// `Scripts/install-nats-server` puts in the package's `.build/nats-server-VERSION/` (the
/// newest there), else the first `nats-server` on `PATH`. Its `--version` is asked, and a
/// release older than the oldest a hub accepts (`JetStreamLog.oldestSupportedServer`, 2.10.23;
/// Debian's 2.9.10, say) is skipped, not failed.
let natsServer: (path: String?, skipped: String) = {
    let install = "run Scripts/install-nats-server (it installs the pinned release where `swift test` finds it by itself)"
    let environment = ProcessInfo.processInfo.environment
    let candidate: String
    if let chosen = environment["STORESYNC_NATS_SERVER"], !chosen.isEmpty {
        guard access(chosen, X_OK) == 0 else {
            return (nil, "STORESYNC_NATS_SERVER=\(chosen) is not an executable nats-server, so this shared-log test was skipped; unset it, or \(install)")
        }
        candidate = chosen
    } else if let pinned = pinnedNATSServer() {
        candidate = pinned
    } else if let onPath = (environment["PATH"] ?? "").split(separator: ":")
        .map({ (directory: Substring) -> String in "\(directory)/nats-server" })
        .first(where: { (path: String) -> Bool in access(path, X_OK) == 0 }) {
        candidate = onPath
    } else {
        return (nil, "nats-server is not installed, so this shared-log test was skipped; \(install)")
    }
    let oldest = JetStreamLog.oldestSupportedServer
    guard let version = natsServerVersion(candidate) else {
        return (nil, "\(candidate) --version did not say a nats-server version, so this shared-log test was skipped; \(install)")
    }
    guard version >= oldest else {
        return (nil, "\(candidate) is nats-server \(version), older than \(oldest), which hubs refuse, so this shared-log test was skipped; \(install)")
    }
    return (candidate, "")
}()

/// The path of the `nats-server` the shared-log tests use, or `nil`: see ``natsServer``.
let natsServerPath: String? = natsServer.path

/// The one line a skipped shared-log test prints: what was found, and the command that fixes it.
let natsMissing: String = natsServer.skipped

/// The newest `nats-server` that `Scripts/install-nats-server` installed in this package's
/// `.build/nats-server-VERSION/bin/`, or `nil`.
private func pinnedNATSServer() -> String? {
    // This file is Tests/SyncTests/Support/NATSServer.swift.
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path
    let build = root + "/.build"
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: build)) ?? []
    let installed = entries.compactMap { name -> (version: NATSServerVersion, path: String)? in
        guard name.hasPrefix("nats-server-"), let version = NATSServerVersion(String(name.dropFirst("nats-server-".count))) else { return nil }
        let path = "\(build)/\(name)/bin/nats-server"
        return access(path, X_OK) == 0 ? (version, path) : nil
    }
    return installed.max { $0.version < $1.version }?.path
}

/// The release a `nats-server` binary says it is (`nats-server: v2.12.8`), or `nil` when it
/// does not run or says something else.
private func natsServerVersion(_ path: String) -> NATSServerVersion? {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = ["--version"]
    let output = Pipe()
    process.standardOutput = output
    process.standardError = output
    do { try process.run() } catch { return nil }
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return NATSServerVersion(announced: String(decoding: data, as: UTF8.self))
}

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

extension NATSServer {
    /// Three nats-server on loopback in one cluster (each routing to the other two), started;
    /// killed by PID with the fixture.
    ///
    /// - Parameter fixture: The test's fixture.
    /// - Returns: The servers, `n0`, `n1`, `n2`.
    static func startCluster(_ fixture: Fixture) async throws -> [NATSServer] {
        let ports = try (0..<3).map { _ in (client: try freeTCPPort(), cluster: try freeTCPPort()) }
        let servers = try (0..<3).map { index in
            try NATSServer(fixture: fixture, name: "n\(index)", port: ports[index].client, clusterPort: ports[index].cluster,
                           routes: (0..<3).filter { $0 != index }.map { "127.0.0.1:\(ports[$0].cluster)" })
        }
        for server in servers { try await server.start() }
        return servers
    }
}
