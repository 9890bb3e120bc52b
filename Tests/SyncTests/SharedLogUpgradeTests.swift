import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NATSClient
@testable import StoreHub
import SyncCore
import SyncLocks
import SyncPOSIX
import Testing

/// A todos client of a shared-log test: said hello as `fingerprint` (with a session), read its welcome.
private struct TodosClient {
    let raw: RawClient
    /// The types of the last messages read (for a failure's message).
    let lastSeen = Locked<[String]>([])
    let replica: Int
    let first: JSON

    init(socket: String, fingerprint: String, name: String, session: String? = nil) throws {
        raw = try RawClient(path: socket)
        var hello: [JSONKey: JSON] = ["type": "hello", "protocol": 1, "app": "todos", "fingerprint": .string(fingerprint),
                                      "name": .string(name)]
        if let session { hello["session"] = .string(session) }
        try raw.send(.object(hello))
        first = try raw.receive()
        replica = first["replica"]?.intValue ?? 0
    }

    /// Sends `count` `add` dispatches with ids `prefix-n`.
    func burst(_ range: ClosedRange<Int>, prefix: String) throws {
        var bytes: [UInt8] = []
        for n in range {
            bytes += try Frame.encode(["type": "dispatch", "id": .string("\(prefix)-\(n)"),
                                       "action": ["type": "add", "id": .string("\(prefix)-\(n)"), "title": .string("\(prefix) \(n)"),
                                                  "createdAt": 1_700_000_000_000]])
        }
        try raw.sendBytes(bytes)
    }

    /// Reads until every id of `range` is answered (acknowledged by its `action`, or refused),
    /// `upgraded` came, or the stream ended; returns the acknowledged ids and whether `upgraded` came.
    ///
    /// With `untilUpgraded`, it reads on after every id is answered, until `upgraded` or the end.
    func answers(_ range: ClosedRange<Int>, prefix: String, untilUpgraded: Bool = false) throws -> (acknowledged: Set<String>, upgraded: Bool) {
        var open = Set(range.map { "\(prefix)-\($0)" })
        var acknowledged: Set<String> = []
        let deadline = ContinuousClock.now + scaled(.seconds(60))
        while !open.isEmpty || untilUpgraded, ContinuousClock.now < deadline {
            guard let message = try raw.receiveOrEOF(timeoutMilliseconds: 30_000) else {
                lastSeen.withLock { $0.append("EOF") }
                break
            }
            lastSeen.withLock { seen in
                seen.append("\(message["type"]?.stringValue ?? "?")\(message["error"]?["code"].map { " " + ($0.stringValue ?? "") } ?? "")")
                if seen.count > 8 { seen.removeFirst() }
            }
            switch message["type"]?.stringValue {
            case "action":
                if message["origin"]?.intValue == replica, let id = message["id"]?.stringValue, open.remove(id) != nil {
                    acknowledged.insert(id)
                }
            case "reject", "duplicate":
                if let id = message["id"]?.stringValue { open.remove(id) }
            case "upgraded":
                return (acknowledged, true)
            default:
                break
            }
        }
        return (acknowledged, false)
    }
}

/// Asks hub `socket` for an upgrade (a client that is not attached).
private func upgrade(_ socket: String, dryRun: Bool = false) throws -> JSON {
    let admin = try RawClient(path: socket)
    defer { admin.close() }
    try admin.send(["type": "upgrade", "id": "u", "to": "todos@2", "dry_run": .bool(dryRun)])
    return try admin.receive()
}

@Suite("Upgrades on a shared log: the stream's layout and its hubs")
struct StreamLayoutTests {
    let names = JetStreamLog.Names(stream: "S")

