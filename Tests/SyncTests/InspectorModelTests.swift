import BuiltinApps
@testable import StoreSyncCommands
import SyncCore
import Testing

/// What the inspector keeps: its page's lines, the states it keeps among its actions, and the
/// bounds, as values (no hub, no server).
@Suite("Inspector: the model's lines, kept states and bounds")
struct InspectorModelTests {
    private let app = JSONApp()

    private func action(_ n: Int) -> SequencedAction {
        let json: JSON = n % 5 == 0
            ? ["type": "increment", "path": "/count", "by": 1]
            : ["type": "set", "path": "/n", "value": JSON(n), "pad": .string(String(repeating: "x", count: n % 7))]
        return SequencedAction(seq: UInt64(n), origin: n % 3 + 1, id: .number(n), action: json,
                               stamp: ActionStamp(time: 1_795_000_000_000 + Int64(n), originName: n % 2 == 0 ? "é\u{7}w" : nil))
    }

    /// The state right after each seq 0…`count`, by applying every action once.
    private func states(through count: Int) -> [JSON] {
        var state = app.initialState
        var states = [app.encodeState(state)]
        for n in 1...count {
            ReplicaCommand.apply(app, action(n).action, seq: UInt64(n), to: &state)
            states.append(app.encodeState(state))
        }
        return states
    }

    @Test("a page line is the canonical form of its members, written without sorting")
    func lines() {
        let actions = [action(1), action(2), action(5),
                       SequencedAction(seq: 9_007_199_254_740_991, origin: 7, id: .string("id \"q\" é"), action: [1, 2],
                                       stamp: .none)]
        for action in actions {
            var members: [JSONKey: JSON] = ["seq": JSON(action.seq), "origin": JSON(action.origin), "id": action.id.json,
                                            "action": action.action]
            if let name = action.stamp.originName { members["origin_name"] = .string(name) }
            if let time = action.stamp.time { members["time"] = JSON(Int(truncatingIfNeeded: time)) }
            if let type = action.action["type"]?.stringValue { members["type"] = .string(type) }
            #expect(InspectorModel<JSONApp>.line(for: action) == JSON.object(members).canonicalBytes)
        }
    }

    @Test("every seq in the window rebuilds to the right state, whether states were kept or not; the window stays within keep",
          arguments: [(64, 1 << 20, 3), (64, 1 << 20, 1), (64, 1 << 20, 0), (64, 2_000, 2), (1, 1 << 20, 1),
                      (64, 1 << 20, 50), (64, 1 << 20, 63), (100, 1 << 20, 120)] as [(Int, Int, Int)])
    func keptStates(keep: Int, maxBytes: Int, stateStride: Int) throws {
        let total = 400
        let truth = states(through: total)
        let model = InspectorModel(app: app, state: app.initialState, seq: 0, keep: keep, maxBytes: maxBytes, dataDirectory: nil)
        var state = app.initialState
        for n in 1...total {
            ReplicaCommand.apply(app, action(n).action, seq: UInt64(n), to: &state)
            // The state is at hand only for some actions (a read's last), never for others.
            let handed = stateStride > 0 && n % stateStride == 0
            // `Optional(state)`: a bare `nil` here would be JSON's own `null` literal.
            let line = model.append(action(n)) { handed ? Optional(state) : .none }
            #expect(line == InspectorModel<JSONApp>.line(for: action(n)))
            let window = model.window
            #expect(window.newest == UInt64(n))
            #expect(window.newest - window.base <= UInt64(keep))
            // Once full, at least half of keep stays, however far apart the kept states are
            // (states come at the end of reads, and a read can be long).
            if maxBytes >= 1 << 20, n >= keep {
                #expect(window.newest - window.base >= UInt64(keep / 2), "after \(n): \(window)")
            }
        }
        let window = model.window
        if maxBytes >= 1 << 20, stateStride <= 4 {
            // With states every few actions, all but the last sixteenth stays; all when none is kept.
            #expect(window.newest - window.base >= UInt64(keep - keep / 16), "\(window)")
        }
        for seq in window.base...window.newest {
            guard case .success(let (json, source)) = model.state(at: seq, hubWindow: { _ in nil }) else {
                Issue.record("seq \(seq) was not rebuilt")
                continue
            }
            #expect(json == truth[Int(seq)], "seq \(seq)")
            #expect(source == "inspector")
        }
        // Before the window, with neither a data directory nor the hub's window: a clear refusal.
        if window.base > 0, case .failure(let error) = model.state(at: window.base - 1, hubWindow: { _ in nil }) {
            #expect(error.message.contains("--data-dir"))
        } else if window.base > 0 {
            Issue.record("a seq before the window was answered")
        }
        // The DevTools export starts at the base and holds every kept action's state.
        guard case .success(let lifted) = model.devTools() else {
            Issue.record("no DevTools export")
            return
        }
        #expect(lifted["computedStates"]?.arrayValue?.count == Int(window.newest - window.base) + 1)
    }

    @Test("a restart (re-hydration) starts the model again from the new state")
    func restart() {
        let model = InspectorModel(app: app, state: app.initialState, seq: 0, keep: 16, dataDirectory: nil)
        for n in 1...10 { model.append(action(n)) }
        model.restart(state: ["fresh": true], seq: 40)
        #expect(model.window == (40, 40))
        guard case .success(let (json, _)) = model.state(at: 40, hubWindow: { _ in nil }) else {
            Issue.record("seq 40 was not answered")
            return
        }
        #expect(json == ["fresh": true])
    }
}
