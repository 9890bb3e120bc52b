#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import StoreReplica
import SyncCore
import SyncPOSIX

/// `replica-cli top`: a live view of a hub, like `redis-cli --stat` or `nats top`. Once per
/// interval it asks the hub for its `status` and shows the seq, actions per second, the
/// digest, storage, and each attached replica (name, id, uid, pid, lag, queued bytes). On a
/// terminal the view is redrawn in place; otherwise (a pipe, a file) each refresh is one line
/// of text, or one JSON object with `--json`. It needs no app: it works with any hub.
enum TopCommand {
    /// Runs until SIGINT or SIGTERM (exit 0), or until the hub goes (exit 1).
    ///
    /// - Parameters:
    ///   - connection: A connection to the hub that has sent nothing yet.
    ///   - options: The command line (`--json`, and `--count N` in ``ReplicaOptions/arguments``).
    static func run(over connection: HubConnection, options: ReplicaOptions) throws(ReplicaError) {
        var count: Int?
        var interval = 1.0
        var arguments = options.arguments[...]
        while let argument = arguments.popFirst() {
            switch argument {
            case "--count":
                guard let text = arguments.popFirst(), let number = Int(text), number > 0 else {
                    fail("top --count needs a positive whole number", status: 2)
                }
                count = number
            case "--interval":
                guard let text = arguments.popFirst(), let number = Double(text), number >= 0.1, number <= 3_600 else {
                    fail("top --interval needs a number of seconds from 0.1 to 3600", status: 2)
                }
                interval = number
            default:
                fail("top takes --count N and --interval SECONDS, not \"\(shown(argument))\"", status: 2)
            }
        }
        ReplicaCommand.exitOnTerminationSignal()
        let terminal = isatty(STDOUT_FILENO) == 1 && !options.json
        var previous: (seq: UInt64, at: ContinuousClock.Instant)?
        var refreshes = 0
        while true {
            let status = try connection.status()
            let now = ContinuousClock.now
            var rate: Double?
            if let previous {
                let seconds = Double((now - previous.at).components.seconds) + Double((now - previous.at).components.attoseconds) / 1e18
                if seconds > 0 { rate = Double(status.seq &- min(status.seq, previous.seq)) / seconds }
            }
            previous = (status.seq, now)
            if options.json {
                var line: [JSONKey: JSON] = ["seq": JSON(status.seq), "digest": .string(status.digest), "hub": .string(status.hub),
                                             "app": .string(status.app), "replicas": JSON(status.replicas.count)]
                if let rate { line["actions_per_s"] = .number(rate.rounded()) }
                if let unavailable = status.storage?["unavailable"] { line["unavailable"] = unavailable }
                line["max_lag"] = JSON(status.replicas.compactMap(\.lag).max() ?? 0)
                Console.out(JSON.object(line).canonicalString)
            } else if terminal {
                Console.control("\u{1B}[H\u{1B}[2J")
                Console.out(screen(status, rate: rate))
            } else {
                Console.out(summary(status, rate: rate))
            }
            refreshes += 1
            if let count, refreshes >= count { return }
            usleep(useconds_t(interval * 1_000_000))
        }
    }

    /// One line: what a pipe gets per refresh.
    static func summary(_ status: HubStatus, rate: Double?) -> String {
        let lag = status.replicas.compactMap(\.lag).max() ?? 0
        var line = "seq \(status.seq)  actions/s \(rate.map { String(Int($0.rounded())) } ?? "-")  replicas \(status.replicas.count)  max lag \(lag)  digest \(status.digest)"
        if let unavailable = status.storage?["unavailable"]?.stringValue { line += "  UNAVAILABLE: \(ControlCharacters.escaped(unavailable))" }
        return line
    }

    /// The full view, for a terminal.
    static func screen(_ status: HubStatus, rate: Double?) -> String {
        // The log's health first (refusing, a shared log's link), as plain `status` prints it.
        var lines = ReplicaCommand.healthLines(status)
        lines.append("hub \(status.hub)  app \(status.app) (\(status.fingerprint))  history \(status.history ?? "-")")
        lines.append(summary(status, rate: rate))
        if let storage = status.storage {
            if status.log?["kind"]?.stringValue == "nats" {
                // The stream's durability is NATS's: a shared log has no fsync mode of its own.
                lines.append("storage  shared log (NATS)  local snapshots \(storage["data_dir"]?.stringValue.map(ControlCharacters.escaped) ?? "none")  snapshot at seq \(storage["snapshot_seq"]?.intValue ?? 0)")
            } else {
                let fsync = storage["fsync"]?.stringValue ?? "memory"
                let journal = storage["journal_bytes"]?.intValue ?? 0
                lines.append("storage  fsync \(fsync)  journal \(journal) bytes  snapshot at seq \(storage["snapshot_seq"]?.intValue ?? 0)")
            }
        }
        lines.append("")
        lines.append(pad("REPLICA", 8) + pad("NAME", 24) + pad("UID", 8) + pad("PID", 9) + pad("LAG", 10) + "QUEUED BYTES")
        for replica in status.replicas {
            lines.append(pad("\(replica.replica)", 8) + pad(ControlCharacters.escaped(replica.name), 24) + pad(replica.uid.map(String.init) ?? "-", 8)
                         + pad(replica.pid.map(String.init) ?? "-", 9) + pad(replica.lag.map(String.init) ?? "-", 10)
                         + (replica.queuedBytes.map(String.init) ?? "-"))
        }
        return lines.joined(separator: "\n")
    }

    private static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? String(text.prefix(width - 1)) + " " : text + String(repeating: " ", count: width - text.count)
    }
}
