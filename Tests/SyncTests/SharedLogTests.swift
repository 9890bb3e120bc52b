import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import BuiltinApps
import NATSClient
import StoreHub
import StoreSyncTesting
import SyncPOSIX
import SyncProtocol
import Testing

/// Hubs of one test that share one JetStream stream on one `nats-server`.
struct SharedHubs {
    let fixture: Fixture
    let nats: [NATSServer]
    let stream: String

    init(fixture: Fixture, nats: [NATSServer], stream: String = "T\(UInt32.random(in: 0...UInt32.max))") {
        self.fixture = fixture
        self.nats = nats
        self.stream = stream
    }

    /// The socket of hub `index`.
    func socket(_ index: Int) -> String { fixture.directory + "/hub\(index).sock" }

    /// `nats://…/STREAM` naming `servers` (default: every server of the test).
    func url(_ servers: [NATSServer]? = nil) -> String {
        "nats://" + (servers ?? nats).map(\.address).joined(separator: ",") + "/" + stream
    }

    /// The key file every hub of the test shares (`--log-key-file`), written once.
    var keyFile: String {
        let path = fixture.directory + "/log-key"
        if access(path, F_OK) != 0 {
            let key = Array("test-log-key-\(stream)-0123456789abcdef0123456789".utf8) + [10]
            _ = FileManager.default.createFile(atPath: path, contents: Data(key), attributes: [.posixPermissions: 0o600])
        }
        return path
    }

    /// Starts hub `index` on the stream and waits until it serves.
    @discardableResult
    func start(_ index: Int, app: String = "json", log: String? = nil, extra: [String] = []) async throws -> ChildProcess {
        let socket = socket(index)
        let hub = try fixture.spawn("hubd", ["--socket", socket, "--app", app, "--log", log ?? url(), "--log-key-file", keyFile] + extra,
                                    name: "hub\(index)")
        try await waitUntil("hub \(index) to serve on \(socket); stderr: \(hub.errorLines.suffix(5))") {
            guard hub.isRunning else { throw HarnessError("hub \(index) exited: \(hub.errorLines.suffix(10))") }
            return (try? HubStatusProbe.status(socket)) != nil
        }
        return hub
    }

    /// A raw client attached to hub `index`, and its welcome.
    func attach(_ index: Int, session: String? = nil, resume: (history: String, seq: UInt64)? = nil) throws -> (RawClient, JSON) {
        let client = try RawClient(path: socket(index))
        var hello: [JSONKey: JSON] = ["type": "hello", "protocol": 1, "app": "json"]
        if let session { hello["session"] = .string(session) }
        if let resume { hello["resume"] = ["history": .string(resume.history), "seq": JSON(resume.seq)] }
        try client.send(.object(hello))
        let welcome = try client.receive()
        guard welcome["type"] == "welcome" else { throw HarnessError("expected a welcome from hub \(index), got \(welcome)") }
        return (client, welcome)
    }

    /// Waits until every hub in `indices` has applied `seq`, and returns their statuses.
    func settled(_ indices: [Int], at seq: UInt64, timeout: Duration = .seconds(60)) async throws -> [HubStatus] {
        var statuses: [HubStatus] = []
        try await waitUntil("hubs \(indices) to reach seq \(seq); they are at \(statuses.map(\.seq))", timeout: timeout) {
            statuses = indices.compactMap { try? HubStatusProbe.status(socket($0)) }
            return statuses.count == indices.count && statuses.allSatisfy { $0.seq >= seq }
        }
        return statuses
    }
}

/// The next message on `client` that satisfies `match`, skipping others (deadline scaled).
func next(_ client: RawClient, _ what: String, where match: (JSON) -> Bool) throws -> JSON {
    let deadline = ContinuousClock.now + scaled(.seconds(30))
    while ContinuousClock.now < deadline {
        if let message = try client.poll(timeoutMilliseconds: 100), match(message) { return message }
    }
    throw HarnessError("no \(what) within 30 s")
}

/// A `set` action.
func setAction(_ path: String, _ value: Int) -> JSON { ["type": "set", "path": .string(path), "value": JSON(value)] }

