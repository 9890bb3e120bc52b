import BuiltinApps
@testable import StoreHub
import SyncCore
import SyncLocks
import Testing

/// A shared log the test drives by hand: it records what the hub proposes and reports the
/// events the test pushes (another hub's records, conflicts, failures), as NATS would.
private final class ScriptedLog: HubLog {
    var proposals: [(records: [LogRecord], expectingLast: UInt64)] = []
    var pending: [LogEvent] = []
    let start: LogStart

    init(start: LogStart = LogStart(history: "h-test")) { self.start = start }

    func open() throws(StorageError) -> LogStart { start }
    func propose(_ records: [LogRecord], expectingLast: UInt64, epoch: Int) { proposals.append((records, expectingLast)) }
    func flush() {}
    func poll(into events: inout [LogEvent]) {
        events.append(contentsOf: pending)
        pending.removeAll()
    }
    var readiness: LogReadiness? { nil }
    func reserveReplicaIDs(from next: Int, count: Int) throws(StorageError) -> Range<Int> { next..<(next + count) }
    func requestReplicaIDs(from next: Int, count: Int) { leaseRequests.append(next..<(next + count)) }
    var leaseRequests: [Range<Int>] = []
    func writeSnapshot(_ snapshot: StoredSnapshot) throws(StorageError) {}
    /// What the log says when asked whether it works again.
    var available = true
    func probe() -> Bool { available }
    var status: LogStatus { LogStatus(kind: "scripted", location: "test") }
    var isShared: Bool { true }
    var mayRefuse: Bool { true }
    func close() {}
}

/// The sequencer over a log with other writers: proposals always follow the applied seq,
/// another hub's record voids what it overtakes, and de-duplication covers every hub's records.
@Suite("Sequencer over a shared log (scripted)")
struct SequencerTests {
    private func sequencer(_ log: ScriptedLog) throws -> Sequencer {
        try Sequencer(engine: HubEngine(app: JSONApp()), log: log, snapshotEvery: 1_000, backlogActions: 100,
                      backlogBytes: 1 << 20, checkpointEvery: 0, dedupWindow: 1_000, logger: .discarding)
    }

    private func set(_ path: String, _ value: Int) -> JSON { ["type": "set", "path": .string(path), "value": JSON(value)] }

    private func foreign(_ seq: UInt64, _ path: String, _ value: Int, session: String? = nil, id: Int = 1) -> LogRecord {
        LogRecord(seq: seq, origin: 9_000, id: .number(id), session: session, action: set(path, value))
    }

    @Test("another hub's record while nothing is in flight: the next proposal follows it, on a state that includes it")
    func proposalFollowsForeignRecord() throws {
        let log = ScriptedLog()
        let sequencer = try sequencer(log)
        log.pending = [.appended(foreign(1, "/theirs", 1))]
        _ = sequencer.pump(now: .now)
        #expect(sequencer.appliedSeq == 1)
        #expect(sequencer.proposedSeq == 1)
        #expect(sequencer.isJudging)
        // Appending to an array that exists only because of the foreign record proves the
        // speculative state includes it.
        #expect(sequencer.dispatch(set("/mine", 2), id: .number(1), origin: 1, session: nil) == .proposed(2))
        #expect(log.proposals.last?.expectingLast == 1)
        #expect(log.proposals.last?.records.map(\.seq) == [2])
        #expect(sequencer.speculativeState().seq == 2)
    }

    @Test("another hub's record overtakes two proposals: both are voided, judged again after it, and re-proposed")
    func overtakenProposalsAreVoided() throws {
        let log = ScriptedLog()
        let sequencer = try sequencer(log)
        #expect(sequencer.dispatch(set("/a", 1), id: .number(1), origin: 1, session: nil) == .proposed(1))
        #expect(sequencer.dispatch(set("/b", 2), id: .number(2), origin: 1, session: nil) == .proposed(2))
        log.pending = [.appended(foreign(1, "/x", 3))]
        let result = sequencer.pump(now: .now)
        #expect(result.voidedFrom == 1)
        #expect(sequencer.inFlightCount == 0)
        #expect(sequencer.appliedSeq == 1)
        #expect(sequencer.isJudging)
        #expect(sequencer.dispatch(set("/a", 1), id: .number(1), origin: 1, session: nil) == .proposed(2))
        #expect(log.proposals.last?.expectingLast == 1)
        let state = sequencer.speculativeState()
        #expect(state.seq == 2)
        #expect(String(decoding: UnsafeRawBufferPointer(state.bytes.memory).prefix(state.bytes.count), as: UTF8.self) == #"{"a":1,"x":3}"#)
    }

