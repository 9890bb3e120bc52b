import BuiltinApps
@testable import StoreSyncCommands
import SyncCore
import Testing

/// What attach's `:history` and `:diff` keep: the last actions seen, and the state before the
/// oldest, folded forward as older ones leave.
@Suite("attach's kept actions (:history, :diff)")
struct SeenActionsTests {
    private let app = JSONApp()

    private func entry(_ seq: UInt64, _ path: String, _ value: Int) throws -> SeenActions<JSONApp>.Entry {
        let json: JSON = ["type": "set", "path": .string(path), "value": JSON(value)]
        return .init(sequenced: SequencedAction(seq: seq, origin: 1, id: .number(Int(seq)), action: json, stamp: .none),
                     action: try app.decodeAction(json), own: false)
    }

    @Test("past the capacity the oldest leave, folded into the base: a kept action's patch is still exact, a gone one is refused, many rounds later too")
    func foldsOldest() throws {
        let seen = SeenActions(app: app, start: app.initialState, capacity: 3)
        // Seq n sets /n (so each patch is an add of a new member), and /a again every time.
        for seq in UInt64(1)...10 {
            seen.record(try entry(seq, "/a", Int(seq)))
        }
        #expect(seen.newest(5).map(\.sequenced.seq) == [8, 9, 10])
        guard case .patch(let kept, let patch) = seen.diff(8) else { Issue.record("seq 8 is kept"); return }
        #expect(kept.sequenced.seq == 8)
        #expect(patch == [["op": "replace", "path": "/a", "value": 8]], "the state before 8 was rebuilt: /a was 7")
        guard case .patch(_, let newest) = seen.diff(nil) else { Issue.record("the newest is kept"); return }
        #expect(newest == [["op": "replace", "path": "/a", "value": 10]])
        guard case .unavailable(let reason) = seen.diff(7) else { Issue.record("seq 7 left"); return }
        #expect(reason.contains("seq 7 is not among the actions seen here (seq 8 to 10"))

        seen.restart(at: app.initialState)
        #expect(seen.newest(5).isEmpty)
        seen.record(try entry(11, "/b", 1))
        guard case .patch(_, let fresh) = seen.diff(11) else { Issue.record("seq 11 is kept"); return }
        #expect(fresh == [["op": "add", "path": "/b", "value": 1]], "after a restart, diffs start from the new state")
    }
}
