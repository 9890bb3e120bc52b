// BEGIN docs/YOUR-APP.md tally app example
import SyncCore

/// A shared tally: named counters that every process sees alike.
public struct Tally: CodableSyncApp {
    public struct State: Codable, Equatable, Sendable {
        public var counts: [String: Int] = [:]
        public var resetAt: Double?            // the resetting process's clock, carried in the action
        public init() {}
    }

    public enum Action: TaggedEnumCodable, Equatable, Sendable {
        case add(name: String, amount: Int)    // {"type":"add","name":"tea","amount":2}
        case reset(at: Double)                 // {"type":"reset","at":1732500000}
    }

    public enum Failure: Error, Sendable, Equatable {
        case emptyName
        case outOfRange                        // a count JSON could not carry exactly
    }

    public init() {}
    public static let name = "tally"
    public static let version = "1"
    public var initialState: State { State() }

    /// Pure and deterministic: no clock, no randomness, no I/O; it validates before writing.
    public func reduce(into state: inout State, action: Action) throws(Failure) {
        switch action {
        case .add(let name, let amount):
            guard !name.isEmpty else { throw .emptyName }
            let (sum, overflow) = state.counts[name, default: 0].addingReportingOverflow(amount)
            guard !overflow, sum.magnitude <= 9_007_199_254_740_991 else { throw .outOfRange }
            state.counts[name] = sum
        case .reset(let at):
            state.counts = [:]
            state.resetAt = at
        }
    }
}
// END docs/YOUR-APP.md tally app example