extension MultiProcessTests {
    @Suite("Shared log: hubs on one NATS JetStream stream", .enabled(if: natsServerPath != nil, Comment(rawValue: natsMissing)))
    struct SharedLogTests {
        @Test("two hubs, one order: actions reach both; a session's dispatch re-sent to the other hub is a duplicate with its original seq; a replica resumes on the other hub")
        func twoHubsOneOrder() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let nats = try NATSServer(fixture: fixture)
            try await nats.start()
            let hubs = SharedHubs(fixture: fixture, nats: [nats])
            async let first = hubs.start(0)
            async let second = hubs.start(1)
            _ = try await (first, second)

            let (alpha, welcome) = try hubs.attach(0, session: "alpha")
            defer { alpha.close() }
            let history = try #require(welcome["history"]?.stringValue)
            try alpha.send(["type": "dispatch", "id": 1, "action": setAction("/a", 1)])
            let own = try next(alpha, "the action of dispatch 1") { $0["type"] == "action" }
            #expect(own["seq"] == 1)
            #expect(own["id"] == 1)

            // The same session, its connection moved to the other hub, re-sends dispatch 1.
            let (moved, movedWelcome) = try hubs.attach(1, session: "alpha", resume: (history, 1))
            defer { moved.close() }
            #expect(movedWelcome["resumed"] == true)
            #expect(movedWelcome["history"]?.stringValue == history)
            try moved.send(["type": "dispatch", "id": 1, "action": setAction("/a", 1)])
            let duplicate = try next(moved, "the duplicate") { $0["type"] == "duplicate" || $0["type"] == "action" }
            #expect(duplicate["type"] == "duplicate")
            #expect(duplicate["seq"] == 1)
            try moved.send(["type": "dispatch", "id": 2, "action": setAction("/b", 2)])
            let second2 = try next(moved, "the action of dispatch 2") { $0["type"] == "action" }
            #expect(second2["seq"] == 2)
            // The first hub's replica sees the other hub's action, in order.
            let relayed = try next(alpha, "the other hub's action") { $0["type"] == "action" }
            #expect(relayed["seq"] == 2)
            #expect(relayed["action"] == setAction("/b", 2))

            let statuses = try await hubs.settled([0, 1], at: 2)
            #expect(Set(statuses.map(\.digest)).count == 1)
            #expect(Set(statuses.map(\.history)).count == 1)
            #expect(statuses.allSatisfy { $0.seq == 2 })
            let log = try #require(statuses[0].log)
            #expect(log["kind"] == "nats")
            #expect(log["stream"]?.stringValue == hubs.stream)
            #expect(log["connected"] == true)
            #expect(log["applied_seq"] == 2)
        }

        @Test("a stale hub (SIGSTOP while the other writes) cannot append before it has caught up; a replica ahead of it waits for it, never shown an older state")
        func staleHub() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let nats = try NATSServer(fixture: fixture)
            try await nats.start()
            let hubs = SharedHubs(fixture: fixture, nats: [nats])
            try await hubs.start(0)
            let stale = try await hubs.start(1)
            let (writer, welcome) = try hubs.attach(0)
            defer { writer.close() }
            let history = try #require(welcome["history"]?.stringValue)
            let (late, _) = try hubs.attach(1)
            defer { late.close() }

            stale.signal(SIGSTOP)
            for n in 1...20 {
                try writer.send(["type": "dispatch", "id": JSON(n), "action": setAction("/n", n)])
            }
            let twentieth = try next(writer, "seq 20") { $0["type"] == "action" && $0["seq"] == 20 }
            #expect(twentieth["id"] == 20)
            // While stopped: its own replica dispatches (the frame waits in the socket), and a
            // replica that has seen seq 20 attaches to it with resume.
            try late.send(["type": "dispatch", "id": "stale-1", "action": setAction("/stale", 1)])
            let ahead = try RawClient(path: hubs.socket(1))
            defer { ahead.close() }
            try ahead.send(["type": "hello", "protocol": 1, "app": "json", "resume": ["history": .string(history), "seq": 20]])
            stale.signal(SIGCONT)