    @Test("a stream moves to the records layout once its subjects take …records and not …actions; the move keeps the rest of its configuration")
    func layout() throws {
        let original: JSON = ["config": ["name": "S", "subjects": ["storesync.S.actions", "storesync.S.genesis"], "num_replicas": 3]]
        #expect(StreamLayout.of(original, names: names) == .actions)
        let moved = try #require(StreamLayout.movedConfiguration(original, names: names))
        #expect(moved["subjects"] == ["storesync.S.genesis", "storesync.S.records"])
        #expect(moved["num_replicas"] == 3 && moved["name"] == "S")
        #expect(StreamLayout.of(["config": moved], names: names) == .records)
        // Both subjects (a move half done by hand): still the old layout, older hubs still write.
        #expect(StreamLayout.of(["config": ["subjects": ["storesync.S.actions", "storesync.S.records"]]], names: names) == .actions)
        #expect(StreamLayout.of(["config": [:]], names: names) == nil)
        #expect(StreamLayout.records.recordSubject(names) == "storesync.S.records")
        #expect(StreamLayout.records.headSubject(names) == "storesync.S.meta.state.head")
        #expect(StreamLayout.actions.chunkSubject(names) == "storesync.S.meta.chunks")
    }

    @Test("the hubs of a stream are its hub-shaped consumers: those that say their versions read upgrades, the others predate them; an operator's durable consumer is no hub")
    func peers() throws {
        let metadata = LogPeer.metadata(label: "a pid 1", versions: ["todos@1", "todos@2"])
        let listing: JSON = ["total": 3, "consumers": [
            ["name": "c1", "config": ["deliver_subject": "_INBOX.x", "ack_policy": "none", "flow_control": true, "metadata": metadata]],
            ["name": "old", "config": ["deliver_subject": "_INBOX.y", "ack_policy": "none", "flow_control": true]],
            ["name": "backup", "config": ["durable_name": "backup", "ack_policy": "explicit"]],
        ]]
        let peers = LogPeer.peers(in: listing)
        #expect(peers == [LogPeer(name: "a pid 1", versions: ["todos@1", "todos@2"]), LogPeer(name: "consumer old", versions: nil)])
        #expect(peers[0].readsUpgrades && !peers[1].readsUpgrades)
        // A chain too long for the metadata keeps its newest versions.
        let long = LogPeer.metadata(label: "b", versions: (1...2_000).map { "app@\($0)" })
        let kept = try #require(long["storesync-versions"]?.stringValue)
        #expect(kept.utf8.count <= LogPeer.maxVersionsBytes && kept.contains("app@2000"))
    }
}

