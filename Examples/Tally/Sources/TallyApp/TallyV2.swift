import SyncCore

/// Version 2 of the shared tally (`tally@2`): each named counter may have a goal.
///
/// It replaces ``Tally`` (`tally@1`), which stays in the binary as ``previous`` so that a hub
/// can recover a `tally@1` history and upgrade it. The state changes shape: version 1's
/// `"counts":{"tea":2}` becomes `"counters":{"tea":{"count":2}}`, a counter whose goal is set
/// being `{"count":2,"goal":8}`. Version 1's actions keep their wire form and their meaning,
/// and one is new: `{"type":"setGoal","name":"tea","goal":8}` (without `"goal"`, it clears the
/// goal).
public struct TallyV2: CodableSyncApp, UpgradingApp {
    /// One named counter.
    public struct Counter: Codable, Equatable, Sendable {
        /// The count, within ±(2^53 − 1).
        public var count: Int
        /// The count aimed at, from 1 to 2^53 − 1, or `nil` for none.
        public var goal: Int?

        /// Creates a counter.
        ///
        /// - Parameters:
        ///   - count: The count.
        ///   - goal: The count aimed at, or `nil`.
        public init(count: Int = 0, goal: Int? = nil) {
            self.count = count
            self.goal = goal
        }

        /// Whether the counter has a goal and has reached it.
        public var reachedGoal: Bool { goal.map { count >= $0 } ?? false }
    }

    /// The counters by name, and when they were last reset.
    public struct State: Codable, Equatable, Sendable {
        /// The counters, by name.
        public var counters: [String: Counter] = [:]
        /// The resetting process's clock at the last reset, carried in the action.
        public var resetAt: Double?

        /// Creates a state.
        ///
        /// - Parameters:
        ///   - counters: The counters, by name.
        ///   - resetAt: When they were last reset, or `nil` for never.
        public init(counters: [String: Counter] = [:], resetAt: Double? = nil) {
            self.counters = counters
            self.resetAt = resetAt
        }
    }

    /// The actions: version 1's two, unchanged, and `setGoal`.
    public enum Action: TaggedEnumCodable, Equatable, Sendable {
        /// Adds `amount` to counter `name`: `{"type":"add","name":"tea","amount":2}`.
        case add(name: String, amount: Int)
        /// Removes every counter: `{"type":"reset","at":1732500000}`.
        case reset(at: Double)
        /// Sets counter `name`'s goal, or clears it when `goal` is `nil`:
        /// `{"type":"setGoal","name":"tea","goal":8}`, `{"type":"setGoal","name":"tea"}`.
        case setGoal(name: String, goal: Int?)
    }

    /// Why an action was refused.
    public enum Failure: Error, Sendable, Equatable {
        /// A counter needs a name.
        case emptyName
        /// A count JSON could not carry exactly.
        case outOfRange
        /// A goal below 1 or beyond 2^53 − 1.
        case badGoal
    }

    /// Creates the app.
    public init() {}
    /// `tally`, as in version 1.
    public static let name = "tally"
    /// `2`: counters with goals.
    public static let version = "2"
    /// An empty tally.
    public var initialState: State { State() }

    /// Version 1, which this version replaces.
    public var previous: Tally { Tally() }

    /// Moves a `tally@1` state here: every count becomes a counter of that count with no goal,
    /// and the time of the last reset is kept. Pure, as the reducer is.
    ///
    /// - Parameter old: A state of ``Tally``.
    /// - Returns: The same counts and reset time, in version 2's shape.
    /// - Throws: Never; the signature is ``UpgradingApp``'s.
    public func migrate(_ old: Tally.State) throws(MigrationError) -> State {
        State(counters: old.counts.mapValues { Counter(count: $0, goal: nil) }, resetAt: old.resetAt)
    }

    /// The largest count or goal JSON carries exactly.
    private static let maxExact = 9_007_199_254_740_991

    /// Pure and deterministic: no clock, no randomness, no I/O; it validates before writing.
    ///
    /// - Parameters:
    ///   - state: The state; unchanged when this throws.
    ///   - action: The action.
    /// - Throws: ``Failure`` for an empty name, a count out of range or a bad goal.
    public func reduce(into state: inout State, action: Action) throws(Failure) {
        switch action {
        case .add(let name, let amount):
            guard !name.isEmpty else { throw .emptyName }
            let (sum, overflow) = (state.counters[name]?.count ?? 0).addingReportingOverflow(amount)
            guard !overflow, sum.magnitude <= Self.maxExact else { throw .outOfRange }
            state.counters[name, default: Counter()].count = sum
        case .reset(let at):
            state.counters = [:]
            state.resetAt = at
        case .setGoal(let name, let goal):
            guard !name.isEmpty else { throw .emptyName }
            if let goal {
                guard (1...Self.maxExact).contains(goal) else { throw .badGoal }
                state.counters[name, default: Counter()].goal = goal
            } else {
                state.counters[name]?.goal = nil
            }
        }
    }
}
