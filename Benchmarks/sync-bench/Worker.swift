import BuiltinApps
import Dispatch
import StoreReplica
import SyncCore
import SyncPOSIX
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `sync-bench --worker`: one replica process of the multi-process runs.
///
/// Protocol with the parent, one line each way: the worker prints `ready ID`, waits for
/// `go` on stdin, dispatches its `count` actions (fire-and-forget through its store, as an
/// app would), waits until it has applied `total` actions, and prints `done SEQ DIGEST`.
/// With `count` 0 it just stays attached until stdin closes.
func runWorker(socket: String, count: Int, total: Int) -> Never {
    let replica: Replica<JSONApp>
    do {
        replica = try Replica.attach(app: JSONApp(), socketPath: socket, name: "bench-worker")
    } catch {
        Console.error("sync-bench worker: \(error.description)")
        exit(1)
    }
    let target = replica.welcomeSeq + UInt64(total)
    let reached = DispatchSemaphore(value: 0)
    let signalled = Atomic<Bool>(false)
    let token = replica.observeEvents { event in
        if case .action(let seq, _, _, _, _) = event, seq >= target,
           !signalled.exchange(true, ordering: .relaxed) {
            reached.signal()
        }
    }
    Console.out("ready \(replica.replicaID)")
    guard readLine() == "go" else { exit(0) }
    if count == 0 {
        while readLine() != nil {}
        exit(0)
    }
    let path = (try? JSONPointer("/counters/\(replica.replicaID)")) ?? .root
    for _ in 0..<count {
        replica.store.dispatch(.increment(path, by: 1))
    }
    if total > 0, replica.seq < target { reached.wait() }
    token.cancel()
    Console.out("done \(replica.seq) \(replica.app.digest(of: replica.store.state))")
    replica.close()
    exit(0)
}
