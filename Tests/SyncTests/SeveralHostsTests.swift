import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SyncPOSIX
import SyncProtocol
import Testing

/// The `ip` command, if this machine has it.
let ipCommand: String? = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].first { access($0, X_OK) == 0 }

/// Runs a command to completion; its output is returned, a failure thrown with it.
@discardableResult
func runCommand(_ executable: String, _ arguments: [String]) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try process.run()
    let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
        throw HarnessError("\(executable) \(arguments.joined(separator: " ")) failed (\(process.terminationStatus)): \(output)")
    }
    return output
}

/// What a process's threads are doing, for a failure report: their top frames from gdb
/// (`thread apply all bt`), or why there are none.
func threadReport(_ pid: Int32) -> String {
    guard FileManager.default.isExecutableFile(atPath: "/usr/bin/gdb") else { return "(no gdb to show its threads)" }
    do {
        let output = try runCommand("/usr/bin/gdb", ["-p", "\(pid)", "-batch", "-ex", "thread apply all bt 12"])
        let lines = output.split(separator: "\n").filter { $0.hasPrefix("#") || $0.hasPrefix("Thread ") }
        return lines.prefix(160).joined(separator: "\n")
    } catch {
        return "(gdb could not attach: \(error))"
    }
}

/// Hosts simulated with network namespaces: one namespace per host, each with a veth pair to a
/// bridge in a "switch" namespace, addresses in a /24 chosen at random inside the namespaces
/// this test creates (nothing is added to the machine's own namespace). ``remove()`` deletes
/// every namespace (and with them the links); call it in a `defer`.
final class TestNetwork: Sendable {
    let ip: String
    let tag: String
    let subnet: String
    let hosts: Int

    /// Creates the namespaces, or throws when this machine cannot (not root, no `ip`, no netns).
    init(hosts: Int) throws {
        guard let ip = ipCommand else { throw HarnessError("no ip command") }
        self.ip = ip
        self.hosts = hosts
        tag = String(UInt32.random(in: 0..<0xFFFFFF), radix: 16)
        subnet = "10.\(UInt8.random(in: 200...250)).\(UInt8.random(in: 1...250))"
        do {
            try runCommand(ip, ["netns", "add", switchName])
            try runCommand(ip, ["-n", switchName, "link", "add", "br0", "type", "bridge"])
            try runCommand(ip, ["-n", switchName, "link", "set", "br0", "up"])
            for host in 1...hosts {
                try runCommand(ip, ["netns", "add", namespace(host)])
                try runCommand(ip, ["-n", namespace(host), "link", "set", "lo", "up"])
                try runCommand(ip, ["-n", namespace(host), "link", "add", "eth0", "type", "veth", "peer", "name", port(host),
                                    "netns", switchName])
                try runCommand(ip, ["-n", switchName, "link", "set", port(host), "master", "br0"])
                try runCommand(ip, ["-n", switchName, "link", "set", port(host), "up"])
                try runCommand(ip, ["-n", namespace(host), "addr", "add", address(host) + "/24", "dev", "eth0"])
                try runCommand(ip, ["-n", namespace(host), "link", "set", "eth0", "up"])
            }
        } catch {
            remove()
            throw error
        }
    }

    var switchName: String { "ss-sw-\(tag)" }
    func namespace(_ host: Int) -> String { "ss-h\(host)-\(tag)" }
    func port(_ host: Int) -> String { "p\(host)-\(tag)" }
    func address(_ host: Int) -> String { "\(subnet).\(host)" }

    /// Cuts (or restores) a host's only link: its namespace keeps running, unreachable.
    func setLink(_ host: Int, up: Bool) throws {
        try runCommand(ip, ["-n", switchName, "link", "set", port(host), up ? "up" : "down"])
    }

    /// Deletes every namespace this network made (idempotent).
    func remove() {
        for name in [switchName] + (1...max(1, hosts)).map(namespace) {
            _ = try? runCommand(ip, ["netns", "delete", name])
        }
    }
}