            // The stale hub's dispatch is ordered after everything it missed.
            let mine = try next(late, "the stale hub's own action") { $0["type"] == "action" && $0["id"] == "stale-1" }
            #expect(mine["seq"] == 21)
            // The replica ahead got a resumed welcome at its own seq, then seq 21.
            let resumed = try next(ahead, "the welcome") { $0["type"] == "welcome" }
            #expect(resumed["resumed"] == true)
            #expect(resumed["seq"] == 20)
            let after = try next(ahead, "seq 21") { $0["type"] == "action" }
            #expect(after["seq"] == 21)
            let statuses = try await hubs.settled([0, 1], at: 21)
            #expect(Set(statuses.map(\.digest)).count == 1)
            #expect(statuses.allSatisfy { $0.seq == 21 }, "\(statuses.map(\.seq))")
        }

        @Test("nats-server killed and restarted mid-load: dispatches in the gap get unavailable, none is lost or applied twice, the hub catches up and everything converges")
        func natsRestart() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let nats = try NATSServer(fixture: fixture)
            try await nats.start()
            let hubs = SharedHubs(fixture: fixture, nats: [nats])
            let hub0 = try await hubs.start(0)
            try await hubs.start(1)
            let (client, _) = try hubs.attach(0, session: "load")
            defer { client.close() }

            var acknowledged: [Int: UInt64] = [:]
            var acknowledgedInGap = 0
            var killedAt: ContinuousClock.Instant?
            var restarted = false
            var refused: Set<Int> = []
            var sent = 0
            func take(_ message: JSON) throws {
                switch message["type"]?.stringValue {
                case "action"?:
                    if let id = message["id"]?.intValue, let seq = message["seq"]?.intValue, id > 0 {
                        if acknowledged[id] != nil { throw HarnessError("dispatch \(id) acknowledged twice") }
                        acknowledged[id] = UInt64(seq)
                        if killedAt != nil, !restarted { acknowledgedInGap += 1 }
                    }
                case "reject"?:
                    guard message["error"]?["code"] == "unavailable", let id = message["id"]?.intValue else {
                        throw HarnessError("unexpected reject \(message)")
                    }
                    refused.insert(id)
                default:
                    break
                }
            }
            let start = ContinuousClock.now
            while ContinuousClock.now - start < .seconds(4) || !restarted {
                sent += 1
                try client.send(["type": "dispatch", "id": JSON(sent), "action": ["type": "append", "path": "/log", "value": JSON(sent)]])
                while let message = try client.poll(timeoutMilliseconds: 3) { try take(message) }
                let now = ContinuousClock.now
                if killedAt == nil, now - start > .seconds(1) {
                    try await nats.kill()
                    killedAt = .now
                } else if let killedAt, !restarted,
                          (!refused.isEmpty && now - killedAt > .seconds(1)) || now - killedAt > .seconds(10) {
                    // Down for a second, with dispatches sent meanwhile (a kill that took long on a
                    // loaded machine must not leave no gap at all); at most 10 s if none is refused.
                    try await nats.start()
                    restarted = true
                }
            }
            try await waitUntil("every dispatch answered (\(acknowledged.count) + \(refused.count) of \(sent))", timeout: .seconds(60)) {
                while let message = try client.poll(timeoutMilliseconds: 10) { try take(message) }
                return acknowledged.count + refused.count >= sent
            }
            #expect(refused.isDisjoint(with: acknowledged.keys))
            // What the hub said, should none be refused: a failure here says why, not only that.
            #expect(!refused.isEmpty, "dispatches during the gap are refused; \(acknowledgedInGap) were acknowledged while the server was down; hub 0 said: \(hub0.errorLines.suffix(12))")
            #expect(acknowledged.keys.contains(sent), "the hub takes dispatches again after the restart")
            // The state holds exactly the acknowledged dispatches, once each, in seq order.
            let expected = acknowledged.sorted { $0.value < $1.value }.map(\.key)
            let statuses = try await hubs.settled([0, 1], at: UInt64(expected.count))
            #expect(Set(statuses.map(\.digest)).count == 1)
            let (reader, welcome) = try hubs.attach(1)
            reader.close()
            #expect(welcome["state"]?["log"] == .array(expected.map { JSON($0) }))
            #expect(statuses.allSatisfy { $0.seq == UInt64(expected.count) })
        }

        /// A random JSON action of replica `replica`: increments of its own and shared counters, sets.
        static func action(_ random: inout SeededGenerator, _ replica: Int) -> JSONApp.Action {
            let shared = (try? JSONPointer("/shared/\(random.next() % 3)")) ?? .root
            let own = (try? JSONPointer("/r\(replica)/\(random.next() % 4)")) ?? .root
            switch random.next() % 4 {
            case 0: return .set(own, JSON(Int(random.next() % 100)))
            case 1: return .increment(shared, by: 1)
            default: return .increment(own, by: 1)
            }
        }

        @Test("3 hubs on one stream, 4 replica processes each, concurrent random dispatches to all hubs, a replica killed, a late joiner, a slow consumer: one order, every digest equal, every dispatch sequenced once")
        func threeHubsConverge() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let nats = try NATSServer(fixture: fixture)
            try await nats.start()
            let hubs = SharedHubs(fixture: fixture, nats: [nats])
            let harness = ConvergenceHarness(app: JSONApp(), hub: try builtExecutable("hubd"), cli: try Executables.url("replica-cli"),
                                             replicas: 12, actionsPerReplica: 60, faults: [.killReplica, .lateJoiner, .slowConsumer],
                                             hubArguments: ["--app", "json"], hubs: 3, sharedLog: hubs.url())
            let report = try await harness.run(Self.action)
            #expect(report.seq >= 11 * 60, "\(report)")
        }

        @Test("kill -9 one of 3 hubs mid-load: its replicas move to another hub and resume, the restarted hub catches up; nothing lost or doubled")
        func hubKilledReplicasMove() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let nats = try NATSServer(fixture: fixture)
            try await nats.start()
            let hubs = SharedHubs(fixture: fixture, nats: [nats])
            let harness = ConvergenceHarness(app: JSONApp(), hub: try builtExecutable("hubd"), cli: try Executables.url("replica-cli"),
                                             replicas: 6, actionsPerReplica: 80, faults: [.hubRestart],
                                             hubArguments: ["--app", "json"], hubs: 3, sharedLog: hubs.url())
            let report = try await harness.run(Self.action)
            #expect(report.seq == 6 * 80, "\(report)")
        }

        @Test("a stream deleted under the hub stops it (exit 3) with a message, never a new history under its replicas")
        func streamDeleted() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let nats = try NATSServer(fixture: fixture)
            try await nats.start()
            let hubs = SharedHubs(fixture: fixture, nats: [nats])
            let local = fixture.directory + "/local"
            let hub = try await hubs.start(0, extra: ["--data-dir", local])
            // status names the local snapshots' directory; fsync is NATS's business.
            let storage = try HubStatusProbe.status(hubs.socket(0)).storage
            #expect(storage?["data_dir"]?.stringValue == local && storage?["fsync"] == .null, "\(String(describing: storage))")
            let (client, _) = try hubs.attach(0, session: "s")
            defer { client.close() }
            try client.send(["type": "dispatch", "id": 1, "action": setAction("/a", 1)])
            _ = try next(client, "the action") { $0["type"] == "action" }
            let connection = try NATSConnection.connect(servers: [nats.address], name: "test")
            defer { connection.close() }
            _ = try connection.jetStream("STREAM.DELETE." + hubs.stream, nil)
            #expect(try await hub.waitForExit(timeout: .seconds(60)) == 3)
            #expect(hub.errorLines.contains { $0.contains("no longer exists") }, "\(hub.errorLines.suffix(5))")
        }

        @Test("a stream that no longer holds a record the hub applied (NATS replaced it) stops the hub (exit 3), naming the seq; its local snapshots are discarded and a restart follows the stream")
        func replacedRecordStopsHub() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let nats = try NATSServer(fixture: fixture)
            try await nats.start()
            let hubs = SharedHubs(fixture: fixture, nats: [nats])
            let local = fixture.directory + "/local"
            let hub = try await hubs.start(0, extra: ["--data-dir", local])
            let (client, _) = try hubs.attach(0)
            // One at a time: each record its own message (dispatched together, they would share one).
            for n in 1...3 {
                try client.send(["type": "dispatch", "id": JSON(n), "action": setAction("/n", n)])
                _ = try next(client, "seq \(n)") { $0["type"] == "action" && $0["seq"] == JSON(n) }
            }
            client.close()

            // While the hub is stopped, the stream is rebuilt with another record at seq 3 (and a
            // seq 4 proposed on it), as a cluster that lost an acknowledged record would hold it.
            hub.signal(SIGSTOP)
            let connection = try NATSConnection.connect(servers: [nats.address], name: "test")
            defer { connection.close() }
            let info = try connection.jetStream("STREAM.INFO." + hubs.stream, nil)
            var stored: [(subject: String, data: [UInt8], headers: NATSHeaders?)] = []
            for seq in 1...4 {
                let answer = try connection.jetStream("STREAM.MSG.GET." + hubs.stream, ["seq": JSON(seq)])
                let message = try #require(answer["message"])
                let data = try #require(message["data"]?.stringValue.flatMap { Data(base64Encoded: $0) })
                let headers = message["hdrs"]?.stringValue.flatMap { Data(base64Encoded: $0) }.flatMap { NATSHeaders.decode([UInt8]($0)[...]) }
                stored.append((try #require(message["subject"]?.stringValue), [UInt8](data), headers))
            }
            let history = try #require(try JSON(parsing: stored[0].data)["history"]?.stringValue)
            _ = try connection.jetStream("STREAM.DELETE." + hubs.stream, nil)
            _ = try connection.jetStream("STREAM.CREATE." + hubs.stream, info["config"])
            // Records a hub holding the key wrote (the cluster lost the one the hub applied):
            // seq 3 with another action, and a seq 4 on it.
            let keys = try LogKeys.parse(Array(try String(contentsOfFile: hubs.keyFile, encoding: .utf8).utf8), source: "test").get()
            let tagHeader = "StoreSync-Auth"
            guard case .object(var third) = try JSON(parsing: stored[3].data) else { throw HarnessError("record 3 is not an object") }
            third["action"] = setAction("/n", 30)
            stored[3].data = JSON.object(third).canonicalBytes
            let secondTag = try #require(stored[2].headers?[tagHeader])
            let thirdTag = keys.tag(.record(history: history, seq: 3, previous: secondTag, body: stored[3].data))
            stored[3].headers = NATSHeaders([(tagHeader, thirdTag)])
            var fourth = third
            fourth["seq"] = 4
            fourth["id"] = "other-4"
            fourth["action"] = setAction("/m", 4)
            let fourthBody = JSON.object(fourth).canonicalBytes
            for (index, (subject, data, headers)) in stored.enumerated() {
                var fields = (headers?.fields ?? []).filter { $0.name == tagHeader }
                fields.append(("Nats-Expected-Last-Sequence", String(index)))
                _ = try connection.request(subject, payload: data, headers: NATSHeaders(fields))
            }
            _ = try connection.request(stored[3].subject, payload: fourthBody,
                                       headers: NATSHeaders([("Nats-Expected-Last-Sequence", "4"),
                                                             (tagHeader, keys.tag(.record(history: history, seq: 4, previous: thirdTag, body: fourthBody)))]))
            hub.signal(SIGCONT)

            #expect(try await hub.waitForExit(timeout: .seconds(60)) == 3)
            let log = hub.errorLines.joined(separator: "\n")
            #expect(log.contains("now holds another record at action seq 3"), "\(hub.errorLines.suffix(5))")
            #expect(log.contains("discarded the local snapshots"), "\(hub.errorLines.suffix(5))")
            #expect(((try? FileManager.default.contentsOfDirectory(atPath: local)) ?? []).allSatisfy { !$0.hasSuffix(".snap") })

            // Restarted, it follows the stream's history.
            try await hubs.start(0, extra: ["--data-dir", local])
            let (reader, welcome) = try hubs.attach(0)
            reader.close()
            #expect(welcome["seq"] == 4)
            #expect(welcome["state"] == ["n": 30, "m": 4], "\(String(describing: welcome["state"]))")
        }

        @Test("a hub of another app refuses the stream with app-mismatch and exit status 4")
        func appMismatch() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let nats = try NATSServer(fixture: fixture)
            try await nats.start()
            let hubs = SharedHubs(fixture: fixture, nats: [nats])
            try await hubs.start(0)
            let other = try fixture.spawn("hubd", ["--socket", hubs.socket(1), "--app", "counter", "--log", hubs.url(), "--log-key-file", hubs.keyFile])
            #expect(try await other.waitForExit() == 4)
            #expect(other.errorLines.contains { $0.contains("app-mismatch") }, "\(other.errorLines)")
        }

        @Test("a hub on a fresh host starts from the shared snapshot and the tail; --retain-actions trims the stream behind it")
        func sharedSnapshotAndRetention() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let nats = try NATSServer(fixture: fixture)
            try await nats.start()
            let hubs = SharedHubs(fixture: fixture, nats: [nats])
            try await hubs.start(0, extra: ["--snapshot-every", "2000", "--retain-actions", "10000"])
            let (client, _) = try hubs.attach(0)
            defer { client.close() }
            let total = 13_000
            var burst: [UInt8] = []
            for n in 1...total {
                burst += try Frame.encode(["type": "dispatch", "id": JSON(n), "action": ["type": "increment", "path": "/n"]])
            }
            try client.sendBytes(burst)
            let last = try next(client, "seq \(total)") { $0["type"] == "action" && $0["seq"] == JSON(total) }
            #expect(last["id"] == JSON(total))
            let fresh = try await hubs.start(1)
            let statuses = try await hubs.settled([0, 1], at: UInt64(total))
            #expect(Set(statuses.map(\.digest)).count == 1)
            // It started from a shared snapshot (the stream no longer holds the first actions).
            let startLine = fresh.errorLines.first { $0.contains("recovered seq") } ?? ""
            #expect(startLine.contains("shared snapshot"), "\(fresh.errorLines)")
            let log = try #require(statuses[1].log)
            #expect((log["first_seq"]?.intValue ?? 0) > 1, "the stream was trimmed: \(log)")
        }
    }
}

