@testable import StoreHub
import Foundation
import NATSClient
import SyncProtocol
import Testing

/// Drives the shared log's replicator (``JetStreamLog/Replicator``) with inputs and a manual
/// clock, as swift-nio's `EmbeddedChannel` drives a handler: no socket, no server, no sleep.
/// It plays NATS by answering the requests the machine makes, and keeps what the machine
/// told the hub.
struct ReplicatorHarness {
    typealias Replicator = JetStreamLog.Replicator

    static let key = Array("0123456789abcdef0123456789abcdef-test-key".utf8)
    static var keys: LogKeys { (try? LogKeys.parse(key, source: "test").get()) ?? .unauthenticated }
    static let names = JetStreamLog.Names(stream: "ledger")
    static let prefix = "_INBOX.t"
    static let servers = ["a:4222", "b:4222", "c:4222"]

    var machine: Replicator
    var now: ContinuousClock.Instant
    /// Every effect so far, in order.
    var effects: [Replicator.Effect] = []
    /// Every event the hub was handed.
    var events: [LogEvent] = []
    /// Every line for the log.
    var notes: [String] = []
    /// The availability last handed to the hub.
    var available = false
    /// The replies subjects of requests already answered by the harness.
    var answered: Set<String> = []
    /// The current consumer's deliver subject, as last subscribed.
    var deliverSubject = ""
    /// The tag of the last record written to the "stream", for building other hubs' records.
    var streamTag = ""

    /// A replicator reading history `h1` from hub seq `next`, after stream seq `streamSeq`.
    init(next: UInt64 = 1, streamSeq: UInt64 = 1, tag: String = "") {
        var configuration = SharedLogConfiguration(servers: Self.servers, stream: "ledger")
        configuration.keys = Self.keys
        now = ContinuousClock.now
        machine = Replicator(configuration: configuration, names: Self.names, history: "h1", next: next,
                             position: LogPosition(seq: next - 1, streamSeq: streamSeq, tag: tag), runID: "run", now: now)
        streamTag = tag
    }

    /// Feeds an input; returns its effects (also kept in ``effects``).
    @discardableResult
    mutating func send(_ input: Replicator.Input) -> [Replicator.Effect] {
        let new = machine.handle(input, now: now)
        for effect in new {
            switch effect {
            case .post(let event): events.append(event)
            case .diagnostic(_, let line): notes.append(line)
            case .facts(_, let available): self.available = available
            case .subscribe(let subject) where subject.hasPrefix(Self.prefix + ".d."): deliverSubject = subject
            default: break
            }
        }
        effects += new
        return new
    }

    /// Moves the clock and ticks.
    @discardableResult
    mutating func advance(_ duration: Duration) -> [Replicator.Effect] {
        now += duration
        return send(.tick)
    }

    /// The link opens on server `a`.
    @discardableResult
    mutating func linkUp(server: String = "a:4222") -> [Replicator.Effect] {
        send(.linkUp(.init(server: server, inboxPrefix: Self.prefix, maxPayload: 1 << 20)))
    }

    /// The requests published and not yet answered by the harness: (reply subject, subject, body).
    func openRequests(_ subject: String) -> [(reply: String, payload: [UInt8])] {
        effects.compactMap { effect in
            guard case .publish(let published, let reply?, _, let payload) = effect, published == subject,
                  reply.hasPrefix(Self.prefix + ".q."), !answered.contains(reply) else { return nil }
            return (reply, payload)
        }
    }

    /// Answers the oldest open request on `subject` with `json` (or a 503 status).
    @discardableResult
    mutating func answer(_ subject: String, _ json: JSON?, status: Int? = nil) throws -> [Replicator.Effect] {
        let request = try #require(openRequests(subject).first, "no request on \(subject) is waiting")
        answered.insert(request.reply)
        let headers = status.map { NATSHeaders(status: $0) }
        return send(.message(NATSMessage(subject: request.reply, sid: 9, reply: nil, headers: headers, payload: json?.canonicalBytes ?? []),
                             subscription: Self.prefix + ".q.*"))
    }

    static func api(_ name: String) -> String { "$JS.API." + name }
    static let info = api("STREAM.INFO.ledger")
    static let consumerCreate = api("CONSUMER.CREATE.ledger")
    static let get = api("STREAM.MSG.GET.ledger")

