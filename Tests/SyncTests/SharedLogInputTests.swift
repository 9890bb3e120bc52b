@testable import StoreHub
import NATSClient
import SyncProtocol
import Testing

/// What other NATS clients on the same server can put in front of a hub, one decision each:
/// none of it may make the hub send a request of their choosing, trap on a number, or take a
/// stored message for JetStream's own.
@Suite("Shared log: input from NATS a hub does not trust")
struct SharedLogInputTests {
    let names = JetStreamLog.Names(stream: "ledger")
    let deliver = "_INBOX.abc.7"

    @Test("a stored message carrying status-100 headers is a stored message, never flow control")
    func storedStatusIsNotControl() {
        let forged = NATSMessage(subject: names.actions, sid: 3, reply: "$JS.ACK.ledger.c.1.5.5.0.0",
                                 headers: NATSHeaders([("Nats-Consumer-Stalled", "$JS.API.STREAM.PURGE.ledger")], status: 100),
                                 payload: [])
        #expect(JetStreamLog.controlReplies(forged, deliverSubject: deliver) == nil)
    }

    @Test("JetStream's own flow control is answered only on $JS.FC. subjects")
    func flowControlSubjects() {
        let genuine = NATSMessage(subject: deliver, sid: 3, reply: "$JS.FC.ledger.x.1",
                                  headers: NATSHeaders([("Nats-Consumer-Stalled", "$JS.FC.ledger.y.2")], status: 100), payload: [])
        #expect(JetStreamLog.controlReplies(genuine, deliverSubject: deliver) == ["$JS.FC.ledger.x.1", "$JS.FC.ledger.y.2"])
        let steering = NATSMessage(subject: deliver, sid: 3, reply: "$JS.API.STREAM.PURGE.ledger",
                                   headers: NATSHeaders([("Nats-Consumer-Stalled", "$JS.API.STREAM.DELETE.ledger")], status: 100), payload: [])
        #expect(JetStreamLog.controlReplies(steering, deliverSubject: deliver) == [])
        let heartbeat = NATSMessage(subject: deliver, sid: 3, reply: nil, headers: NATSHeaders(status: 100), payload: [])
        #expect(JetStreamLog.controlReplies(heartbeat, deliverSubject: deliver) == [])
    }

    static let key = Array("0123456789abcdef0123456789abcdef-test-key".utf8)
    var keys: LogKeys { (try? LogKeys.parse(Self.key, source: "test").get()) ?? .unauthenticated }

    /// A record as a hub of this stream writes it: body, and a tag on `previous`.
    func message(_ record: LogRecord, previous: String, keys: LogKeys? = nil, subject: String? = nil,
                 history: String = "h1") -> NATSMessage {
        let body = record.body
        let tag = (keys ?? self.keys).tag(.record(history: history, seq: record.seq, previous: previous, body: body))
        return NATSMessage(subject: subject ?? names.actions, sid: 3, reply: "$JS.ACK.ledger.c.1.4.4.0.0",
                           headers: NATSHeaders([(JetStreamLog.Replicator.tagHeader, tag)]), payload: body)
    }

    func check(_ message: NATSMessage, next: UInt64 = 3, previous: String = "prev-tag") -> Result<[LogRecord], StorageError> {
        JetStreamLog.validRecords(message, names: names, keys: keys, history: "h1", next: next, previousTag: previous)
    }

    /// A message whose payload a hub holding the key signed, whatever it holds.
    func signed(_ payload: [UInt8], seq: UInt64 = 3, previous: String = "prev-tag") -> NATSMessage {
        let tag = keys.tag(.record(history: "h1", seq: seq, previous: previous, body: payload))
        return NATSMessage(subject: names.actions, sid: 3, reply: "$JS.ACK.ledger.c.1.4.4.0.0",
                           headers: NATSHeaders([(JetStreamLog.Replicator.tagHeader, tag)]), payload: payload)
    }

    @Test("a record tagged under the key, on the last valid record, at the next seq, is valid; so is a batch of them, one per line")
    func validRecord() throws {
        let record = LogRecord(seq: 3, origin: 1, id: .number(9), action: ["type": "increment"])
        #expect(try check(message(record, previous: "prev-tag")).get() == [record])
        let batch = (3...6).map { LogRecord(seq: $0, origin: 2, id: .number(Int($0)), action: ["type": "set", "path": "/a", "value": JSON(Int($0))]) }
        let payload = Array(batch.map { String(decoding: $0.body, as: UTF8.self) }.joined(separator: "\n").utf8)
        #expect(try check(signed(payload)).get() == batch)
        let gap = Array([batch[0], batch[2]].map { String(decoding: $0.body, as: UTF8.self) }.joined(separator: "\n").utf8)
        guard case .failure(let error) = check(signed(gap)) else {
            Issue.record("a batch with a gap was accepted")
            return
        }
        #expect(error.message.contains("holds action seq 5 where seq 4 comes next"), "\(error.message)")
    }