extension MultiProcessTests.SharedLogTests {
    @Test("an action's stamp is chosen once, by the hub that sequenced it: the other hub broadcasts and answers history with the same time and origin name")
    func stampsAreShared() async throws {
        let fixture = try Fixture()
        defer { fixture.shutdown() }
        let nats = try NATSServer(fixture: fixture)
        try await nats.start()
        let hubs = SharedHubs(fixture: fixture, nats: [nats])
        async let first = hubs.start(0)
        async let second = hubs.start(1)
        _ = try await (first, second)

        let writer = try RawClient(path: hubs.socket(0))
        defer { writer.close() }
        try writer.send(["type": "hello", "protocol": 1, "app": "json", "name": "left"])
        #expect(try writer.receive()["type"] == "welcome")
        let (reader, _) = try hubs.attach(1)
        defer { reader.close() }
        try writer.send(["type": "dispatch", "id": 1, "action": setAction("/a", 1)])
        let own = try next(writer, "the action on hub 0") { $0["type"] == "action" }
        #expect(own["origin_name"] == "left")
        let time = try #require(own["time"]?.intValue, "\(own)")
        let relayed = try next(reader, "the action on hub 1") { $0["type"] == "action" }
        #expect(relayed == own, "the same action message, stamp included, from either hub")

        let observer = try RawClient(path: hubs.socket(1))
        defer { observer.close() }
        try observer.send(["type": "history", "from": 1, "to": 1])
        let page = try next(observer, "the history reply") { $0["type"] == "history" }
        #expect(page["actions"] == [own])
        #expect(time > 1_700_000_000_000, "milliseconds since the epoch")
    }
}
