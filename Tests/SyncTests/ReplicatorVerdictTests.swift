@testable import StoreHub
import NATSClient
import SyncProtocol
import Testing

extension ReplicatorTests {
    @Test("the first verdict on a proposal wins: once stored (a PubAck), a later copy refused by a server that did not know it (10071) does not void it")
    func firstVerdictWins() throws {
        var hub = Harness()
        try hub.open(streamLast: 1)
        let mine = LogRecord(seq: 1, origin: 1, id: .number(1), session: "s1", action: ["type": "increment"])
        hub.send(.command(.propose([mine], expectingLast: 0, epoch: 1)))
        // Unanswered for a second: a second copy goes, same id and expectations.
        hub.advance(.milliseconds(1_100))
        let copies = hub.proposals
        #expect(copies.count == 2 && copies[0].headers?["Nats-Msg-Id"] == copies[1].headers?["Nats-Msg-Id"])
        hub.acknowledge(copies[0].ack, ["stream": "ledger", "seq": 2])
        // A deposed leader answers the second copy by its own, older view.
        hub.acknowledge(copies[1].ack, ["error": ["code": 400, "err_code": 10071, "description": "wrong last sequence: 1"]])
        #expect(!hub.events.contains { if case .conflict = $0 { true } else { false } }, "\(hub.events)")
        // Read back, it is this hub's record.
        hub.deliver(NATSMessage(subject: Harness.names.actions, sid: 1, reply: nil, headers: copies[0].headers, payload: copies[0].payload), at: 2)
        #expect(hub.events.contains(.accepted(through: 1)), "\(hub.events)")
    }
}

extension ReplicatorTests {
    @Test("a conflict while other hubs' records are held behind a check with the leader keeps the consumer: they are the stream's, and go on once checked (reading again at every conflict kept a hub behind under load for good)")
    func conflictBehindCheckKeepsReading() throws {
        var hub = Harness()
        try hub.open(streamLast: 1)
        hub.send(.linkDown("NATS at a:4222 closed the connection"))
        hub.advance(.milliseconds(150))
        try hub.open(streamLast: 1)
        let consumer = hub.deliverSubject
        // Within the suspect window after a reconnection, this hub proposes seq 1 ...
        let mine = LogRecord(seq: 1, origin: 1, id: .number(1), session: "s1", action: ["type": "increment"])
        hub.send(.command(.propose([mine], expectingLast: 0, epoch: 1)))
        let proposal = try #require(hub.proposals.last)
        // ... while another hub's records come first: the first is checked with the leader, the next held.
        let theirs = hub.foreign([Self.record(1)])
        hub.deliver(theirs, at: 2)
        hub.deliver(hub.foreign([Self.record(2)]), at: 3)
        #expect(hub.machine.held.count == 1 && hub.appended.isEmpty)
        // The leader refuses this hub's proposal: its place was taken.
        hub.acknowledge(proposal.ack, ["error": ["code": 400, "err_code": 10071, "description": "wrong last sequence: 3"]])
        #expect(hub.events.contains(.conflict(from: 1, logLast: 0)))
        #expect(hub.deliverSubject == consumer, "the consumer is kept")
        #expect(!hub.notes.contains { $0.contains("reading the stream again") }, "\(hub.notes)")
        // The leader's copy comes back: the held records are applied in order.
        try hub.answer(Harness.get, Harness.stored(theirs, at: 2))
        #expect(hub.appended.first == 1)
    }
}
