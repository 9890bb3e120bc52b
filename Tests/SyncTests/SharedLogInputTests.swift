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

    @Test("a delivery read with either form of the acknowledgement subject", arguments: [
        "$JS.ACK.ledger.c.1.4.4.1700000000000000000.0",
        "$JS.ACK._.HASH.ledger.c.1.4.4.1700000000000000000.0",
        "$JS.ACK._.HASH.ledger.c.1.4.4.1700000000000000000.0.tok",
    ])
    func bothAckForms(reply: String) throws {
        let record = LogRecord(seq: 3, origin: 1, id: .number(9), action: ["type": "increment"])
        let message = NATSMessage(subject: names.actions, sid: 3, reply: reply, headers: nil, payload: record.body)
        #expect(try JetStreamLog.record(from: message, names: names)?.seq == 3)
    }

    @Test("a delivery of another stream, or without a stream sequence, is refused without a trap", arguments: [
        "$JS.ACK.other.c.1.4.4.0.0", "$JS.ACK.ledger.c.1.0.4.0.0", "$JS.ACK.ledger.c.1.-5.4.0.0", "garbage",
    ])
    func badAckSubjects(reply: String) {
        let record = LogRecord(seq: 3, origin: 1, id: .number(9), action: ["type": "increment"])
        let message = NATSMessage(subject: names.actions, sid: 3, reply: reply, headers: nil, payload: record.body)
        #expect(throws: StorageError.self) { try JetStreamLog.record(from: message, names: names) }
    }

    @Test("negative, fractional and huge numbers from NATS read as absent, never trap")
    func numbers() throws {
        for text in ["-1", "-5", "2.5", "1e300", "\"7\""] {
            let json = try JSON(parsing: Array(#"{"seq":\#(text)}"#.utf8))
            #expect(json["seq"]?.uint64Value == nil)
        }
        let info = try JSON(parsing: Array(#"{"state":{"last_seq":-3}}"#.utf8))
        #expect(JetStreamLog.lastActionSeq(in: info) == 0)
    }

    @Test("server releases: older than 2.10.23 and 2.13 or newer are refused, saying what to run")
    func releases() {
        #expect(JetStreamLog.supportProblem(version: NATSServerVersion(2, 12, 8), server: "h:1") == nil)
        #expect(JetStreamLog.supportProblem(version: NATSServerVersion(2, 10, 23), server: "h:1") == nil)
        #expect(JetStreamLog.supportProblem(version: nil, server: "h:1") == nil)
        let old = JetStreamLog.supportProblem(version: NATSServerVersion(2, 9, 10), server: "h:1")
        #expect(old?.contains("nats-server 2.9.10, older than 2.10.23") == true)
        let new = JetStreamLog.supportProblem(version: NATSServerVersion(2, 15, 1), server: "h:1")
        #expect(new?.contains("Nats-Expected-Last-Msg-Id") == true)
        #expect(new?.contains("2.10.23 to 2.12.x") == true)
    }
}