    /// A STREAM.INFO answer from an R3 stream (`leader`: whether it names one).
    static func streamInfo(last: UInt64, leader: Bool = true) -> JSON {
        ["config": ["num_replicas": 3], "cluster": leader ? ["leader": "n1"] : [:], "state": ["last_seq": JSON(last)]]
    }

    /// Opens the link and answers the consumer and STREAM.INFO requests.
    mutating func open(streamLast: UInt64) throws {
        linkUp()
        try answer(Self.consumerCreate, ["name": "c1"])
        try answer(Self.info, Self.streamInfo(last: streamLast))
        // The oldest action, for `status`: none yet.
        try answer(Self.get, Self.noMessage)
    }

    static let noMessage: JSON = ["error": ["code": 404, "err_code": 10037, "description": "no message found"]]

    /// A record batch of another hub, tagged on the stream's last record, as a message.
    mutating func foreign(_ records: [LogRecord]) -> NATSMessage {
        let payload = Array(records.map { String(decoding: $0.body, as: UTF8.self) }.joined(separator: "\n").utf8)
        let tag = Self.keys.tag(.record(history: "h1", seq: records[0].seq, previous: streamTag, body: payload))
        streamTag = tag
        return NATSMessage(subject: Self.names.actions, sid: 1, reply: nil,
                           headers: NATSHeaders([(Replicator.tagHeader, tag)]), payload: payload)
    }

    /// Delivers `message` from the consumer as stream seq `streamSeq`, with `pending` after it.
    @discardableResult
    mutating func deliver(_ message: NATSMessage, at streamSeq: UInt64, pending: UInt64 = 0) -> [Replicator.Effect] {
        var delivery = message
        delivery.reply = "$JS.ACK.ledger.c1.1.\(streamSeq).\(streamSeq).1700000000000000000.\(pending)"
        return send(.message(delivery, subscription: deliverSubject))
    }

    /// A heartbeat from the consumer, saying the stream's last stream seq.
    @discardableResult
    mutating func heartbeat(lastStream: UInt64) -> [Replicator.Effect] {
        send(.message(NATSMessage(subject: deliverSubject, sid: 1, reply: nil,
                                  headers: NATSHeaders([("Nats-Last-Stream", String(lastStream))], status: 100), payload: []),
                      subscription: deliverSubject))
    }

    /// The proposals published so far: (ack subject, headers, payload).
    var proposals: [(ack: String, headers: NATSHeaders?, payload: [UInt8])] {
        effects.compactMap { effect in
            guard case .publish(let subject, let reply?, let headers, let payload) = effect, subject == Self.names.actions else { return nil }
            return (reply, headers, payload)
        }
    }

    /// Acknowledges a proposal (JetStream's PubAck, or an error).
    @discardableResult
    mutating func acknowledge(_ ack: String, _ json: JSON) -> [Replicator.Effect] {
        send(.message(NATSMessage(subject: ack, sid: 2, reply: nil, headers: nil, payload: json.canonicalBytes),
                      subscription: Self.prefix + ".a.*"))
    }

    /// A `STREAM.MSG.GET` answer holding `message` at `streamSeq`.
    static func stored(_ message: NATSMessage, at streamSeq: UInt64) -> JSON {
        var stored: [JSONKey: JSON] = ["seq": JSON(streamSeq), "subject": .string(message.subject),
                                       "data": .string(Data(message.payload).base64EncodedString())]
        if let headers = message.headers { stored["hdrs"] = .string(Data(headers.encoded).base64EncodedString()) }
        return ["message": .object(stored)]
    }

    var appended: [UInt64] {
        events.compactMap { if case .appended(let record) = $0 { return record.seq } else { return nil } }
    }

    var broken: [StorageError] {
        events.compactMap { if case .broken(let error) = $0 { return error } else { return nil } }
    }
}

/// Every incident the several-hosts and fault-injection tests have found, replayed as a
/// transcript against the replicator alone.
@Suite("The shared log's replicator: a state machine driven without a server")
struct ReplicatorTests {
    typealias Harness = ReplicatorHarness

    static func record(_ seq: UInt64, origin: Int = 7, session: String = "other") -> LogRecord {
        LogRecord(seq: seq, origin: origin, id: .number(Int(seq)), session: session, action: ["type": "increment"])
    }

