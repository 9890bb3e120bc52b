/// One step of a store's recorded history.
public struct HistoryEntry<State: Sendable, Action: Sendable>: Sendable {
    /// The action applied, or `nil` for the starting point of the record.
    public let action: Action?
    /// The state after `action` (for the starting point: the state when recording began).
    public let state: State

    @usableFromInline init(action: Action?, state: State) {
        self.action = action
        self.state = state
    }
}

/// How much history a store keeps: opt-in, and always bounded.
public struct HistoryPolicy: Sendable, Equatable {
    /// The most entries kept, the starting point included (at least 2).
    public let capacity: Int

    /// Keeps the last `capacity` entries.
    ///
    /// - Parameter capacity: The bound; values below 2 are raised to 2.
    /// - Returns: The policy.
    public static func bounded(_ capacity: Int) -> HistoryPolicy { HistoryPolicy(capacity: Swift.max(2, capacity)) }
}

/// The recorder behind ``Store/history``: entries and a cursor for time travel.
@usableFromInline
struct HistoryLog<State: Sendable, Action: Sendable> {
    @usableFromInline var entries: [HistoryEntry<State, Action>]
    @usableFromInline var cursor: Int
    @usableFromInline let capacity: Int

    @usableFromInline init(start: State, policy: HistoryPolicy) {
        entries = [HistoryEntry(action: nil, state: start)]
        cursor = 0
        capacity = policy.capacity
    }

    /// Records an applied action. After a jump back, the entries past the cursor are dropped first.
    @inlinable mutating func record(_ action: Action, state: State) {
        if cursor < entries.count - 1 { entries.removeSubrange((cursor + 1)...) }
        entries.append(HistoryEntry(action: action, state: state))
        if entries.count > capacity {
            entries.removeFirst(entries.count - capacity)
        }
        cursor = entries.count - 1
    }
}
