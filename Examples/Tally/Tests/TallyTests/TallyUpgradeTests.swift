import StoreSyncTesting
import SyncCore
import TallyApp
import Testing

@Suite("Tally version 2: counters with goals, and the upgrade from tally@1")
struct TallyUpgradeTests {
    /// A `tally@1` state: two counts, reset once before.
    static var v1Sample: Tally.State {
        var state = Tally.State()
        state.counts = ["coffee": 2, "tea": 1]
        state.resetAt = 1_700_000_000
        return state
    }

    /// ``v1Sample`` as version 2 holds it.
    static let v2Sample = TallyV2.State(counters: ["coffee": .init(count: 2), "tea": .init(count: 1)], resetAt: 1_700_000_000)

    @Test("the chain: tally@1, then tally@2")
    func chain() {
        #expect(Tally.fingerprint == "tally@1" && TallyV2.fingerprint == "tally@2")
        let chain = TallyV2().versions
        #expect(chain.fingerprints == ["tally@1", "tally@2"])
        #expect(chain.newest == "tally@2" && chain.previous(of: "tally@2") == "tally@1")
        #expect(chain.app("tally@1") is Tally && chain.app("tally@2") is TallyV2)
    }

    @Test("MigrationCheck: every count becomes a counter with no goal; the reset time stays; exact state and digest")
    func migration() throws {
        #expect(Tally().encodeState(Self.v1Sample).canonicalString == #"{"counts":{"coffee":2,"tea":1},"resetAt":1700000000}"#)
        #expect(MigrationCheck.check(TallyV2(), from: Self.v1Sample, expect: Self.v2Sample, digest: "0dbc929963dabf51") == nil)
        #expect(TallyV2().encodeState(Self.v2Sample).canonicalString
                == #"{"counters":{"coffee":{"count":2},"tea":{"count":1}},"resetAt":1700000000}"#)
        #expect(MigrationCheck.check(TallyV2(), from: Tally().initialState, expect: TallyV2().initialState, digest: "02635f95bcb108d8") == nil)
        #expect(TallyV2().encodeState(TallyV2().initialState).canonicalString == #"{"counters":{}}"#)
        // The JSON path a hub takes, from the state as a tally@1 data directory holds it.
        let old = try JSON(parsing: #"{"counts":{"coffee":2,"tea":1},"resetAt":1700000000}"#)
        #expect(try TallyV2().versions.migrate(old, from: "tally@1") == TallyV2().encodeState(Self.v2Sample))
        // A migration that lost the reset time is caught.
        #expect(MigrationCheck.check(TallyV2(), from: Self.v1Sample, expect: TallyV2.State(counters: Self.v2Sample.counters))?.message
                == #"the migration gave {"counters":{"coffee":{"count":2},"tea":{"count":1}},"resetAt":1700000000}, not {"counters":{"coffee":{"count":2},"tea":{"count":1}}}"#)
    }

    @Test("version 1's actions keep their wire form and meaning in version 2")
    func v1Actions() throws {
        let actions: [Tally.Action] = [.add(name: "tea", amount: 3), .add(name: "coffee", amount: -1), .add(name: "", amount: 1),
                                       .add(name: "tea", amount: 9_007_199_254_740_991), .reset(at: 12.5), .add(name: "é", amount: 2)]
        var old = Self.v1Sample
        var new = Self.v2Sample
        for action in actions {
            let wire = Tally().encodeAction(action)
            let decoded = try TallyV2().decodeAction(wire)
            #expect(TallyV2().encodeAction(decoded) == wire)
            let oldRefused = (try? Tally().reduce(into: &old, action: action)) == nil
            let newRefused = (try? TallyV2().reduce(into: &new, action: decoded)) == nil
            #expect(oldRefused == newRefused, "\(wire.canonicalString)")
            #expect(try TallyV2().migrate(old) == new, "\(wire.canonicalString)")
        }
        #expect(new == TallyV2.State(counters: ["é": .init(count: 2)], resetAt: 12.5))
    }

    @Test("every action's exact change; setGoal sets and clears a goal; refusals change nothing")
    func exhaustive() {
        let store = TestStore(initialState: TallyV2().initialState, reducer: TallyV2())
        store.send(.add(name: "coffee", amount: 2)) { $0.counters["coffee"] = .init(count: 2) }
        store.send(.setGoal(name: "coffee", goal: 3)) { $0.counters["coffee"]?.goal = 3 }
        store.send(.setGoal(name: "water", goal: 8)) { $0.counters["water"] = .init(count: 0, goal: 8) }
        store.send(.add(name: "coffee", amount: 1)) { $0.counters["coffee"]?.count = 3 }
        #expect(store.state.counters["coffee"]?.reachedGoal == true)
        #expect(store.state.counters["water"]?.reachedGoal == false)
        store.send(.setGoal(name: "coffee", goal: nil)) { $0.counters["coffee"]?.goal = nil }
        #expect(store.state.counters["coffee"]?.reachedGoal == false)
        store.send(.setGoal(name: "tea", goal: nil))                  // no counter, no goal: nothing changes
        store.sendRefused(.setGoal(name: "", goal: 1)) { #expect($0 == .emptyName) }
        store.sendRefused(.setGoal(name: "tea", goal: 0)) { #expect($0 == .badGoal) }
        store.sendRefused(.setGoal(name: "tea", goal: 9_007_199_254_740_992)) { #expect($0 == .badGoal) }
        store.sendRefused(.add(name: "", amount: 1)) { #expect($0 == .emptyName) }
        store.sendRefused(.add(name: "coffee", amount: Int.max)) { #expect($0 == .outOfRange) }
        store.send(.reset(at: 1_700_000_000)) {
            $0.counters = [:]
            $0.resetAt = 1_700_000_000
        }
    }

    @Test("deterministic, also through the wire; setGoal's wire forms; the table of cases")
    func wire() throws {
        let actions: [TallyV2.Action] = [.add(name: "tea", amount: 3), .setGoal(name: "tea", goal: 5), .reset(at: 12),
                                         .setGoal(name: "tea", goal: nil), .add(name: "tea", amount: 1), .setGoal(name: "", goal: 1)]
        #expect(DeterminismCheck.check(TallyV2(), actions: actions) == nil)
        #expect(TallyV2().encodeAction(.setGoal(name: "tea", goal: 8)) == ["type": "setGoal", "name": "tea", "goal": 8])
        #expect(TallyV2().encodeAction(.setGoal(name: "tea", goal: nil)) == ["type": "setGoal", "name": "tea"])
        #expect(!TallyV2.Action.taggedCases.isEmpty)
        for action in actions {
            #expect(try TallyV2().decodeAction(TallyV2().encodeAction(action)) == action)
        }
        #expect(try TallyV2().decodeAction(["type": "setGoal", "name": "tea"]) == .setGoal(name: "tea", goal: nil))
        #expect(throws: AppCodingError.self) { try TallyV2().decodeAction(["type": "setGoal", "goal": 1]) }
        #expect(throws: AppCodingError.self) { try Tally().decodeAction(["type": "setGoal", "name": "tea", "goal": 1]) }
    }

    @Test("the shorthand: version 1's, and goal NAME [GOAL]")
    func shorthand() throws {
        for (line, action) in [("add tea 2", TallyV2.Action.add(name: "tea", amount: 2)), ("add tea", .add(name: "tea", amount: 1)),
                               ("goal tea 8", .setGoal(name: "tea", goal: 8)), ("goal tea", .setGoal(name: "tea", goal: nil))] {
            guard case .action(let json) = try TallyV2().command(line) else {
                Issue.record("\(line) is not an action")
                continue
            }
            #expect(try TallyV2().decodeAction(json) == action, "\(line)")
        }
        for line in ["goal", "goal tea lots", "goal tea 1 2"] {
            #expect(throws: AppCodingError("usage: goal NAME [GOAL]")) { try TallyV2().command(line) }
        }
        #expect(throws: AppCodingError("usage: add NAME [AMOUNT]")) { try TallyV2().command("add") }
        #expect(TallyV2().describe(.badGoal) == "a goal is a whole number from 1 to 2^53 − 1")
    }
}