    @Test("anything else is skipped, saying why: no tag, another key, another previous record, another seq, another history, another subject, a body that is not a record")
    func invalidRecords() {
        let record = LogRecord(seq: 3, origin: 1, id: .number(9), action: ["type": "increment"])
        var untagged = message(record, previous: "prev-tag")
        untagged.headers = nil
        let otherKey = (try? LogKeys.parse(Array("another-key-another-key-another-key!".utf8), source: "t").get()) ?? .unauthenticated
        var garbage = message(record, previous: "prev-tag")
        garbage.payload = Array("oops".utf8)
        let cases: [(NATSMessage, String)] = [
            (untagged, "no StoreSync-Auth tag"),
            (message(record, previous: "prev-tag", keys: otherKey), "does not verify"),
            (message(record, previous: "another-previous"), "does not verify"),
            (message(LogRecord(seq: 4, origin: 1, id: .number(9), action: ["type": "increment"]), previous: "prev-tag"), "does not verify"),
            (signed(message(LogRecord(seq: 4, origin: 1, id: .number(9), action: ["type": "increment"]), previous: "prev-tag").payload), "holds action seq 4 where seq 3 comes next"),
            (message(record, previous: "prev-tag", history: "h2"), "does not verify"),
            (message(record, previous: "prev-tag", subject: names.genesis), "not on storesync.ledger.actions"),
            (garbage, "does not verify"),
            (signed(Array("oops".utf8)), "not a record"),
            (message(record, previous: "prev-tag", keys: .unauthenticated), "does not verify"),
        ]
        for (message, reason) in cases {
            guard case .failure(let error) = check(message) else {
                Issue.record("accepted: \(reason)")
                continue
            }
            #expect(error.message.contains(reason), "\(error.message)")
        }
    }

    @Test("keys: at least 32 bytes each, the first signs, every one verifies (rotation)")
    func keyFiles() throws {
        let old = "old-key-old-key-old-key-old-key-old-key", new = "new-key-new-key-new-key-new-key-new-key"
        let before = try LogKeys.parse(Array("\(old)\n".utf8), source: "f").get()
        let during = try LogKeys.parse(Array("# rotating\n\(old)\n\(new)\n".utf8), source: "f").get()
        let after = try LogKeys.parse(Array("\(new)\n\(old)\n".utf8), source: "f").get()
        let subject = LogKeys.Subject.record(history: "h", seq: 1, previous: "", body: Array("{}".utf8))
        #expect(during.isValid(before.tag(subject), for: subject))
        #expect(before.isValid(during.tag(subject), for: subject), "the old key still signs while the new one is added")
        #expect(during.isValid(after.tag(subject), for: subject), "the new key signs once first")
        #expect(!before.isValid(after.tag(subject), for: subject))
        guard case .failure(let short) = LogKeys.parse(Array("too-short\n".utf8), source: "f") else {
            Issue.record("a short key was accepted")
            return
        }
        #expect(short.message.contains("at least 32 bytes"))
        guard case .failure(let empty) = LogKeys.parse(Array("# none\n\n".utf8), source: "f") else {
            Issue.record("a file without a key was accepted")
            return
        }
        #expect(empty.message.contains("holds no key"))
        #expect(!LogKeys.unauthenticated.isValid("hmac-sha256:00000000:00", for: subject))
        #expect(!before.isValid("hmac-sha256:zz:" + String(repeating: "0", count: 64), for: subject))
    }

    @Test("negative, fractional and huge numbers from NATS read as absent, never trap")
    func numbers() throws {
        for text in ["-1", "-5", "2.5", "1e300", "\"7\""] {
            let json = try JSON(parsing: Array(#"{"seq":\#(text)}"#.utf8))
            #expect(json["seq"]?.uint64Value == nil)
        }
        let info = try JSON(parsing: Array(#"{"state":{"last_seq":-3}}"#.utf8))
        #expect(JetStreamLog.lastStreamSeq(in: info) == 0)
    }

    @Test("server releases: older than 2.10.23 are refused, saying what to run; 2.10.23 and later are used")
    func releases() {
        for version in [NATSServerVersion(2, 10, 23), NATSServerVersion(2, 12, 8), NATSServerVersion(2, 14, 6), NATSServerVersion(2, 15, 1)] {
            #expect(JetStreamLog.supportProblem(version: version, server: "h:1") == nil, "\(version)")
        }
        #expect(JetStreamLog.supportProblem(version: nil, server: "h:1") == nil)
        let old = JetStreamLog.supportProblem(version: NATSServerVersion(2, 9, 10), server: "h:1")
        #expect(old?.contains("nats-server 2.9.10, older than 2.10.23") == true)
        #expect(old?.contains("2.10.23 or later") == true)
    }
}
