import SyncCore
import SyncPOSIX
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

let usage = """
    sync-bench — StoreSync's benchmarks. Run it in release: swift run -c release sync-bench

    USAGE: sync-bench [--json] [--quick] [--only PREFIX]

    OPTIONS:
      --json          One JSON object per line: {"scenario":…,"params":{…},"metrics":{…}}.
      --quick         Fewer iterations (a smoke run; figures are noisier).
      --only PREFIX   Run only scenarios whose name starts with PREFIX (store, hub, baseline).
      -h, --help      Print this help and exit.

    SCENARIOS:
      baseline.reduce   the bench reducer called directly (the store's in-run baseline)
      store.dispatch    dispatch with thunk middleware and one subscriber; selectors=0 and 100
                        (100 selector subscriptions, exactly one of which changes per action)
      baseline.socket   action-sized frames through a Unix socket pair (the hub's in-run baseline)
      hub.throughput    hub + 4 replica processes, json app: actions/s fully applied by all
      codable.apply     decode a wire action and apply it, Codable codec vs hand-written (counter)
      hub.latency       dispatch→ack round trip of one replica with 3 more attached, unloaded
      hydrate           a new replica attaching to a 1 MiB state: connect to applied welcome, ms
      resume            a replica resuming 10,000 missed actions: hello to the last one read, ms
      recovery          a hub killed (-9) after 1,000,000 actions: restart to ready, s (snapshot every
                        100,000 actions, the default; and no snapshot: the whole journal replayed)
    """

@main
struct SyncBench {
    static func main() async {
        var cursor = ArgumentCursor(CommandLine.arguments)
        var json = false, quick = false
        var only: String?
        var worker = false, socket = "", count = 0, total = 0
        var hubChild: String?
        while let argument = cursor.next() {
            switch argument {
            case "--json": json = true
            case "--quick": quick = true
            case "--only": only = cursor.next()
            case "--worker": worker = true
            case "--socket": socket = cursor.next() ?? ""
            case "--count": count = Int(cursor.next() ?? "") ?? 0
            case "--total": total = Int(cursor.next() ?? "") ?? 0
            case "--hub-child": hubChild = cursor.next()
            case "-h", "--help":
                Console.out(usage)
                exit(0)
            default:
                Console.error("sync-bench: unknown argument \"\(argument)\"; see sync-bench --help")
                exit(2)
            }
        }
        if worker { runWorker(socket: socket, count: count, total: total) }
        if let hubChild { runHubChild(socket: socket, dataDirectory: hubChild, snapshotEvery: count) }
        UnixSocket.ignoreBrokenPipes()

        func report(_ result: Result) {
            Console.out(json ? result.jsonLine : result.text)
        }
        func wanted(_ name: String) -> Bool { only.map { name.hasPrefix($0) || $0.hasPrefix(name) } ?? true }
        #if DEBUG
        if !json { Console.error("sync-bench: this is a debug build; figures mean little. Use: swift run -c release sync-bench") }
        #endif
        do {
            if wanted("baseline.reduce") { report(reduceBaseline(quick: quick)) }
            if wanted("store") {
                report(storeDispatch(selectors: 0, quick: quick))
                report(storeDispatch(selectors: 100, quick: quick))
            }
            if wanted("codable") || wanted("handwritten") { codableApply(quick: quick).forEach(report) }
            if wanted("baseline.socket") { report(try socketBaseline(frames: quick ? 100_000 : 2_000_000)) }
            if wanted("hub") {
                report(try hubThroughput(replicas: 4, actions: quick ? 20_000 : 200_000))
                report(try hubThroughput(replicas: 4, actions: quick ? 20_000 : 200_000, fsync: .batch))
                report(try hubThroughput(replicas: 4, actions: quick ? 2_000 : 20_000, fsync: .always))
                report(try hubThroughput(replicas: 4, actions: quick ? 20_000 : 200_000, stalled: 1))
                report(try await hubLatency(replicas: 4, samples: quick ? 500 : 5_000))
            }
            if wanted("hydrate") { report(try hydrate(stateBytes: 1 << 20)) }
            if wanted("resume") { report(try resume(actions: 10_000)) }
            if wanted("recovery") {
                // The default configuration (a snapshot every 100,000 actions), then the worst
                // case: no snapshot, the whole journal replayed.
                report(try recovery(actions: quick ? 100_000 : 1_000_000, snapshotEvery: 100_000))
                report(try recovery(actions: quick ? 100_000 : 1_000_000, snapshotEvery: 0))
            }
        } catch {
            Console.error("sync-bench: \(error)")
            exit(1)
        }
    }
}
