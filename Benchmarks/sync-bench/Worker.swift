import BuiltinApps
import Dispatch
import Foundation
import StoreReplica
import SyncCore
import SyncPOSIX
import SyncLocks
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Nanoseconds on the system-wide monotonic clock, comparable across processes.
func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

/// `sync-bench --worker`: one replica process of the multi-process runs.
///
/// Protocol with the parent, one line each way: the worker prints `ready ID` and waits on
/// stdin for one of:
/// - `go`: it dispatches its `count` actions (through its store, as an app would; with
///   `window` > 0 at most that many of its own outstanding at once), waits until it has
///   applied `total` actions, prints `done SEQ DIGEST`, and stays attached until stdin
///   closes (the parent reads its CPU counters first). With `count` 0 it stays attached
///   until stdin closes.
/// - `load RATE ORIGIN`: it dispatches about RATE actions per second and notes when it
///   applies each action from replica ORIGIN, until `stop`; then it prints `probe SEQ NS`
///   per such action (monotonic nanoseconds) and `end`.
func runWorker(socket: String, count: Int, total: Int, window: Int, app: String = "json") -> Never {
    if app == "codable" { runCodableWorker(socket: socket, count: count, total: total, window: window) }
    let replica: Replica<JSONApp>
    do {
        replica = try Replica.attach(app: JSONApp(), socketPath: socket, name: "bench-worker")
    } catch {
        Console.error("sync-bench worker: \(error.description)")
        exit(1)
    }
    let path = (try? JSONPointer("/counters/\(replica.replicaID)")) ?? .root
    Console.out("ready \(replica.replicaID)")
    let command = readLine() ?? ""
    if command.hasPrefix("load ") {
        runLoad(replica, path: path, command: command)
    }
    guard command == "go" else { exit(0) }
    if count == 0 && total == 0 {
        while readLine() != nil {}
        exit(0)
    }
    let action = JSONEdit.increment(path, by: 1)
    dispatchAndFinish(replica, count: count, total: total, window: window, action: action)
    withExtendedLifetime(action) {}
    exit(0)
}

/// The timed part of a worker: dispatches `action` `count` times through the store (at most
/// `window` of its own outstanding), waits until `total` actions are applied, prints
/// `done SEQ DIGEST`; the caller exits.
private func dispatchAndFinish<App: SyncApp>(_ replica: Replica<App>, count: Int, total: Int, window: Int,
                                             action: App.Action) {
    let target = replica.welcomeSeq + UInt64(total)
    let reached = DispatchSemaphore(value: 0)
    let signalled = Atomic<Bool>(false)
    // Each of this worker's own actions coming back frees a place in the window.
    let slots = DispatchSemaphore(value: max(window, 0))
    let me = replica.replicaID
    // Only seq and origin are needed: observeActions makes no JSON for the action.
    let token = replica.observeActions { applied in
        if window > 0, applied.origin == me { slots.signal() }
        if applied.seq >= target, !signalled.exchange(true, ordering: .relaxed) { reached.signal() }
    }
    // As the Redis baseline's publisher writes what its window allows in one write, every
    // place freed at once is dispatched in one batch (one write, no writer-thread hand-off).
    var left = count
    while left > 0 {
        if window > 0 { slots.wait() }
        replica.withBatchedSends {
            repeat {
                replica.store.dispatch(action)
                left -= 1
            } while left > 0 && (window == 0 || slots.wait(timeout: .now()) == .success)
        }
    }
    if total > 0, replica.seq < target { reached.wait() }
    token.cancel()
    Console.out("done \(replica.seq) \(replica.app.digest(of: replica.store.state))")
    // Every thread stays until the parent has read their CPU counters (a thread that has
    // ended takes its counters with it): it closes stdin once it has.
    while readLine() != nil {}
    replica.close()
}

/// The `load` mode of a worker: steady background dispatches while the parent measures latency.
private func runLoad(_ replica: Replica<JSONApp>, path: JSONPointer, command: String) -> Never {
    let parts = command.split(separator: " ")
    let rate = parts.count > 1 ? Double(parts[1]) ?? 0 : 0
    let probe = parts.count > 2 ? Int(parts[2]) ?? -1 : -1
    let seen = Locked<[(UInt64, UInt64)]>([])
    let token = replica.observeActions { applied in
        guard applied.origin == probe else { return }
        let now = monotonicNanoseconds()
        seen.withLock { $0.append((applied.seq, now)) }
    }
    let stop = Atomic<Bool>(false)
    let finished = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
        let start = monotonicNanoseconds()
        var sent = 0.0
        while !stop.load(ordering: .relaxed) {
            let due = rate * Double(monotonicNanoseconds() - start) / 1e9
            while sent + 1 <= due {
                replica.store.dispatch(.increment(path, by: 1))
                sent += 1
            }
            usleep(200)
        }
        finished.signal()
    }
    while let line = readLine(), line != "stop" {}
    stop.store(true, ordering: .relaxed)
    finished.wait()
    token.cancel()
    for (seq, at) in seen.withLock({ $0 }) { Console.out("probe \(seq) \(at)") }
    Console.out("end")
    replica.close()
    exit(0)
}

/// `--worker --app codable`: the same as the json worker, for the Codable counter
/// (`CodableCounterApp`, its actions decoded through its case table): it dispatches
/// `.increment`, which every replica applies to one shared count.
private func runCodableWorker(socket: String, count: Int, total: Int, window: Int) -> Never {
    let replica: Replica<CodableCounterApp>
    do {
        replica = try Replica.attach(app: CodableCounterApp(), socketPath: socket, name: "bench-worker")
    } catch {
        Console.error("sync-bench worker: \(error.description)")
        exit(1)
    }
    Console.out("ready \(replica.replicaID)")
    guard readLine() == "go" else { exit(0) }
    dispatchAndFinish(replica, count: count, total: total, window: window, action: .increment)
    exit(0)
}