    @Test("a conflict reported before the record that caused it: no judging until the applied seq reaches the log's end")
    func conflictWaitsForCatchUp() throws {
        let log = ScriptedLog()
        let sequencer = try sequencer(log)
        #expect(sequencer.dispatch(set("/a", 1), id: .number(1), origin: 1, session: nil) == .proposed(1))
        log.pending = [.conflict(from: 1, logLast: 2)]
        let voided = sequencer.pump(now: .now)
        #expect(voided.voidedFrom == 1)
        #expect(!sequencer.isJudging, "the records that won are not applied yet")
        log.pending = [.appended(foreign(1, "/x", 1))]
        _ = sequencer.pump(now: .now)
        #expect(!sequencer.isJudging)
        log.pending = [.appended(foreign(2, "/y", 2))]
        _ = sequencer.pump(now: .now)
        #expect(sequencer.isJudging)
        #expect(sequencer.dispatch(set("/a", 1), id: .number(1), origin: 1, session: nil) == .proposed(3))
        #expect(log.proposals.last?.expectingLast == 2)
    }

    @Test("catching up when the log goes down: requests are judged again at once (refused unavailable, reads from the applied state), never held until the outage ends")
    func outageWhileCatchingUpStillJudges() throws {
        let log = ScriptedLog()
        let sequencer = try sequencer(log)
        #expect(sequencer.dispatch(set("/a", 1), id: .number(1), origin: 1, session: nil) == .proposed(1))
        log.pending = [.conflict(from: 1, logLast: 5)]
        _ = sequencer.pump(now: .now)
        _ = sequencer.pump(now: .now)
        #expect(!sequencer.isJudging, "catching up to seq 5, nothing of it applied")
        // The log goes down before the hub could read what won: it may stay down a long time.
        log.available = false
        log.pending = [.inDoubt(from: 1, reason: "the link to NATS dropped")]
        _ = sequencer.pump(now: .now)
        #expect(sequencer.isJudging, "an outage is decided at once: status, welcome and history are served")
        guard case .refused(let error) = sequencer.dispatch(set("/b", 1), id: .number(2), origin: 1, session: nil) else {
            Issue.record("a dispatch during the outage must be refused")
            return
        }
        #expect(error.code == .unavailable)
        #expect(sequencer.appliedState().seq == 0)
        // Back, still behind: judging waits for the catch-up again.
        log.available = true
        log.pending = [.appended(foreign(1, "/x", 1))]
        _ = sequencer.pump(now: .now)
        #expect(!sequencer.isJudging)
    }

    @Test("exactly once across hubs: a dispatch another hub sequenced for this session is a duplicate here")
    func duplicateAcrossHubs() throws {
        let log = ScriptedLog()
        let sequencer = try sequencer(log)
        let session = sequencer.session(named: "client-7", now: .now)
        log.pending = [.appended(foreign(1, "/x", 1, session: "client-7", id: 42))]
        _ = sequencer.pump(now: .now)
        #expect(sequencer.dispatch(set("/x", 1), id: .number(42), origin: 3, session: session) == .duplicate(1))
        #expect(log.proposals.isEmpty)
        #expect(sequencer.dispatch(set("/x", 2), id: .number(43), origin: 3, session: session) == .proposed(2))
    }

    @Test("own proposals read back in order are applied; a record seq that skips ahead stops the hub")
    func ownRecordsAndGaps() throws {
        let log = ScriptedLog()
        let sequencer = try sequencer(log)
        #expect(sequencer.dispatch(set("/a", 1), id: .number(1), origin: 1, session: nil) == .proposed(1))
        let own = try #require(log.proposals.last?.records.first)
        log.pending = [.appended(own)]
        #expect(sequencer.pump(now: .now).broken == nil)
        #expect(sequencer.appliedSeq == 1)
        log.pending = [.appended(foreign(3, "/gap", 1))]
        #expect(sequencer.pump(now: .now).broken != nil)
        #expect(sequencer.appliedSeq == 1)
    }

    @Test("the log failing closes the gate: dispatches are refused unavailable, nothing applied")
    func failureRefuses() throws {
        let log = ScriptedLog()
        let sequencer = try sequencer(log)
        #expect(sequencer.dispatch(set("/a", 1), id: .number(1), origin: 1, session: nil) == .proposed(1))
        log.available = false
        log.pending = [.inDoubt(from: 1, reason: "the link to NATS dropped")]
        _ = sequencer.pump(now: .now)
        guard case .refused(let error) = sequencer.dispatch(set("/b", 1), id: .number(2), origin: 1, session: nil) else {
            Issue.record("a dispatch while the log is in doubt must be refused")
            return
        }
        #expect(error.code == .unavailable)
        #expect(sequencer.appliedSeq == 0)
        // Back: the in-doubt proposal is read back, and the gate opens in the same pass.
        log.available = true
        let own = try #require(log.proposals.first?.records.first)
        log.pending = [.appended(own)]
        #expect(sequencer.pump(now: .now).becameAvailable)
        #expect(sequencer.appliedSeq == 1)
        #expect(sequencer.dispatch(set("/b", 1), id: .number(2), origin: 1, session: nil) == .proposed(2))
    }