    @Test("opening: subscribe acknowledgements and replies, start a consumer from the next stream seq, ask where the stream ends; accept only once caught up")
    func opening() throws {
        var hub = Harness()
        let effects = hub.linkUp()
        #expect(effects.contains(.subscribe("_INBOX.t.a.*")) && effects.contains(.subscribe("_INBOX.t.q.*")))
        #expect(hub.deliverSubject == "_INBOX.t.d.1")
        let create = try #require(hub.openRequests(Harness.consumerCreate).first)
        let config = try JSON(parsing: create.payload)
        #expect(config["config"]?["opt_start_seq"] == 2 && config["config"]?["deliver_subject"] == "_INBOX.t.d.1")
        #expect(!hub.available)
        try hub.answer(Harness.consumerCreate, ["name": "c1"])
        try hub.answer(Harness.info, Harness.streamInfo(last: 2))
        // The stream holds one record after this hub's position: read it before accepting.
        #expect(!hub.available)
        hub.deliver(hub.foreign([Self.record(1)]), at: 2)
        #expect(hub.appended == [1])
        #expect(hub.available)
        #expect(hub.machine.facts.leader == "n1", "the leader NATS named, for status")
    }

    @Test("a leaderless STREAM.INFO as the link opens is one member's copy: no verdict, the link is dropped and asked again, starting with the next server")
    func leaderlessInfo() throws {
        var hub = Harness(next: 6, streamSeq: 10, tag: "t")
        hub.linkUp()
        try hub.answer(Harness.consumerCreate, ["name": "c1"])
        // A member that was cut off answers with a stream shorter than what the hub read.
        let effects = try hub.answer(Harness.info, Harness.streamInfo(last: 3, leader: false))
        #expect(effects.contains(.close))
        #expect(hub.broken.isEmpty)
        #expect(hub.notes.contains { $0.contains("has no leader now") }, "\(hub.notes)")
        #expect(!hub.available)
        let retry = hub.advance(.milliseconds(150))
        #expect(retry.contains(.connect(servers: Harness.servers)))
        hub.linkUp(server: "b:4222")
        #expect(hub.notes.contains { $0.contains("reconnected to the shared log at b:4222") })
        try hub.answer(Harness.consumerCreate, ["name": "c2"])
        try hub.answer(Harness.info, Harness.streamInfo(last: 10))
        #expect(hub.available)
        #expect(hub.broken.isEmpty)
        // The next attempt starts with the next server.
        hub.send(.linkDown("gone"))
        let again = hub.advance(.milliseconds(150))
        #expect(again.contains(.connect(servers: ["b:4222", "c:4222", "a:4222"])))
    }

    @Test("a stream shorter than what the hub read stops it only once NATS has said so for 10 s across reconnects")
    func shortStream() throws {
        var hub = Harness(next: 6, streamSeq: 10, tag: "t")
        hub.linkUp()
        try hub.answer(Harness.consumerCreate, ["name": "c1"])
        try hub.answer(Harness.info, Harness.streamInfo(last: 5))
        #expect(hub.broken.isEmpty)
        #expect(hub.notes.contains { $0.contains("it ends at stream seq 5, before the stream seq 10 this hub has read") }, "\(hub.notes)")
        // Asked again after a back-off: still short, but not for 10 s yet.
        hub.advance(.seconds(2))
        hub.linkUp()
        try hub.answer(Harness.consumerCreate, ["name": "c2"])
        try hub.answer(Harness.info, Harness.streamInfo(last: 5))
        #expect(hub.broken.isEmpty)
        hub.advance(.seconds(9))
        hub.linkUp()
        try hub.answer(Harness.consumerCreate, ["name": "c3"])
        try hub.answer(Harness.info, Harness.streamInfo(last: 5))
        let broken = try #require(hub.broken.first)
        #expect(broken.message.contains("ends at stream seq 5, but this hub has read up to stream seq 10"), "\(broken.message)")
    }