extension MultiProcessTests.SharedLogTests {
    @Test("on one stream: a consumer shaped like an older hub's refuses the upgrade (named in --dry-run); gone, hubd --upgrade moves the stream; an older hub's proposal is refused by NATS, a forged record is skipped")
    func upgradeGateAndLayout() async throws {
        let fixture = try Fixture()
        defer { fixture.shutdown() }
        let nats = try NATSServer(fixture: fixture)
        try await nats.start()
        let hubs = SharedHubs(fixture: fixture, nats: [nats])
        // The stream starts under todos@1.
        var hub = try await hubs.start(0, app: "todos@1")
        let seed = try TodosClient(socket: hubs.socket(0), fingerprint: "todos@1", name: "seed", session: "seed")
        try seed.burst(1...5, prefix: "seed")
        #expect(try seed.answers(1...5, prefix: "seed").acknowledged.count == 5)
        seed.raw.close()
        hub.signal(SIGTERM)
        #expect(try await hub.waitForExit() == 0)
        hub = try await hubs.start(0, app: "todos")
        #expect(try HubStatusProbe.status(hubs.socket(0)).fingerprint == "todos@1")

        // What an older hub reads the stream with: no metadata.
        let connection = try NATSConnection.connect(servers: [nats.address], name: "older hub", timeoutMilliseconds: 2_000)
        defer { connection.close() }
        let created = try connection.jetStream("CONSUMER.CREATE." + hubs.stream, ["stream_name": .string(hubs.stream), "config": [
            "deliver_subject": "_INBOX.older", "deliver_policy": "all", "ack_policy": "none", "flow_control": true,
            "idle_heartbeat": 1_000_000_000, "inactive_threshold": 120_000_000_000,
        ]])
        let consumer = try #require(created["name"]?.stringValue)
        let dry = try upgrade(hubs.socket(0), dryRun: true)
        #expect(dry["type"] == "upgrade" && dry["changed"] == false, "\(dry.canonicalString)")
        let lacking = dry["hubs_lacking"]?.arrayValue ?? []
        #expect(lacking.count == 1 && lacking.first?["hub"] == .string("consumer " + consumer) && lacking.first?["versions"] == .null,
                "\(dry.canonicalString)")
        let refused = try upgrade(hubs.socket(0))
        #expect(refused["error"]?["code"] == "upgrade-refused", "\(refused.canonicalString)")
        #expect(refused["error"]?["message"]?.stringValue?.contains("cannot read upgrade records") == true, "\(refused.canonicalString)")
        #expect(try HubStatusProbe.status(hubs.socket(0)).fingerprint == "todos@1")
        // Before the move, the records subject is no part of the stream.
        #expect(throws: NATSError.self) {
            _ = try connection.request("storesync.\(hubs.stream).records", payload: Array("x".utf8), timeoutMilliseconds: 2_000)
        }
        _ = try connection.jetStream("CONSUMER.DELETE.\(hubs.stream).\(consumer)", nil)

        // hubd --upgrade, on the shared log.
        hub.signal(SIGTERM)
        #expect(try await hub.waitForExit() == 0)
        hub = try await hubs.start(0, app: "todos", extra: ["--upgrade"])
        let status = try HubStatusProbe.status(hubs.socket(0))
        #expect(status.fingerprint == "todos@2" && status.seq == 6, "\(status)")
        let info = try connection.jetStream("STREAM.INFO." + hubs.stream, nil)
        #expect(StreamLayout.of(info, names: JetStreamLog.Names(stream: hubs.stream)) == .records, "\(info.canonicalString)")

        // An older hub's proposal, on the actions subject: no stream takes it.
        #expect(throws: NATSError.self) {
            _ = try connection.request("storesync.\(hubs.stream).actions", payload: Array(#"{"seq":7}"#.utf8),
                                       headers: NATSHeaders([("Nats-Expected-Last-Sequence", "0")]), timeoutMilliseconds: 2_000)
        }
        // A forged upgrade record on the records subject: stored, and skipped.
        let forged: JSON = ["seq": 7, "origin": 0, "id": "x", "upgrade": true, "from": "todos@2", "to": "todos@3", "digest": "0123456789abcdef"]
        _ = try connection.request("storesync.\(hubs.stream).records", payload: forged.canonicalBytes,
                                   headers: NATSHeaders([("StoreSync-Auth", "hmac-sha256:k:forged")]), timeoutMilliseconds: 2_000)
        let client = try TodosClient(socket: hubs.socket(0), fingerprint: "todos@2", name: "new", session: "new")
        defer { client.raw.close() }
        #expect(client.first["type"] == "welcome" && client.first["seq"] == 6)
        try client.burst(1...1, prefix: "after")
        #expect(try client.answers(1...1, prefix: "after").acknowledged == ["after-1"])
        let after = try HubStatusProbe.status(hubs.socket(0))
        #expect(after.seq == 7 && after.fingerprint == "todos@2")
        #expect((after.log?["skipped"]?.intValue ?? 0) >= 1, "\(after.log?.canonicalString ?? "")")
        // A fresh hub reads it all: the genesis's todos@1, the upgrade, the forged record skipped.
        try await hubs.start(1, app: "todos")
        let both = try await hubs.settled([0, 1], at: 7)
        #expect(Set(both.map(\.digest)).count == 1 && both.allSatisfy { $0.fingerprint == "todos@2" })
    }

    @Test("three hubs on an R3 cluster, their binaries replaced one by one while clients dispatch, then one upgrade: every hub follows at the record, nothing acknowledged lost or doubled; a hub without todos@2 stops at the record and says so")
    func rollingUpgrade() async throws {
        let fixture = try Fixture()
        defer { fixture.shutdown() }
        let servers = try await NATSServer.startCluster(fixture)
        let hubs = SharedHubs(fixture: fixture, nats: servers)
        func log(_ index: Int) -> String {
            hubs.url([servers[index % 3]] + servers.enumerated().filter { $0.offset != index % 3 }.map(\.element))
        }
        var processes: [ChildProcess] = []
        for index in 0..<3 {
            processes.append(try await hubs.start(index, app: "todos@1", log: log(index), extra: ["--nats-replicas", "3"]))
        }
        var writers = try (0..<3).map { try TodosClient(socket: hubs.socket($0), fingerprint: "todos@1", name: "w\($0)", session: "w\($0)") }
        defer { for writer in writers { writer.raw.close() } }
        var acknowledged: Set<String> = []
        var next = 1
        // Each round: every writer dispatches a burst; meanwhile hub `round` is replaced by a
        // build that carries todos@2 (still serving todos@1); its writer attaches again.
        for round in 0..<3 {
            let range = next...(next + 39)
            next += 40
            for (k, writer) in writers.enumerated() { try writer.burst(range, prefix: "w\(k)") }
            processes[round].signal(SIGTERM)
            #expect(try await processes[round].waitForExit() == 0)
            for (k, writer) in writers.enumerated() {
                acknowledged.formUnion(try writer.answers(range, prefix: "w\(k)").acknowledged)
            }
            processes[round] = try await hubs.start(round, app: "todos", log: log(round))
            writers[round].raw.close()
            writers[round] = try TodosClient(socket: hubs.socket(round), fingerprint: "todos@1", name: "w\(round)", session: "w\(round)")
            #expect(writers[round].first["type"] == "welcome" && writers[round].first["fingerprint"] == "todos@1")
        }
        // A hub whose build has todos@1 only.
        let stuck = try await hubs.start(3, app: "todos@1", log: log(0))
        let dry = try upgrade(hubs.socket(1), dryRun: true)
        let lacking = dry["hubs_lacking"]?.arrayValue ?? []
        #expect(lacking.count == 1 && lacking.first?["versions"] == ["todos@1"], "\(dry.canonicalString)")
        // The upgrade, asked of hub 1 in the middle of every writer's burst.
        let range = next...(next + 999)
        for (k, writer) in writers.enumerated() { try writer.burst(range, prefix: "w\(k)") }
        let report = try upgrade(hubs.socket(1))
        #expect(report["type"] == "upgrade" && report["changed"] == true, "\(report.canonicalString)")
        let upgradeSeq = try #require(report["seq"]?.intValue)
        var inTheMiddle = false
        for (k, writer) in writers.enumerated() {
            let answered = try writer.answers(range, prefix: "w\(k)", untilUpgraded: true)
            acknowledged.formUnion(answered.acknowledged)
            #expect(answered.upgraded, "writer \(k) (todos@1, on hub \(k)) was not told of the upgrade; it read last \(writer.lastSeen.withLock { $0 })")
            if answered.acknowledged.count < range.count { inTheMiddle = true }
        }
        #expect(inTheMiddle || upgradeSeq > 3 * 1_000 + 360, "the upgrade came after every burst")
        // Every hub that carries todos@2 follows; they agree.
        let statuses = try await hubs.settled([0, 1, 2], at: UInt64(upgradeSeq))
        #expect(statuses.allSatisfy { $0.fingerprint == "todos@2" }, "\(statuses.map(\.fingerprint))")
        // No hub, the upgrader or a follower, published a migrated state where older hubs read.
        let connection = try NATSConnection.connect(servers: [servers[0].address], name: "check", timeoutMilliseconds: 2_000)
        defer { connection.close() }
        if let head = try? connection.jetStream("STREAM.MSG.GET.\(hubs.stream)_META", ["last_by_subj": .string("storesync.\(hubs.stream).meta.head")]),
           let data = head["message"]?["data"]?.stringValue.flatMap({ Data(base64Encoded: $0) }),
           let seq = (try? JSON(parsing: [UInt8](data)))?["seq"]?.intValue {
            #expect(seq < upgradeSeq, "a snapshot head at seq \(seq) on …meta.head, after the upgrade at \(upgradeSeq)")
        }
        let fresh = try (0..<3).map { try TodosClient(socket: hubs.socket($0), fingerprint: "todos@2", name: "n\($0)") }
        defer { for client in fresh { client.raw.close() } }
        let states = fresh.map { $0.first["state"] ?? .null }
        #expect(Set(fresh.map { $0.first["seq"] ?? .null }).count == 1 && Set(states.map(\.canonicalString)).count == 1)
        let ids = (states[0]["todos"]?.arrayValue ?? []).compactMap { $0["id"]?.stringValue }
        #expect(Set(ids).count == ids.count, "a todo applied twice")
        #expect(acknowledged.isSubset(of: Set(ids)), "acknowledged todos missing: \(acknowledged.subtracting(ids).sorted().prefix(5))")
        // The hub without todos@2 stopped at the record, says why, and still answers status.
        try await waitUntil("hub 3 to say it stopped; stderr: \(stuck.errorLines.suffix(3))") {
            stuck.errorLines.contains { $0.contains("cannot follow") && $0.contains("todos@2") }
        }
        let stuckStatus = try HubStatusProbe.status(hubs.socket(3))
        #expect(stuckStatus.seq == UInt64(upgradeSeq - 1) && stuckStatus.fingerprint == "todos@1")
        let late = try TodosClient(socket: hubs.socket(3), fingerprint: "todos@1", name: "late", session: "late")
        defer { late.raw.close() }
        if late.first["type"] == "welcome" {
            try late.burst(1...1, prefix: "late")
            let answer = try late.raw.receive()
            #expect(answer["type"] == "reject" && answer["error"]?["code"] == "unavailable", "\(answer.canonicalString)")
        }
    }
}

