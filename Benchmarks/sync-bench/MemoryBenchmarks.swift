import Foundation
import StoreReplica
import SyncCore
import SyncPOSIX
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A hub in a process of its own (this executable in `--hub-child` mode, in memory), so its
/// resident memory can be read from `/proc`.
final class HubChildProcess {
    let directory: String
    let socket: String
    let process = Process()

    init() throws {
        directory = NSTemporaryDirectory() + "sync-bench-rss-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        socket = directory + "/hub.sock"
        process.executableURL = URL(fileURLWithPath: try selfExecutable())
        process.arguments = ["--hub-child", "", "--socket", socket, "--count", "0"]
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

    func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
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

    let stalledHub = try HubChildProcess()
    defer { stalledHub.stop() }
    let stalled = try (0..<63).map { _ in try RawBenchClient(socket: stalledHub.socket) }
    try RawBenchClient(socket: stalledHub.socket).dispatchPipelined(actions)
    try result("stalled63", stalledHub)
    withExtendedLifetime(stalled) {}
    return results
}