    @Test("a cut-off server delivers this hub's proposal before the stream decided: it is held, never applied, and once the leader refuses it the seq is read again from the stream")
    func uncommittedProposal() throws {
        var hub = Harness()
        try hub.open(streamLast: 1)
        #expect(hub.available)
        let mine = LogRecord(seq: 1, origin: 1, id: .number(1), session: "s1", action: ["type": "increment"])
        hub.send(.command(.propose([mine], expectingLast: 0, epoch: 1)))
        let proposal = try #require(hub.proposals.first)
        #expect(proposal.headers?["Nats-Expected-Last-Sequence"] == "1")
        #expect(proposal.headers?["Nats-Msg-Id"] == "s.%5B%22s1%22%2C1%5D.1")
        // The cut-off leader's consumer delivers it at once, as stream seq 2.
        hub.deliver(NATSMessage(subject: Harness.names.actions, sid: 1, reply: nil, headers: proposal.headers, payload: proposal.payload), at: 2)
        #expect(hub.machine.held.count == 1)
        #expect(!hub.events.contains(.accepted(through: 1)) && hub.appended.isEmpty)
        // The real leader says another message is at stream seq 2.
        hub.acknowledge(proposal.ack, ["error": ["code": 400, "err_code": 10071, "description": "wrong last sequence: 2"]])
        #expect(hub.events.contains(.conflict(from: 1, logLast: 0)))
        #expect(hub.notes.contains { $0.contains("the stream did not take the proposal at seq 1 that a NATS server had delivered") })
        #expect(hub.deliverSubject == "_INBOX.t.d.2", "the stream is read again with a new consumer")
        #expect(hub.machine.held.isEmpty)
        // The stream's own record at seq 2, another hub's, is checked with the leader, then applied.
        let theirs = hub.foreign([Self.record(1)])
        hub.deliver(theirs, at: 2)
        #expect(hub.appended.isEmpty)
        try hub.answer(Harness.get, Harness.stored(theirs, at: 2))
        #expect(hub.appended == [1])
        #expect(!hub.events.contains(.accepted(through: 1)))
    }

    @Test("this hub's proposal read back is applied only once acknowledged at that place; deliveries after it wait in order")
    func ownProposalWaitsForAck() throws {
        var hub = Harness()
        try hub.open(streamLast: 1)
        let batch = [LogRecord(seq: 1, origin: 1, id: .number(1), session: "s1", action: ["type": "increment"])]
        hub.send(.command(.propose(batch, expectingLast: 0, epoch: 1)))
        let proposal = try #require(hub.proposals.first)
        hub.deliver(NATSMessage(subject: Harness.names.actions, sid: 1, reply: nil, headers: proposal.headers, payload: proposal.payload), at: 2)
        // Another hub's record after it arrives too: it waits behind.
        hub.streamTag = try #require(proposal.headers?[JetStreamLog.Replicator.tagHeader])
        hub.deliver(hub.foreign([Self.record(2)]), at: 3)
        #expect(hub.machine.held.count == 2)
        hub.acknowledge(proposal.ack, ["stream": "ledger", "seq": 2])
        #expect(hub.events.contains(.accepted(through: 1)))
        #expect(hub.appended == [2])
        #expect(hub.machine.held.isEmpty && hub.machine.next == 3)
    }

    @Test("a dying leader's record, delivered after a reconnection, is checked with the stream's leader: one it does not hold is never applied")
    func dyingLeadersRecord() throws {
        var hub = Harness()
        try hub.open(streamLast: 1)
        hub.send(.linkDown("NATS at a:4222 closed the connection"))
        #expect(hub.events.contains { if case .inDoubt = $0 { return true } else { return false } })
        hub.advance(.milliseconds(150))
        try hub.open(streamLast: 2)
        // Within the suspect window after a reconnection: every foreign record is checked.
        let ghost = hub.foreign([Self.record(1)])
        hub.deliver(ghost, at: 2)
        #expect(hub.appended.isEmpty)
        try hub.answer(Harness.get, Harness.noMessage)
        #expect(hub.appended.isEmpty)
        #expect(hub.notes.contains { $0.contains("a message the stream's leader does not hold") }, "\(hub.notes)")
        #expect(hub.deliverSubject == "_INBOX.t.d.3")
        // Outside the window, a record is applied as delivered.
        hub.now += .seconds(11)
        hub.streamTag = ""
        hub.deliver(hub.foreign([Self.record(1)]), at: 2)
        #expect(hub.appended == [1])
    }

