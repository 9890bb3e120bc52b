@testable import StoreReplica
import SyncCore
import Testing

/// The replica's bookkeeping on its own: which dispatches wait, when they are sent, queued or
/// refused, what is re-sent after a reconnection and in which order — no socket, no thread.
@Suite("ReplicaLedger: pending dispatches and the link, as a pure state machine")
struct ReplicaLedgerTests {
    private func ledger(maxPending: Int = 3) -> ReplicaLedger {
        ReplicaLedger(hubID: "hub-1", history: "h1", replica: 7, maxPending: maxPending)
    }

    private func action(_ n: Int) -> JSON { ["type": "set", "path": "/n", "value": .number(Double(n))] }

    @Test("connected: a dispatch is sent and stays pending until its own action answers it")
    func sentUntilSequenced() {
        var ledger = ledger()
        #expect(ledger.submit(id: .number(1), json: action(1), awaited: true) == .send)
        #expect(ledger.pending.count == 1)
        // Another replica's action with the same id answers nothing.
        #expect(ledger.sequenced(origin: 8, id: .number(1)) == nil)
        #expect(ledger.pending.count == 1)
        let answered = ledger.sequenced(origin: 7, id: .number(1))
        #expect(answered?.json == action(1))
        #expect(answered?.awaited == true)
        #expect(ledger.pending.isEmpty)
    }

    @Test("reject and duplicate each end a pending dispatch; an unsent one is forgotten")
    func rejectDuplicateUnsent() {
        var ledger = ledger()
        for n in 1...3 { _ = ledger.submit(id: .number(n), json: action(n), awaited: false) }
        #expect(ledger.rejected(.number(1)) != nil)
        #expect(ledger.duplicate(.number(2)) != nil)
        #expect(ledger.unsent(.number(3)) != nil)
        #expect(ledger.pending.isEmpty)
        #expect(ledger.rejected(.number(1)) == nil, "answered once only")
    }

    @Test("the pending bound refuses under the dispatch lock, lets a sender that can wait through, and always applies while reconnecting")
    func pendingBound() {
        var ledger = ledger(maxPending: 2)
        #expect(ledger.submit(id: .number(1), json: action(1), awaited: false) == .send)
        #expect(ledger.submit(id: .number(2), json: action(2), awaited: false) == .send)
        guard case .refuse(let error) = ledger.submit(id: .number(3), json: action(3), awaited: false, bounded: true) else {
            Issue.record("a third dispatch under the dispatch lock must be refused")
            return
        }
        #expect(error.description.contains("maxPendingDispatches"))
        #expect(ledger.pending.count == 2, "a refusal records nothing")
        #expect(ledger.submit(id: .number(4), json: action(4), awaited: true, bounded: false) == .send)

        ledger.dropped(divergence: false)
        guard case .refuse(let queued) = ledger.submit(id: .number(5), json: action(5), awaited: true, bounded: false) else {
            Issue.record("while reconnecting the bound applies to every sender")
            return
        }
        #expect(queued.description.contains("come back"))
    }

    @Test("reconnecting: dispatches queue; after the welcome they are re-sent in their original order, then the link is connected")
    func resendInOrder() {
        var ledger = ledger(maxPending: 10)
        #expect(ledger.submit(id: .number(1), json: action(1), awaited: false) == .send)
        #expect(ledger.submit(id: .number(2), json: action(2), awaited: false) == .send)
        ledger.dropped(divergence: false)
        #expect(ledger.link == .reconnecting(attempt: 1))
        ledger.reconnecting(attempt: 2)
        #expect(ledger.link == .reconnecting(attempt: 2))
        #expect(ledger.submit(id: .number(3), json: action(3), awaited: true) == .queue)
        ledger.welcomed(hub: "hub-2", replica: 9, history: "h1", resumed: true, change: .resumed(seq: 40))
        // The replay acknowledged the first one.
        #expect(ledger.sequenced(origin: 7, id: .number(1)) != nil)
        #expect(ledger.completeResume() == .resumed(seq: 40))
        #expect(ledger.completeResume() == nil, "reported once")
        let first = ledger.toResend(after: -1)
        #expect(first.map(\.id) == [.number(2), .number(3)])
        #expect(ledger.link == .reconnecting(attempt: 2), "still re-sending")
        // A dispatch submitted while re-sending is queued behind them, and picked up next.
        #expect(ledger.submit(id: .number(4), json: action(4), awaited: false) == .queue)
        let second = ledger.toResend(after: first.last?.order ?? -1)
        #expect(second.map(\.id) == [.number(4)])
        let third = ledger.toResend(after: second.last?.order ?? -1)
        #expect(third.isEmpty)
        #expect(ledger.link == .connected)
        #expect(ledger.submit(id: .number(5), json: action(5), awaited: false) == .send)
        // Both replica ids of this history are its own.
        #expect(ledger.isOwn(origin: 7) && ledger.isOwn(origin: 9))
        #expect(ledger.hubID == "hub-2")
    }

    @Test("another history forgets the old replica ids; a divergence is counted")
    func newHistory() {
        var ledger = ledger()
        ledger.dropped(divergence: true)
        #expect(ledger.divergences == 1)
        ledger.welcomed(hub: "hub-3", replica: 1, history: "h2", resumed: false, change: .rehydrated(seq: 0))
        #expect(!ledger.isOwn(origin: 7))
        #expect(ledger.isOwn(origin: 1))
        #expect(ledger.history == "h2")
        #expect(ledger.completeResume() == nil, "a full welcome has no replay to wait for")
    }

    @Test("a welcome of another history hands back the dispatches queued against the old one, in order, unsent")
    func historyChangedOrphansPending() {
        var ledger = ledger(maxPending: 10)
        #expect(ledger.submit(id: .number(1), json: action(1), awaited: false) == .send)
        ledger.dropped(divergence: false)
        #expect(ledger.submit(id: .number(2), json: action(2), awaited: true) == .queue)
        #expect(ledger.submit(id: .number(3), json: action(3), awaited: false) == .queue)
        let orphaned = ledger.welcomed(hub: "hub-new", replica: 1, history: "h-new", resumed: false,
                                       change: .rehydrated(seq: 0))
        #expect(orphaned == [.number(1), .number(2), .number(3)])
        #expect(ledger.pending.isEmpty)
        #expect(ledger.toResend(after: -1).isEmpty, "nothing made against the old history is sent to the new one")
        #expect(ledger.link == .connected)
        // The same history again (a resume, or a restarted hub on the same log): nothing is orphaned.
        #expect(ledger.submit(id: .number(4), json: action(4), awaited: false) == .send)
        ledger.dropped(divergence: false)
        #expect(ledger.welcomed(hub: "hub-new", replica: 2, history: "h-new", resumed: true, change: .resumed(seq: 0)).isEmpty)
        #expect(ledger.pending.keys.contains(.number(4)))
    }

    @Test("the end hands back every pending dispatch in order, and refuses everything after")
    func end() {
        var ledger = ledger()
        for n in [3, 1, 2] { _ = ledger.submit(id: .number(n), json: action(n), awaited: n == 1) }
        let left = ledger.end(.disconnected("the hub went away"))
        #expect(left.map(\.id) == [.number(3), .number(1), .number(2)])
        #expect(left.map(\.pending.awaited) == [false, true, false])
        #expect(ledger.pending.isEmpty)
        #expect(ledger.link == .disconnected(.disconnected("the hub went away")))
        guard case .refuse(let error) = ledger.submit(id: .number(9), json: action(9), awaited: false) else {
            Issue.record("an ended replica refuses")
            return
        }
        #expect(error.description.contains("the hub went away"))
    }
}
