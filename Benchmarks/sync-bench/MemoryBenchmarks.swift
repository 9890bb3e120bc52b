import Foundation
import StoreReplica
import SyncCore
import SyncPOSIX
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A hub in a process of its own (this executable in `--hub-child` mode): in memory, so its
/// resident memory can be read from `/proc`, or on a data directory (`--fsync never`), to be
/// killed for the recovery benchmark.
final class HubChildProcess {
    let directory: String
    let socket: String
    /// The hub's data directory (`nil`: in memory).
    let dataDirectory: String?
    let process = Process()

    /// Starts the hub and waits until it answers `status`.
    ///
    /// - Parameter snapshotEvery: With a data directory, a snapshot every N actions (0: none);
    ///   `nil` for a hub in memory.
    init(snapshotEvery: Int? = nil) throws {
        let directory = NSTemporaryDirectory() + "sync-bench-hub-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.directory = directory
        socket = directory + "/hub.sock"
        dataDirectory = snapshotEvery == nil ? nil : directory + "/data"
        process.executableURL = URL(fileURLWithPath: try selfExecutable())
        process.arguments = ["--hub-child", dataDirectory ?? "", "--socket", socket, "--count", "\(snapshotEvery ?? 0)"]
        try process.run()
        let deadline = ContinuousClock.now + .seconds(30)
        while (try? HubConnection.status(at: socket)) == nil {
            guard ContinuousClock.now < deadline, process.isRunning else {
                stop()
                throw SystemError("the hub child did not start")
            }
            usleep(2_000)
        }
    }

    /// The hub's resident set and its peak, in MiB (from `/proc/PID/status`; `nil` elsewhere).
    func residentMiB() -> (now: Double, peak: Double)? {
        guard let text = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8) else { return nil }
        func field(_ name: String) -> Double? {
            guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") }) else { return nil }
            return line.split(separator: " ").compactMap { Double($0) }.first.map { $0 / 1024 }
        }
        guard let now = field("VmRSS"), let peak = field("VmHWM") else { return nil }
        return (now, peak)
    }

    /// Kills the hub with SIGKILL (nothing saved, as in a crash) and waits for it.
    func crash() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// Kills the hub and removes its directory.
    func stop() {
        crash()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// `hub.rss`: the hub's resident memory at rest, with 64 idle replicas attached, after
/// `actions` actions, and after `actions` actions flowed while 63 of 64 attached replicas
/// never read (each is dropped once it is `--max-queue-bytes` behind; the backlog is shared).
func hubRSS(actions: Int) throws -> [Result] {
    var results: [Result] = []
    func result(_ when: String, _ hub: HubChildProcess, extra: [(String, Double)] = []) throws {
        guard let memory = hub.residentMiB() else { throw SystemError("cannot read the hub's memory (no /proc)") }
        results.append(Result(scenario: "hub.rss", params: [("when", .string(when)), ("actions", JSON(when == "rest" || when == "replicas64" ? 0 : actions)),
                                                            ("backlog_mib", 64)],
                              metrics: [("mib", memory.now), ("peak_mib", memory.peak)] + extra))
    }
    let hub = try HubChildProcess()
    defer { hub.stop() }
    try result("rest", hub)
    let rest = hub.residentMiB()?.now ?? 0
    var idle = try (0..<64).map { _ in try RawBenchClient(socket: hub.socket) }
    _ = try HubConnection.status(at: hub.socket)
    let with64 = hub.residentMiB()?.now ?? 0
    try result("replicas64", hub, extra: [("kib_per_replica", (with64 - rest) * 1024 / 64)])
    idle.removeAll()
    try RawBenchClient(socket: hub.socket).dispatchPipelined(actions)
    try result("after1M", hub)

    // The same flow with the inspector attached and a page reading every action it streams.
    let pageHub = try HubChildProcess()
    defer { pageHub.stop() }
    let page = try InspectorPageReader(socket: pageHub.socket)
    defer { page.stop() }
    try RawBenchClient(socket: pageHub.socket).dispatchPipelined(actions)
    try result("page1M", pageHub, extra: [("page_bytes", Double(page.bytesRead))])

    let stalledHub = try HubChildProcess()
    defer { stalledHub.stop() }
    let stalled = try (0..<63).map { _ in try RawBenchClient(socket: stalledHub.socket) }
    try RawBenchClient(socket: stalledHub.socket).dispatchPipelined(actions)
    try result("stalled63", stalledHub)
    withExtendedLifetime(stalled) {}
    results.append(try welcomeRSS(stateMiB: 10, joiners: 50))
    return results
}

/// `hub.rss` `when: welcome50`: a 10 MiB state, then 50 clients that say `hello` and never
/// read their welcome. Every full welcome at one seq shares one encoding of the state, so
/// the hub should stay under rest + 2 × state + 32 MiB (the bound).
func welcomeRSS(stateMiB: Int, joiners: Int) throws -> Result {
    let hub = try HubChildProcess()
    defer { hub.stop() }
    let writer = try RawBenchClient(socket: hub.socket)
    let chunk = String(repeating: "x", count: (1 << 20) - 256)
    for n in 0..<stateMiB {
        try UnixSocket.writeAll(writer.fd, Frame.encode(ClientMessage.dispatch(
            id: .number(n), action: ["type": "set", "path": .string("/k\(n)"), "value": .string(chunk)])))
        try writer.readActions(1)
    }
    guard let rest = hub.residentMiB()?.now else { throw SystemError("cannot read the hub's memory (no /proc)") }
    var silent: [Int32] = []
    defer { silent.forEach { UnixSocket.close($0) } }
    for _ in 0..<joiners {
        let fd = try UnixSocket.connect(to: hub.socket)
        try UnixSocket.writeAll(fd, Frame.encode(ClientMessage.hello(protocolVersion: 1, app: "json", fingerprint: nil,
                                                                      name: "silent", session: nil)))
        silent.append(fd)
    }
    let deadline = ContinuousClock.now + .seconds(30)
    while (try? HubConnection.status(at: hub.socket))?.replicas.count ?? 0 < joiners + 1 {
        guard ContinuousClock.now < deadline else { throw SystemError("the joiners did not attach") }
        usleep(2_000)
    }
    guard let memory = hub.residentMiB() else { throw SystemError("cannot read the hub's memory (no /proc)") }
    let state = Double(stateMiB)
    return Result(scenario: "hub.rss", params: [("when", "welcome50"), ("state_mib", JSON(stateMiB)), ("joiners", JSON(joiners))],
                  metrics: [("mib", memory.now), ("peak_mib", memory.peak), ("rest_mib", rest),
                            ("over_rest_mib", memory.now - rest), ("bound_mib", rest + 2 * state + 32)])
}