    @Test("a stalled consumer (heartbeats, no records, while the stream holds more) is left for record-by-record reads from the leader; a consumer is tried again later")
    func stalledConsumer() throws {
        var hub = Harness()
        try hub.open(streamLast: 1)
        // The leader acknowledged records up to stream seq 3; this server's consumer sends only heartbeats.
        for _ in 0..<5 {
            hub.heartbeat(lastStream: 3)
            hub.advance(.seconds(1))
        }
        #expect(hub.notes.contains { $0.contains("reading the stream record by record from its leader") }, "\(hub.notes)")
        #expect(hub.machine.polling)
        let first = try #require(hub.openRequests(Harness.get).last)
        #expect(try JSON(parsing: first.payload)["seq"] == 2)
        let one = hub.foreign([Self.record(1)])
        let two = hub.foreign([Self.record(2)])
        // Outside any suspect window? No: the switch itself is a sign; records are checked.
        try hub.answer(Harness.get, Harness.stored(one, at: 2))
        try hub.answer(Harness.get, Harness.stored(one, at: 2))
        #expect(hub.appended == [1])
        try hub.answer(Harness.get, Harness.stored(two, at: 3))
        try hub.answer(Harness.get, Harness.stored(two, at: 3))
        #expect(hub.appended == [1, 2])
        // Nothing more yet.
        try hub.answer(Harness.get, Harness.noMessage)
        hub.advance(.seconds(6))
        #expect(hub.deliverSubject == "_INBOX.t.d.2", "a consumer is tried again")
        try hub.answer(Harness.consumerCreate, ["name": "c2"])
        #expect(!hub.machine.polling)
        #expect(hub.notes.contains { $0.contains("reading the shared log with a consumer again, from seq 3") })
    }

    @Test("a proposal unanswered is re-sent every second with the same id (10158 'in process' is no verdict); in doubt after 5 s; the answer to any copy counts")
    func inDoubtResent() throws {
        var hub = Harness()
        try hub.open(streamLast: 1)
        let mine = LogRecord(seq: 1, origin: 1, id: .number(1), session: "s1", action: ["type": "increment"])
        hub.send(.command(.propose([mine], expectingLast: 0, epoch: 1)))
        let first = try #require(hub.proposals.first)
        hub.heartbeat(lastStream: 1)
        hub.advance(.milliseconds(1_100))
        let second = try #require(hub.proposals.last)
        #expect(hub.proposals.count == 2 && second.ack != first.ack)
        #expect(second.headers == first.headers && second.payload == first.payload, "the same id, expectations and tag")
        hub.acknowledge(second.ack, ["error": ["code": 409, "err_code": 10158, "description": "duplicate message id is in process"]])
        #expect(hub.available, "an earlier copy is being stored: no verdict, and no refusal")
        for _ in 0..<5 {
            hub.heartbeat(lastStream: 1)
            hub.advance(.seconds(1))
        }
        #expect(!hub.available)
        #expect(hub.events.contains { if case .inDoubt(from: 1, _) = $0 { return true } else { return false } })
        #expect(hub.proposals.allSatisfy { $0.headers?["Nats-Msg-Id"] == first.headers?["Nats-Msg-Id"] && $0.payload == first.payload })
        // The first copy's answer comes at last: it counts.
        hub.acknowledge(first.ack, ["stream": "ledger", "seq": 2])
        hub.deliver(NATSMessage(subject: Harness.names.actions, sid: 1, reply: nil, headers: first.headers, payload: first.payload), at: 2)
        #expect(hub.events.contains(.accepted(through: 1)))
        #expect(hub.available)
    }

    @Test("a publish answered 503 (the stream has no leader) refuses until the stream names a leader again: one refusing→accepting transition, however many dispatches come meanwhile")
    func leaderlessPublish() throws {
        var hub = Harness()
        try hub.open(streamLast: 1)
        var transitions: [Bool] = [hub.available]
        func note() { if transitions.last != hub.available { transitions.append(hub.available) } }
        let one = LogRecord(seq: 1, origin: 1, id: .number(1), session: "s1", action: ["type": "increment"])
        hub.send(.command(.propose([one], expectingLast: 0, epoch: 1)))
        let proposal = try #require(hub.proposals.last)
        hub.send(.message(NATSMessage(subject: proposal.ack, sid: 2, reply: nil, headers: NATSHeaders(status: 503), payload: []),
                          subscription: "_INBOX.t.a.*"))
        note()
        #expect(hub.events.contains { if case .failed(from: 1, _) = $0 { return true } else { return false } })
        #expect(!hub.available)
        for _ in 0..<4 {
            hub.heartbeat(lastStream: 1)
            hub.advance(.milliseconds(300))
            note()
            if !hub.openRequests(Harness.info).isEmpty { try hub.answer(Harness.info, Harness.streamInfo(last: 1, leader: false)) }
            note()
        }
        #expect(!hub.available, "no leader named yet")
        #expect(hub.machine.facts.leader == "")
        hub.advance(.milliseconds(300))
        try hub.answer(Harness.info, Harness.streamInfo(last: 1))
        note()
        #expect(hub.available)
        #expect(transitions == [true, false, true])
        #expect(hub.notes.contains("the stream ledger has a leader again"))
    }

