import BuiltinApps
import StoreReplica
import StoreSyncCommands
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
      --quick         Fewer iterations and replicas (a smoke run under 30 s; figures are noisier).
      --only PREFIX   Run only scenarios whose name starts with PREFIX (store, hub, raw, redis, …).
      --replicas N,…  Only these replica counts for raw, redis and hub.throughput (e.g. 4 or 1,16).
      -h, --help      Print this help and exit.
    (--only nats runs every shared-log scenario: nats.publish, hub.throughput and hub.latency on NATS.)

    SCENARIOS (every figure comes with the machine; baselines are measured in the same run):
      baseline.reduce   the bench reducer called directly (the store's in-run baseline)
      store.dispatch    dispatch with thunk middleware and one subscriber; selectors=0 and 100
                        (100 selector subscriptions, exactly one of which changes per action)
      codable.apply     decode a wire action and apply it, Codable codec vs hand-written (counter)
      baseline.socket   action-sized frames through a Unix socket pair, one reader
      raw.throughput    the transport's limit: a minimal hub writes the same pre-encoded envelopes
                        (64 per write) to N subscriber processes; N = 1, 4, 16, 64
      redis.throughput  redis-server on a Unix socket, one publisher pipelining 64 PUBLISHes of the
                        same envelope to N subscriber processes (skipped when redis-server is not
                        on PATH: apt-get install redis-server)
      hub.throughput    hub + N replica processes, json app, each dispatching with 64 of its own
                        outstanding: actions/s applied by every replica; N = 1, 4, 16, 64 in memory;
                        N = 4 with --fsync batch and always; N = 4 plus one attached replica that
                        never reads; N = 4 for a Codable app (app=codable-counter: the counter,
                        decoded through its case table), with its ratio to the json app's run;
                        N = 4 with the inspector (replica-cli inspect, a process of its own) and
                        one page reading every action it streams (inspector=1)
      hub.latency       dispatch→ack and dispatch→applied-by-all (p50/p99/p99.9) of one replica with
                        3 more attached, unloaded and at 50% of the N = 4 peak; each twice:
                        executor=global (the awaiting task resumed by the global pool) and
                        executor=replica (inside withTaskExecutorPreference(replica.executor))
      nats.publish      the shared log's baseline: envelope-sized messages published to a JetStream
                        stream by the hub's own NATS client, 256 unacknowledged at most, no
                        expectations (skipped without nats-server 2.10.23+: $STORESYNC_NATS_SERVER,
                        else .build/nats-server-*/ from Scripts/install-nats-server, else PATH)
      hub.throughput    (fsync=nats) N = 4 replicas over 1 hub and over 3 hubs on one stream of a
                        local nats-server, then 3 hubs on a stream with 3 replicas on a 3-node
                        cluster on loopback (stream_replicas=3, with its own nats.publish);
                        hub.latency (log=nats) unloaded
      hub.rss           the hub's resident memory: at rest, with 64 idle replicas, after 1,000,000
                        actions, the same with the inspector and a page open (page1M), after
                        1,000,000 actions with 63 of 64 replicas not reading, and
                        with a 10 MiB state and 50 joiners that never read their welcome (welcome50)
      hydrate           a new replica attaching to a 1 MiB state: connect to applied welcome, ms
      upgrade           the pause of a todos@1 → todos@2 upgrade of a 1 MiB and a 10 MiB state:
                        request to a waiting replica's first dispatch acknowledged, ms
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
        var worker = false, socket = "", count = 0, total = 0, window = 0, app = "json"
        var subscriber: String?
        var replicaCounts: [Int]?
        var hubChild: String?
        var inspector = false
        while let argument = cursor.next() {
            switch argument {
            case "--json": json = true
            case "--quick": quick = true
            case "--only": only = cursor.next()
            case "--worker": worker = true
            case "--socket": socket = cursor.next() ?? ""
            case "--count": count = Int(cursor.next() ?? "") ?? 0
            case "--total": total = Int(cursor.next() ?? "") ?? 0
            case "--replicas": replicaCounts = (cursor.next() ?? "").split(separator: ",").compactMap { Int($0) }
            case "--window": window = Int(cursor.next() ?? "") ?? 0
            case "--app": app = cursor.next() ?? "json"
            case "--raw-sub", "--redis-sub": subscriber = argument
            case "--hub-child": hubChild = cursor.next()
            case "--inspector": inspector = true
            case "-h", "--help":
                Console.out(usage)
                exit(0)
            default:
                Console.error("sync-bench: unknown argument \"\(argument)\"; see sync-bench --help")
                exit(2)
            }
        }
        if inspector {
            // The inspector (replica-cli inspect) as a process of its own, for hub.throughput with a page open.
            // Registered as replica-cli registers its apps.
            ReplicaSpecialization.register(JSONApp.self)
            await ReplicaCommand.main(apps: [JSONApp()], commandLine: ["replica-cli", "--socket", socket, "inspect", "--http", "127.0.0.1:0"])
            exit(0)
        }
        if worker { runWorker(socket: socket, count: count, total: total, window: window, app: app) }
        if subscriber == "--raw-sub" { runRawSubscriber(socket: socket, count: count) }
        if subscriber == "--redis-sub" { runRedisSubscriber(socket: socket, count: count) }
        if let hubChild { runHubChild(socket: socket, dataDirectory: hubChild, snapshotEvery: count) }
        UnixSocket.ignoreBrokenPipes()

        // Main metrics of the in-run baselines, by scenario and replica count.
        var baselines: [String: Double] = [:]
        func report(_ measured: Result) {
            var result = measured
            let replicas = result.params.first { $0.0 == "replicas" }?.1.intValue ?? 0
            func param(_ name: String) -> String? { result.params.first { $0.0 == name }?.1.stringValue }
            // The stream replicas of a shared-log scenario: its nats.publish baseline is the one on as many.
            let streamReplicas = result.params.first { $0.0 == "stream_replicas" }?.1.intValue ?? 1
            func ratio(to key: String, as name: String) {
                if let baseline = baselines[key], baseline > 0 { result.ratios.append((name, result.value / baseline)) }
            }
            switch result.scenario {
            case "baseline.reduce", "handwritten.apply":
                baselines[result.scenario] = result.value
            case "store.dispatch":
                ratio(to: "baseline.reduce", as: "baseline.reduce")
            case "codable.apply":
                ratio(to: "handwritten.apply", as: "handwritten.apply")
            case "raw.throughput":
                baselines["raw/\(replicas)"] = result.value
            case "redis.throughput":
                baselines["redis/\(replicas)"] = result.value
                ratio(to: "raw/\(replicas)", as: "raw.throughput")
            case "nats.publish":
                baselines["nats/\(streamReplicas)"] = result.value
            case "hub.throughput":
                if param("fsync") == "nats" {
                    ratio(to: "nats/\(streamReplicas)", as: "nats.publish")
                    ratio(to: "hub/\(replicas)", as: "hub.throughput (memory)")
                } else if param("app") == "codable-counter" {
                    ratio(to: "hub/\(replicas)", as: "hub.throughput (json app)")
                } else if param("fsync") == "memory", result.params.first(where: { $0.0 == "stalled" })?.1 == 0,
                          result.params.first(where: { $0.0 == "inspector" }) == nil {
                    baselines["hub/\(replicas)"] = result.value
                    ratio(to: "raw/\(replicas)", as: "raw.throughput")
                    ratio(to: "redis/\(replicas)", as: "redis.throughput")
                } else {
                    ratio(to: "hub/\(replicas)", as: "hub.throughput (memory)")
                }
            default:
                break
            }
            Console.out(json ? result.jsonLine : result.text)
        }
        if !json { Console.out(Machine.current.text) }
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
            let fanOuts = replicaCounts ?? (quick ? [4, 64] : [1, 4, 16, 64])
            for replicas in fanOuts {
                if wanted("raw") {
                    report(try rawThroughput(replicas: replicas, frames: (quick ? 200_000 : 2_000_000) / max(1, replicas / 4)))
                }
                if wanted("redis") {
                    if let result = try redisThroughput(replicas: replicas, messages: (quick ? 100_000 : 1_000_000) / max(1, replicas / 4)) {
                        report(result)
                    } else if replicas == fanOuts[0] {
                        Console.error("sync-bench: redis.throughput skipped: redis-server is not on PATH (apt-get install redis-server)")
                    }
                }
            }
            var peak = 100_000.0
            if wanted("hub") {
                for replicas in fanOuts where wanted("hub.throughput") {
                    let actions = (quick ? 20_000 : 200_000) / max(1, replicas / 8)
                    let result = try hubThroughput(replicas: replicas, actions: actions)
                    if replicas == 4, let measured = result.metrics.first?.1 { peak = measured }
                    report(result)
                    if replicas == 4 {
                        // The same run for a Codable app (the counter, decoded through its case table).
                        report(try hubThroughput(replicas: 4, actions: quick ? 20_000 : 200_000, app: "codable"))
                    }
                }
                if wanted("hub.throughput"), replicaCounts == nil {
                    report(try hubThroughput(replicas: 4, actions: quick ? 20_000 : 200_000, fsync: .batch))
                    report(try hubThroughput(replicas: 4, actions: quick ? 2_000 : 20_000, fsync: .always))
                    report(try hubThroughput(replicas: 4, actions: quick ? 20_000 : 200_000, stalled: 1))
                    // The inspector attached and one page reading every action it streams.
                    report(try hubThroughput(replicas: 4, actions: quick ? 20_000 : 200_000, inspector: true))
                }
                if wanted("hub.latency") {
                    // Each twice: the dispatching task resumed by the global pool (no preference),
                    // and on the replica's reader thread (`withTaskExecutorPreference(replica.executor)`).
                    for onReader in [false, true] {
                        report(try await hubLatency(replicas: 4, samples: quick ? 500 : 5_000, loadRate: 0, label: "unloaded",
                                                    onReader: onReader))
                        report(try await hubLatency(replicas: 4, samples: quick ? 500 : 5_000, loadRate: peak / 2, label: "50%",
                                                    onReader: onReader))
                    }
                }
                if wanted("hub.rss") { try hubRSS(actions: quick ? 100_000 : 1_000_000).forEach(report) }
            }
            if wanted("nats") || wanted("hub.throughput") || wanted("hub.latency"), replicaCounts == nil {
                if let nats = try BenchNATS() {
                    defer { nats.stop() }
                    report(try natsPublishBaseline(nats, messages: quick ? 20_000 : 200_000))
                    let natsOnly = only?.hasPrefix("nats") == true
                    if wanted("hub.throughput") || natsOnly {
                        for hubs in [1, 3] {
                            report(try hubThroughputNATS(nats, hubs: hubs, replicas: 4, actions: quick ? 10_000 : 100_000))
                        }
                    }
                    if wanted("hub.latency") || natsOnly {
                        report(try await hubLatency(replicas: 4, samples: quick ? 300 : 3_000, loadRate: 0, label: "unloaded",
                                                    log: try sharedLog(nats, stream: "LAT\(UInt32.random(in: 0...UInt32.max))")))
                    }
                    // Three hubs on a stream with three replicas, on a 3-node cluster on loopback:
                    // every record is committed by a quorum before any hub applies it.
                    if wanted("hub.throughput") || natsOnly, let cluster = try BenchNATS(servers: 3) {
                        defer { cluster.stop() }
                        report(try natsPublishBaseline(cluster, messages: quick ? 10_000 : 100_000))
                        report(try hubThroughputNATS(cluster, hubs: 3, replicas: 4, actions: quick ? 10_000 : 50_000))
                    }
                } else {
                    Console.error("sync-bench: nats.publish and the shared-log scenarios skipped: \(BenchNATS.server.skipped)")
                }
            }
            if wanted("hydrate") { report(try hydrate(stateBytes: 1 << 20)) }
            if wanted("resume") { report(try resume(actions: 10_000)) }
            if wanted("upgrade") {
                // The pause an upgrade costs: 1 MiB and 10 MiB states (goal: at most 1 s for 10 MiB).
                report(try upgradePause(stateBytes: 1 << 20))
                report(try upgradePause(stateBytes: 10 << 20))
            }
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