extension MultiProcessTests {
    @Suite("Several hosts: a 3-node NATS cluster and an R3 stream, one hub per host in its own network namespace",
           .enabled(if: natsServerPath != nil, Comment(rawValue: natsMissing)))
    struct SeveralHostsTests {
        @Test("kill one NATS node: the order goes on; cut one host's link: its dispatches get unavailable, nothing is lost, and it catches up when the link returns")
        func threeHosts() async throws {
            let network: TestNetwork
            do {
                guard runningAsRoot else { throw HarnessError("not root") }
                network = try TestNetwork(hosts: 3)
            } catch {
                print("skipped: network namespaces cannot be created here (\(error)); the several-hosts test needs root and ip netns")
                return
            }
            defer { network.remove() }
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            // Processes in the namespaces die with the fixture; the namespaces are removed after.
            _ = chmod(fixture.directory, 0o755)

            let nats = try (1...3).map { host in
                try NATSServer(fixture: fixture, name: "n\(host)", host: network.address(host), port: 4222, clusterPort: 6222,
                               routes: (1...3).filter { $0 != host }.map { "\(network.address($0)):6222" },
                               namespace: network.namespace(host))
            }
            for server in nats { try await server.start() }
            let hubs = SharedHubs(fixture: fixture, nats: nats)
            let hubd = try Executables.url("hubd").path
            var processes: [ChildProcess] = []
            for host in 1...3 {
                // Its own node first, then the others.
                let order = [nats[host - 1]] + nats.filter { $0 !== nats[host - 1] }
                let child = try fixture.spawn(network.ip, ["netns", "exec", network.namespace(host), hubd,
                                                           "--socket", hubs.socket(host), "--app", "json",
                                                           "--log", hubs.url(order), "--nats-replicas", "3",
                                                           "--log-key-file", hubs.keyFile], name: "hub\(host)")
                processes.append(child)
            }
            for host in 1...3 {
                let child = processes[host - 1]
                try await waitUntil("hub \(host) to serve; \(child.errorLines.suffix(5))", timeout: .seconds(90)) {
                    guard child.isRunning else { throw HarnessError("hub \(host) exited: \(child.errorLines.suffix(10))") }
                    return (try? HubStatusProbe.status(hubs.socket(host))) != nil
                }
            }
            var clients: [Int: RawClient] = [:]
            for host in 1...3 { clients[host] = try hubs.attach(host, session: "client-\(host)").0 }
            defer { for client in clients.values { client.close() } }
            var nextID = 0
            /// Dispatches one action on `host` and waits for its own action (or a refusal).
            func dispatch(_ host: Int, timeout: Duration = .seconds(60)) throws -> JSON {
                nextID += 1
                let id = nextID
                guard let client = clients[host] else { throw HarnessError("no client on \(host)") }
                try client.send(["type": "dispatch", "id": JSON(id), "action": ["type": "append", "path": "/log", "value": JSON(id)]])
                let deadline = ContinuousClock.now + scaled(timeout)
                while ContinuousClock.now < deadline {
                    if let answer = try answer(host, id: id, pollMilliseconds: 100) { return answer }
                }
                let status: String
                do {
                    let answer = try HubStatusProbe.status(hubs.socket(host))
                    status = "seq \(answer.seq), log \(String(describing: answer.log)), storage \(String(describing: answer.storage))"
                } catch {
                    status = "no answer (\(error))"
                }
                throw HarnessError("dispatch \(id) on hub \(host) unanswered after \(timeout); its status: \(status); its log: \(processes[host - 1].errorLines.suffix(40)); its threads:\n\(threadReport(processes[host - 1].pid))")
            }
            /// Answers read on each host's client, by dispatch id (every answer is kept: one read
            /// while waiting for another dispatch is found later).
            var answers: [Int: [Int: JSON]] = [:]
            /// The answer to dispatch `id` on `host`, reading for up to `pollMilliseconds`.
            func answer(_ host: Int, id: Int, pollMilliseconds: Int32) throws -> JSON? {
                if let found = answers[host]?[id] { return found }
                guard let client = clients[host] else { throw HarnessError("no client on \(host)") }
                let polled: JSON?
                do { polled = try client.poll(timeoutMilliseconds: pollMilliseconds) } catch {
                    throw HarnessError("hub \(host): \(error); running \(processes[host - 1].isRunning); its log: \(processes[host - 1].errorLines.suffix(30))")
                }
                if let message = polled, let got = message["id"]?.intValue,
                   ["action", "reject", "duplicate"].contains(message["type"]?.stringValue ?? "") {
                    answers[host, default: [:]][got] = answers[host]?[got] ?? message
                }
                return answers[host]?[id]
            }
            var applied: [Int] = []
            var refusedIDs: [Int] = []
            /// Dispatches on `host` until one is applied; refusals must be `unavailable`.
            func dispatchUntilApplied(_ host: Int) async throws {
                // A 2-node NATS cluster may take a while to elect leaders on a starved machine.
                let deadline = ContinuousClock.now + scaled(.seconds(180))
                while true {
                    let answer = try dispatch(host, timeout: .seconds(90))
                    guard let id = answer["id"]?.intValue else { return }
                    if answer["type"] == "action" {
                        applied.append(id)
                        return
                    }
                    #expect(answer["error"]?["code"] == "unavailable", "hub \(host): \(answer)")
                    refusedIDs.append(id)
                    guard ContinuousClock.now < deadline else {
                        Issue.record("hub \(host) refused every dispatch for 180 s (last: \(answer)); its log: \(processes[host - 1].errorLines.suffix(25))")
                        return
                    }
                    // Retried after a pause, as a client would (the stream elects a leader).
                    try await Task.sleep(for: .milliseconds(200))
                }
            }
            for host in 1...3 { try await dispatchUntilApplied(host) }

            // Cut host 2: the others go on; its hub refuses with unavailable once it knows.
            try network.setLink(2, up: false)
            try await dispatchUntilApplied(1)
            nextID += 1
            let inDoubtID = nextID
            try clients[2]?.send(["type": "dispatch", "id": JSON(inDoubtID), "action": ["type": "append", "path": "/log", "value": JSON(inDoubtID)]])
            do {
                try await waitUntil("hub 2 to say its log is unavailable", timeout: .seconds(60)) {
                    (try? HubStatusProbe.status(hubs.socket(2)))?.storage?["unavailable"] != nil
                }
            } catch {
                // Say what hub 2 knew, not only that it did not say so.
                let status = try? HubStatusProbe.status(hubs.socket(2))
                throw HarnessError("\(error); hub 2: seq \(String(describing: status?.seq)), log \(String(describing: status?.log)); it logged: \(processes[1].errorLines.suffix(30))")
            }
            let refused = try dispatch(2, timeout: .seconds(5))
            #expect(refused["type"] == "reject" && refused["error"]?["code"] == "unavailable", "\(refused)")

            // The link returns: the dispatch in doubt is settled (once, or refused), hub 2 catches up.
            try network.setLink(2, up: true)
            var settled: JSON?
            let deadline = ContinuousClock.now + scaled(.seconds(90))
            while settled == nil, ContinuousClock.now < deadline {
                // Refused at once if the hub already knew its link was gone; else settled later.
                settled = try answer(2, id: inDoubtID, pollMilliseconds: 100)
            }
            let outcome = try #require(settled, "the dispatch in doubt was never settled; hub 2: \(processes[1].errorLines.suffix(30)); seq \(String(describing: (try? HubStatusProbe.status(hubs.socket(2)))?.seq)), log \(String(describing: (try? HubStatusProbe.status(hubs.socket(2)))?.log))")
            if outcome["type"] == "action" { applied.append(inDoubtID) }
            try await waitUntil("hub 2 to take dispatches again", timeout: .seconds(90)) {
                (try? HubStatusProbe.status(hubs.socket(2)))?.storage?["unavailable"] == nil
            }
            // Right after the link returns the stream may still be electing a leader: a
            // dispatch refused with unavailable then is retried, as a client does.
            try await dispatchUntilApplied(2)

            // Kill one NATS node: the two others keep the order (hubs 1 and 2 go on). Hub 3's own
            // server is gone: it moves to another, where reading again needs the cluster's
            // JetStream API, which nats-server 2.9 has been seen to leave "temporarily
            // unavailable" for minutes after losing the node that led it. Meanwhile hub 3 may
            // only refuse (unavailable) or leave a dispatch in doubt; if it is back within 90 s
            // it must converge too.
            // What this phase showed on nats-server 2.9 (now refused), and what the hubs do:
            // - A leaderless stream's STREAM.INFO (one member's stale copy) is no verdict.
            // - A consumer that sends nothing while the stream holds more is replaced by reads
            //   from the leader.
            // - 2.9.10 lost acknowledged records across the earlier link cut, and could leave
            //   the stream leaderless for minutes: a hub that read lost records stops, naming
            //   them, rather than serve a history the stream no longer holds.
            // Strict since nats-server 2.12.8 is pinned (2.9 is refused): what 2.9 did here (lose
            // acknowledged actions, leave the stream leaderless for minutes) is not seen on it.
            do {
                do {
                    try await nats[2].kill()
                    for host in 1...2 { try await dispatchUntilApplied(host) }
                    var doubtful: Set<Int> = []
                    var hub3Back = false
                    let hub3Deadline = ContinuousClock.now + scaled(.seconds(90))
                    while !hub3Back, ContinuousClock.now < hub3Deadline {
                        guard let answer = try? dispatch(3, timeout: .seconds(20)) else {
                            doubtful.insert(nextID)   // unanswered: in doubt, applied once or never
                            continue
                        }
                        guard let id = answer["id"]?.intValue else { break }
                        if answer["type"] == "action" {
                            applied.append(id)
                            hub3Back = true
                        } else {
                            #expect(answer["error"]?["code"] == "unavailable", "hub 3: \(answer)")
                            refusedIDs.append(id)
                            try await Task.sleep(for: .milliseconds(200))
                        }
                    }
                    if !hub3Back { print("note: hub 3 could not read the stream within 90 s after its NATS server died (the cluster's JetStream API stayed unavailable); checked hubs 1 and 2 only") }
                    let hosts = hub3Back ? [1, 2, 3] : [1, 2]
                    var statuses: [HubStatus] = []
                    do {
                        _ = try await hubs.settled(hosts, at: UInt64(applied.count), timeout: .seconds(90))
                        // Dispatches in doubt may still land: wait until the hubs agree on one seq.
                        try await waitUntil("hubs \(hosts) to agree on one seq", timeout: .seconds(60)) {
                            statuses = hosts.compactMap { try? HubStatusProbe.status(hubs.socket($0)) }
                            return statuses.count == hosts.count && Set(statuses.map(\.seq)).count == 1
                        }
                    } catch {
                        // What each hub holds, and what it said, to tell a lost dispatch from a stuck hub.
                        var report = "acknowledged \(applied.sorted()), refused \(refusedIDs), in doubt \(doubtful.sorted())"
                        for host in 1...3 {
                            let log = (try? hubs.attach(host, session: nil))
                                .map { client, welcome in client.close(); return welcome["state"]?["log"]?.arrayValue?.compactMap(\.intValue) ?? [] }
                            report += "\nhub \(host): state \(log.map { "\($0)" } ?? "unreachable"); stderr \(processes[host - 1].errorLines.suffix(15))"
                        }
                        throw HarnessError("\(error)\n\(report)")
                    }
                    #expect(Set(statuses.map(\.digest)).count == 1, "\(statuses.map(\.digest))")
                    // Each acknowledged dispatch is in the state once; refused ones are not; one in doubt
                    // at most once.
                    let (reader, welcome) = try hubs.attach(1)
                    reader.close()
                    let log = welcome["state"]?["log"]?.arrayValue?.compactMap(\.intValue) ?? []
                    #expect(log.count == Set(log).count, "a dispatch applied twice: \(log)")
                    #expect(Set(applied).isSubset(of: Set(log)), "state \(log), acknowledged \(applied)")
                    #expect(Set(log).isSubset(of: Set(applied).union(doubtful)), "state \(log), acknowledged \(applied), in doubt \(doubtful)")
                    #expect(UInt64(log.count) >= statuses.first?.seq ?? 0)
                    #expect(!log.contains(refused["id"]?.intValue ?? -1))
                    #expect(Set(log).isDisjoint(with: refusedIDs))
                } catch {
                    // What every hub said, to tell a stuck hub from a stopped one.
                    let logs = (1...3).map { "hub \($0) (running \(processes[$0 - 1].isRunning)): \(processes[$0 - 1].errorLines.suffix(30))" }
                    throw HarnessError("\(error)\n" + logs.joined(separator: "\n"))
                }
            }
        }
    }
}
