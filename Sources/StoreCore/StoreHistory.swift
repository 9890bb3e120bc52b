extension Store {
    /// The recorded history, oldest first; empty unless the store was created with a ``HistoryPolicy``.
    ///
    /// Entry 0 is the starting point (no action); each later entry is an action and the
    /// state after it. Older entries are dropped beyond the policy's capacity.
    public var history: [HistoryEntry<State, Action>] {
        core.withLock { $0.history?.entries ?? [] }
    }

    /// The index in ``history`` of the entry the current state corresponds to.
    public var historyCursor: Int? {
        core.withLock { $0.history?.cursor }
    }

    /// Time travel: makes the state of history entry `index` current and notifies subscribers.
    ///
    /// The entries stay; the next dispatched action drops those after `index` first.
    ///
    /// - Parameter index: An index into ``history``.
    /// - Returns: `false` (and nothing changes) when history is off or `index` is out of range.
    @discardableResult
    public func jump(to index: Int) -> Bool {
        withDrain {
            let result = withStateMutation { core.withLock { core -> (State, [Subscriber])? in
                guard var log = core.history, log.entries.indices.contains(index) else { return nil }
                log.cursor = index
                core.state = log.entries[index].state
                core.history = log
                return (core.state, core.subscribers)
            } }
            guard let (state, subscribers) = result else { return false }
            notify(subscribers, state)
            return true
        }
    }

    /// Replays the recorded actions from the starting point with the reducer.
    ///
    /// Because reducers are deterministic, the result equals the recorded state at the
    /// cursor; a difference means a reducer is not pure. The store's state is not changed.
    ///
    /// - Returns: The state after replaying entries `1...cursor`, or `nil` when history is off.
    /// - Throws: The reducer's failure, if a recorded action is now refused.
    public func replay() throws(R.Failure) -> State? {
        guard let log = core.withLock({ $0.history }), let first = log.entries.first else { return nil }
        var state = first.state
        for entry in log.entries.dropFirst().prefix(log.cursor) {
            if let action = entry.action { try reducer.reduce(into: &state, action: action) }
        }
        return state
    }
}