/// The replicator's side of an upgrade on a shared log, driven without a server.
@Suite("The replicator before an upgrade: the stream's hubs, the move to the records layout")
struct ReplicatorUpgradeTests {
    typealias Harness = ReplicatorHarness

    /// The body of a `STREAM.INFO` answer whose subjects are `subjects`.
    static func info(last: UInt64, subjects: [String]) -> JSON {
        ["config": ["name": "ledger", "num_replicas": 3, "subjects": .array(subjects.map { .string($0) })],
         "cluster": ["leader": "n1"], "state": ["last_seq": JSON(last)]]
    }

    static let original = ["storesync.ledger.genesis", "storesync.ledger.actions"]

    /// The subjects proposals went out on.
    static func proposalSubjects(_ hub: Harness) -> [String] {
        hub.effects.compactMap { effect in
            guard case .publish(let subject, let reply?, _, _) = effect, reply.hasPrefix(Harness.prefix + ".a.") else { return nil }
            return subject
        }
    }

    static func answers(_ hub: Harness) -> [(JetStreamLog.Answer, Int)] {
        hub.effects.compactMap { effect in
            guard case .answer(let answer, let number) = effect else { return nil }
            return (answer, number)
        }
    }

    @Test("the consumer names the hub and its versions; the hubs are listed page by page, one entry per hub; a question asked while the link opens is answered once it is up")
    func listing() throws {
        var hub = Harness()
        hub.machine.consumerMetadata = LogPeer.metadata(label: "a pid 1", versions: ["todos@1", "todos@2"])
        hub.linkUp()
        let create = try #require(hub.openRequests(Harness.consumerCreate).first)
        #expect(try JSON(parsing: create.payload)["config"]?["metadata"]?["storesync-versions"] == #"["todos@1","todos@2"]"#)
        hub.send(.command(.ask(.hubs, number: 1)))
        #expect(hub.openRequests(Harness.api("CONSUMER.LIST.ledger")).isEmpty, "asked once the link is up")
        try hub.answer(Harness.consumerCreate, ["name": "c1"])
        try hub.answer(Harness.info, Self.info(last: 1, subjects: Self.original))
        let me = ["name": "c1", "config": ["deliver_subject": "x", "ack_policy": "none", "flow_control": true,
                                           "metadata": LogPeer.metadata(label: "a pid 1", versions: ["todos@1", "todos@2"])]] as JSON
        let old = ["name": "c9", "config": ["deliver_subject": "y", "ack_policy": "none", "flow_control": true]] as JSON
        try hub.answer(Harness.api("CONSUMER.LIST.ledger"), ["total": 3, "offset": 0, "limit": 2, "consumers": [me, old]])
        let second = try #require(hub.openRequests(Harness.api("CONSUMER.LIST.ledger")).first)
        #expect(try JSON(parsing: second.payload)["offset"] == 2)
        try hub.answer(Harness.api("CONSUMER.LIST.ledger"), ["total": 3, "offset": 2, "limit": 2, "consumers": [me]])
        let answered = Self.answers(hub)
        #expect(answered.count == 1 && answered.first?.1 == 1)
        #expect(answered.first?.0 == .hubs(.success([LogPeer(name: "a pid 1", versions: ["todos@1", "todos@2"]),
                                                      LogPeer(name: "consumer c9", versions: nil)])))
        // Down: answered at once, failing.
        hub.send(.linkDown("gone"))
        hub.send(.command(.ask(.hubs, number: 2)))
        guard case .hubs(.failure)? = Self.answers(hub).last?.0 else {
            Issue.record("a question while the link is down is answered failing: \(Self.answers(hub))")
            return
        }
    }

    @Test("moving the stream: a fresh STREAM.INFO, then STREAM.UPDATE with …records in place of …actions and the rest kept; proposals go on …records from then on; a hub learns a move from any STREAM.INFO")
    func move() throws {
        var hub = Harness()
        hub.linkUp()
        try hub.answer(Harness.consumerCreate, ["name": "c1"])
        try hub.answer(Harness.info, Self.info(last: 1, subjects: Self.original))
        try hub.answer(Harness.get, Harness.noMessage)
        #expect(hub.available && hub.machine.layout == .actions)
        hub.send(.command(.propose([ReplicatorTests.record(1)], expectingLast: 0, epoch: 1)))
        hub.send(.command(.ask(.moveToRecords, number: 5)))
        try hub.answer(Harness.info, Self.info(last: 1, subjects: Self.original))
        let update = try #require(hub.openRequests(Harness.api("STREAM.UPDATE.ledger")).first)
        let config = try JSON(parsing: update.payload)
        #expect(config["subjects"] == ["storesync.ledger.genesis", "storesync.ledger.records"] && config["num_replicas"] == 3)
        try hub.answer(Harness.api("STREAM.UPDATE.ledger"), Self.info(last: 1, subjects: ["storesync.ledger.genesis", "storesync.ledger.records"]))
        #expect(Self.answers(hub).last.map { $0.0 == .moved(.success(.records)) && $0.1 == 5 } == true)
        #expect(hub.machine.layout == .records)
        hub.send(.command(.propose([ReplicatorTests.record(2)], expectingLast: 1, epoch: 1)))
        #expect(Self.proposalSubjects(hub) == ["storesync.ledger.actions", "storesync.ledger.records"])
        // Asked again: nothing to do.
        hub.send(.command(.ask(.moveToRecords, number: 6)))
        #expect(Self.answers(hub).last.map { $0.0 == .moved(.success(.records)) && $0.1 == 6 } == true)

        // Another hub learns it from a STREAM.INFO answer (here, as its link opens).
        var other = Harness()
        other.linkUp()
        try other.answer(Harness.consumerCreate, ["name": "c2"])
        try other.answer(Harness.info, Self.info(last: 1, subjects: ["storesync.ledger.genesis", "storesync.ledger.records"]))
        #expect(other.machine.layout == .records)
        #expect(other.notes.contains { $0.contains("moved to the records layout") })
        // A refused update changes nothing and says so.
        var refused = Harness()
        refused.linkUp()
        try refused.answer(Harness.consumerCreate, ["name": "c3"])
        try refused.answer(Harness.info, Self.info(last: 1, subjects: Self.original))
        refused.send(.command(.ask(.moveToRecords, number: 1)))
        try refused.answer(Harness.info, Self.info(last: 1, subjects: Self.original))
        try refused.answer(Harness.api("STREAM.UPDATE.ledger"), ["error": ["code": 403, "description": "Permissions Violation"]])
        guard case .moved(.failure(let error))? = Self.answers(refused).last?.0 else {
            Issue.record("a refused update is answered failing")
            return
        }
        #expect(error.message.contains("STREAM.UPDATE") && refused.machine.layout == .actions)
    }

    @Test("a hub that never asked STREAM.INFO learns the move from the first record it reads on …records: its proposals and snapshots go to the new subjects from then on")
    func followerLearnsFromRecord() throws {
        var hub = Harness()
        hub.linkUp()
        try hub.answer(Harness.consumerCreate, ["name": "c1"])
        try hub.answer(Harness.info, Self.info(last: 1, subjects: Self.original))
        #expect(hub.machine.layout == .actions)
        // Another hub's record, on the records subject (it moved the stream).
        var theirs = hub.foreign([ReplicatorTests.record(1)])
        theirs.subject = Harness.names.records
        hub.deliver(theirs, at: 2)
        #expect(hub.appended == [1] && hub.machine.layout == .records)
        hub.send(.command(.propose([ReplicatorTests.record(2)], expectingLast: 1, epoch: 1)))
        #expect(Self.proposalSubjects(hub) == ["storesync.ledger.records"])
        hub.send(.command(.snapshot(StoredSnapshot(seq: 1, digest: Digest.of(["n": 1]), state: ["n": 1], nextReplica: 1,
                                                   position: LogPosition(seq: 1, streamSeq: 2, tag: hub.streamTag), app: "x@2"))))
        let heads = hub.effects.compactMap { effect -> String? in
            guard case .publish(let subject, _, _, let payload) = effect, subject == Harness.api("STREAM.MSG.GET.ledger_META") else { return nil }
            return (try? JSON(parsing: payload))?["last_by_subj"]?.stringValue
        }
        #expect(heads.last == "storesync.ledger.meta.state.head", "\(heads)")
    }

    @Test("a record on …records is as valid as on …actions; a message on any other subject is not")
    func subjects() {
        let names = JetStreamLog.Names(stream: "ledger")
        let keys = Harness.keys
        let payload = Array(String(decoding: ReplicatorTests.record(1).body, as: UTF8.self).utf8)
        let tag = keys.tag(.record(history: "h1", seq: 1, previous: "", body: payload))
        for subject in [names.actions, names.records, "storesync.ledger.other"] {
            let message = NATSMessage(subject: subject, sid: 1, reply: nil, headers: NATSHeaders([(JetStreamLog.Replicator.tagHeader, tag)]),
                                      payload: payload)
            let valid = (try? JetStreamLog.validRecords(message, names: names, keys: keys, history: "h1", next: 1, previousTag: "").get()) != nil
            #expect(valid == (subject != "storesync.ledger.other"), "\(subject)")
        }
    }
}