    @Test("replica ids: the first block is reserved at start, the next one asked for ahead; none held means nil, never a guess")
    func replicaIDsAhead() throws {
        let log = ScriptedLog()
        let sequencer = try sequencer(log)
        var taken: [Int] = []
        for _ in 0..<Sequencer.replicaBlock / 2 { taken.append(try #require(sequencer.takeReplicaID(now: .now))) }
        #expect(taken.first == 1)
        #expect(log.leaseRequests.isEmpty, "more than half of the block is left")
        taken.append(try #require(sequencer.takeReplicaID(now: .now)))
        #expect(log.leaseRequests.count == 1)
        while sequencer.takeReplicaID(now: .now) != nil {}
        // The block ran out and the log has not answered: no id.
        #expect(sequencer.takeReplicaID(now: .now) == nil)
        let block = try #require(log.leaseRequests.first)
        log.pending = [.replicaIDs(.success(block))]
        _ = sequencer.pump(now: .now)
        #expect(sequencer.takeReplicaID(now: .now) == block.lowerBound)
        #expect(block.lowerBound > Sequencer.replicaBlock)
    }

    @Test("a proposal is stamped once, with the injected wall clock and its origin's name; another hub's record keeps its own stamp; frames and records agree")
    func stamps() throws {
        let log = ScriptedLog()
        let clock = Locked<Int64>(1_764_339_000_000)
        let sequencer = try Sequencer(engine: HubEngine(app: JSONApp()), log: log, snapshotEvery: 1_000, backlogActions: 100,
                                      backlogBytes: 1 << 20, checkpointEvery: 0, dedupWindow: 1_000,
                                      wallClock: { clock.withLock { $0 += 5; return $0 } }, logger: .discarding)
        #expect(sequencer.dispatch(set("/a", 1), id: .number(1), origin: 1, originName: "alice", session: nil) == .proposed(1))
        // Judged in the same pass: the clock is read once for both.
        #expect(sequencer.dispatch(set("/b", 2), id: .number(2), origin: 2, session: nil) == .proposed(2))
        #expect(log.proposals.map { $0.records.map(\.stamp) }
            == [[ActionStamp(time: 1_764_339_000_005, originName: "alice")], [ActionStamp(time: 1_764_339_000_005)]])
        log.pending = [.accepted(through: 2)]
        _ = sequencer.pump(now: .now)
        #expect(sequencer.dispatch(set("/d", 4), id: .number(3), origin: 2, session: nil) == .proposed(3))
        #expect(log.proposals.last?.records.map(\.stamp) == [ActionStamp(time: 1_764_339_000_010)], "the next pass reads it again")
        log.pending = [.accepted(through: 3)]
        _ = sequencer.pump(now: .now)
        log.pending = [.appended(LogRecord(seq: 4, origin: 9_000, id: .number(1), action: set("/c", 3),
                                           stamp: ActionStamp(time: 77, originName: "bob")))]
        _ = sequencer.pump(now: .now)
        #expect(sequencer.appliedSeq == 4)
        let backlog = sequencer.backlog
        let start = try #require(backlog.position(after: 0))
        var decoder = FrameDecoder(maxPayloadBytes: 1 << 20)
        decoder.append(backlog.copy(from: start, to: backlog.end))
        var stamps: [ActionStamp] = []
        while let frame = try decoder.nextFrame() {
            if case .action(_, _, _, _, let stamp) = try HubMessage(json: JSON(parsing: frame)) { stamps.append(stamp) }
        }
        #expect(stamps == [ActionStamp(time: 1_764_339_000_005, originName: "alice"), ActionStamp(time: 1_764_339_000_005),
                           ActionStamp(time: 1_764_339_000_010), ActionStamp(time: 77, originName: "bob")])
    }

    @Test("a proposal waits for the next pump's group commit, and says so, so the event loop does not sleep on it")
    func unflushedProposals() throws {
        let log = ScriptedLog()
        let sequencer = try sequencer(log)
        #expect(!sequencer.hasUnflushedProposals)
        #expect(sequencer.dispatch(set("/a", 1), id: .number(1), origin: 1, session: nil) == .proposed(1))
        #expect(sequencer.hasUnflushedProposals, "proposed, not yet committed: the loop must pump again at once")
        _ = sequencer.pump(now: .now)
        #expect(!sequencer.hasUnflushedProposals)
        // Refused: nothing to commit.
        #expect(sequencer.dispatch(["type": "nope"], id: .number(2), origin: 1, session: nil) != .proposed(2))
        #expect(!sequencer.hasUnflushedProposals)
    }
}