    @Test("a publish refused for want of a leader (a leader stepping down: 'raft: not leader', no err_code) refuses until the stream names a leader: the gate cannot reopen in the pass that closed it",
          arguments: [#"{"error":{"code":503,"description":"raft: not leader"}}"#,
                      #"{"error":{"code":500,"err_code":10008,"description":"JetStream system temporarily unavailable"}}"#])
    func leaderlessPublishError(answer: String) throws {
        var hub = Harness()
        try hub.open(streamLast: 1)
        #expect(hub.available)
        let one = LogRecord(seq: 1, origin: 1, id: .number(1), session: "s1", action: ["type": "increment"])
        hub.send(.command(.propose([one], expectingLast: 0, epoch: 1)))
        let proposal = try #require(hub.proposals.last)
        hub.acknowledge(proposal.ack, try JSON(parsing: Array(answer.utf8)))
        #expect(hub.events.contains { if case .failed(from: 1, _) = $0 { return true } else { return false } })
        // Handed over with the failure: the hub's gate, closed by it, finds the log unavailable.
        #expect(!hub.available)
        hub.advance(.milliseconds(300))
        #expect(!hub.available, "no leader named yet")
        try hub.answer(Harness.info, Harness.streamInfo(last: 1))
        #expect(hub.available)
    }

    @Test("a publish refused by a limit of the stream is refused, and the log stays available: the next dispatch is tried")
    func limitPublishError() throws {
        var hub = Harness()
        try hub.open(streamLast: 1)
        let one = LogRecord(seq: 1, origin: 1, id: .number(1), session: "s1", action: ["type": "increment"])
        hub.send(.command(.propose([one], expectingLast: 0, epoch: 1)))
        let proposal = try #require(hub.proposals.last)
        hub.acknowledge(proposal.ack, ["error": ["code": 400, "err_code": 10054, "description": "message size exceeds maximum allowed"]])
        #expect(hub.events.contains { if case .failed(from: 1, _) = $0 { return true } else { return false } })
        #expect(hub.available)
        #expect(!hub.notes.contains("the stream ledger has a leader again"))
    }

    @Test("a shared snapshot goes out as a chain of requests (newest head, chunks one at a time, its head, purges) while deliveries go on; one handed over with the link down goes once it is back")
    func snapshotPublication() throws {
        var hub = Harness()
        try hub.open(streamLast: 1)
        let big = JSON.string(String(repeating: "x", count: 600_000))
        let snapshot = StoredSnapshot(seq: 1, digest: "d", state: ["blob": big], nextReplica: 5,
                                      position: LogPosition(seq: 1, streamSeq: 2, tag: "t"))
        hub.send(.command(.snapshot(snapshot)))
        #expect(hub.machine.isFinishing)
        try hub.answer(Harness.api("STREAM.MSG.GET.ledger_META"), Harness.noMessage)
        // Three chunks of 256 KiB at most, one at a time; a delivery is applied meanwhile.
        var chunks = 0
        while let chunk = hub.openRequests(Harness.names.chunks).first {
            #expect(hub.openRequests(Harness.names.chunks).count == 1, "one chunk in flight at a time")
            #expect(chunk.payload.count <= 256 << 10)
            if chunks == 0 {
                hub.deliver(hub.foreign([Self.record(1)]), at: 2)
                #expect(hub.appended == [1], "deliveries go on while a snapshot goes out")
            }
            try hub.answer(Harness.names.chunks, ["stream": "ledger_META", "seq": JSON(10 + chunks)])
            chunks += 1
        }
        #expect(chunks == 3)
        let head = try #require(hub.openRequests(Harness.names.head).first)
        let written = try JSON(parsing: head.payload)
        #expect(written["chunks"] == 3 && written["first"] == 10 && written["seq"] == 1)
        try hub.answer(Harness.names.head, ["stream": "ledger_META", "seq": 13])
        #expect(hub.openRequests(Harness.api("STREAM.PURGE.ledger_META")).count == 2)
        #expect(!hub.machine.isFinishing)
        #expect(hub.machine.facts.sharedSnapshotSeq == 1)
        // Handed over with the link down: published once it is back.
        hub.send(.linkDown("gone"))
        let later = StoredSnapshot(seq: 2, digest: "e", state: [:], nextReplica: 5, position: LogPosition(seq: 2, streamSeq: 3, tag: "u"))
        hub.send(.command(.snapshot(later)))
        #expect(hub.machine.isFinishing)
        hub.advance(.milliseconds(150))
        hub.answered.removeAll()
        hub.effects.removeAll()
        try hub.open(streamLast: 2)
        #expect(!hub.openRequests(Harness.api("STREAM.MSG.GET.ledger_META")).isEmpty, "the waiting snapshot starts once the link is up")
    }

    @Test("requests with no answer time out on a tick: a consumer that cannot be created means reading record by record")
    func requestTimeouts() throws {
        var hub = Harness()
        hub.linkUp()
        try hub.answer(Harness.info, Harness.streamInfo(last: 1))
        #expect(hub.available)
        hub.advance(.seconds(4))
        #expect(hub.machine.polling)
        #expect(hub.notes.contains { $0.contains("NATS cannot create a consumer now (no answer from NATS to CONSUMER.CREATE.ledger within 3000 ms)") }, "\(hub.notes)")
    }

    @Test("a lease asked for while the link opens is answered once it is up; with no link, at once")
    func leases() throws {
        var hub = Harness()
        hub.send(.command(.lease(from: 1, count: 4, answer: .waiter)))
        #expect(hub.effects.contains(.finishLease(.failure(StorageError("the shared log is unreachable")))))
        hub.linkUp()
        hub.send(.command(.lease(from: 1, count: 4, answer: .event)))
        try hub.answer(Harness.consumerCreate, ["name": "c1"])
        try hub.answer(Harness.info, Harness.streamInfo(last: 1))
        try hub.answer(Harness.api("STREAM.MSG.GET.ledger_META"), ["message": ["seq": 5, "data": .string(Data(#"{"below":9}"#.utf8).base64EncodedString())]])
        let write = try #require(hub.openRequests(Harness.names.lease).first)
        #expect(try JSON(parsing: write.payload) == ["below": 13])
        try hub.answer(Harness.names.lease, ["stream": "ledger_META", "seq": 6])
        #expect(hub.events.contains(.replicaIDs(.success(9..<13))))
    }
}

/// Arbitrary server input fed to the replicator: it never traps, never applies a record out of
/// order, and never moves backwards.
@Suite("The shared log's replicator: arbitrary input")
struct ReplicatorFuzzTests {
    @Test("random replies, deliveries, acknowledgements, heartbeats, link changes and ticks", arguments: [1, 2, 3, 4, 5, 6] as [UInt64])
    func arbitraryInput(seed: UInt64) throws {
        var random = SharedLogFuzzTests.Random(state: seed &* 0x1234_5678_9ABC_DEF1)
        var hub = ReplicatorHarness()
        hub.linkUp()
        var lastNext = hub.machine.next
        var proposed: UInt64 = 0
        let huge = ["18446744073709551615", "99999999999999999999999", "1e300"].compactMap { try? JSON(parsing: Array($0.utf8)) }
        let numbers: [JSON] = [0, 1, 2, 3, -1, -5, 1.5, "3", .null, true] + huge
        let codes = [10071, 10070, 10158, 10167, 10037, 10059, 10008, 0, -1]
        for _ in 0..<3_000 {
            switch random.below(11) {
            case 0:
                hub.advance(.milliseconds(Int64(random.below(6_000))))
            case 1:
                // A reply to an open request, well-formed or not.
                let open = hub.effects.compactMap { effect -> String? in
                    guard case .publish(_, let reply?, _, _) = effect, reply.hasPrefix("_INBOX.t.q.") else { return nil }
                    return reply
                }
                guard let reply = open.isEmpty ? nil : open[random.below(open.count)] else { continue }
                let bodies: [JSON] = [
                    ReplicatorHarness.streamInfo(last: UInt64(random.below(8)), leader: random.below(2) == 0),
                    ["error": ["code": numbers[random.below(numbers.count)], "err_code": JSON(codes[random.below(codes.count)]), "description": "x"]],
                    ["message": ["seq": numbers[random.below(numbers.count)], "subject": "storesync.ledger.actions", "data": "bm90IGEgcmVjb3Jk"]],
                    ["message": ["seq": numbers[random.below(numbers.count)], "data": .string(Data(#"{"below":-4}"#.utf8).base64EncodedString())]],
                    ["state": ["last_seq": numbers[random.below(numbers.count)]], "config": ["num_replicas": numbers[random.below(numbers.count)]]],
                    ["seq": numbers[random.below(numbers.count)], "duplicate": true],
                ]
                let payload = random.below(5) == 0 ? Array("\u{0}garbage".utf8) : bodies[random.below(bodies.count)].canonicalBytes
                hub.send(.message(NATSMessage(subject: reply, sid: 9, reply: nil, headers: random.below(9) == 0 ? NATSHeaders(status: 503) : nil,
                                              payload: payload), subscription: "_INBOX.t.q.*"))
            case 2:
                // A delivery: a valid record, a forged one, or garbage, at a random place.
                let seq = hub.machine.next
                let message: NATSMessage
                switch random.below(3) {
                case 0: message = hub.foreign([ReplicatorTests.record(seq)])
                case 1: message = NATSMessage(subject: "storesync.ledger.actions", sid: 1, reply: nil, headers: nil, payload: Array("{\"seq\":1}".utf8))
                default: message = NATSMessage(subject: "other", sid: 1, reply: nil, headers: NATSHeaders([("StoreSync-Auth", "zz")]), payload: [])
                }
                let place = UInt64(max(0, Int(hub.machine.streamNext) + random.below(5) - 2))
                hub.deliver(message, at: place, pending: UInt64(random.below(3)))
            case 3:
                var message = NATSMessage(subject: "storesync.ledger.actions", sid: 1, reply: nil, headers: nil, payload: [])
                message.reply = ["$JS.ACK.ledger.c.1.-4.1.0.0", "$JS.ACK.x", "$JS.ACK.ledger.c.1.18446744073709551615.1.0.18446744073709551615",
                                 "$JS.ACK.d.h.ledger.c.1.2.3.4.5.6.t", nil][random.below(5)]
                hub.send(.message(message, subscription: hub.deliverSubject))
            case 4:
                hub.heartbeat(lastStream: UInt64(random.below(10)))
            case 5:
                // An acknowledgement for a random proposal, of any kind.
                let proposals = hub.proposals
                guard !proposals.isEmpty else { continue }
                let ack = proposals[random.below(proposals.count)].ack
                let bodies: [JSON] = [["stream": "ledger", "seq": numbers[random.below(numbers.count)]],
                                      ["error": ["err_code": JSON(codes[random.below(codes.count)]), "description": .string("wrong last sequence: \(random.below(9))")]],
                                      ["stream": "ledger", "seq": numbers[random.below(numbers.count)], "duplicate": true]]
                hub.send(.message(NATSMessage(subject: ack, sid: 2, reply: nil, headers: random.below(7) == 0 ? NATSHeaders(status: 503) : nil,
                                              payload: bodies[random.below(bodies.count)].canonicalBytes), subscription: "_INBOX.t.a.*"))
            case 6:
                let seq = max(proposed + 1, hub.machine.next)
                proposed = seq
                hub.send(.command(.propose([LogRecord(seq: seq, origin: 1, id: .number(Int(seq)), session: "s", action: ["type": "increment"])],
                                           expectingLast: seq - 1, epoch: random.below(3))))
            case 7:
                hub.send(.linkDown("test"))
            case 8:
                if case .connecting = hub.machine.link {
                    if random.below(2) == 0 { hub.linkUp() } else { hub.send(.linkFailed(NATSError(.unreachable, "no"))) }
                }
            case 9:
                hub.send(.command(.lease(from: random.below(5), count: random.below(3) + 1, answer: random.below(2) == 0 ? .waiter : .event)))
            default:
                // A message on a subscription the machine never made, or an old consumer's.
                hub.send(.message(NATSMessage(subject: "_INBOX.t.d.1", sid: 5, reply: "$JS.ACK.ledger.c.1.2.2.0.0", headers: nil, payload: []),
                                  subscription: ["_INBOX.t.d.0", "nope", "_INBOX.t.q.*"][random.below(3)]))
            }
            #expect(hub.machine.next >= lastNext, "the read position never moves back")
            lastNext = hub.machine.next
        }
        // What the hub was told it may apply comes in seq order, one after the other, whatever came.
        var last: UInt64 = 0
        for event in hub.events {
            switch event {
            case .appended(let record):
                #expect(record.seq == last + 1, "record \(record.seq) after \(last)")
                last = record.seq
            case .accepted(let through):
                #expect(through > last, "accepted through \(through) after \(last)")
                last = through
            default:
                break
            }
        }
        #expect(last == hub.machine.next - 1)
    }
}

extension SharedLogFuzzTests.Random {
    /// A number in `0..<n` (0 when `n` ≤ 1).
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(max(1, n))) }
}
