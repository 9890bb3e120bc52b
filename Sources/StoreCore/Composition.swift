/// Runs a child reducer on one slice of a parent state, for the actions it owns.
///
/// The slice is a writable key path; the actions are picked out of the parent's
/// actions by an extractor that returns `nil` for actions the child does not own (an
/// enum case's payload, usually). This is how a root reducer is assembled from
/// sub-reducers that each own a part of the state, as in the seeds' sign-up example:
///
///     let root = CombineReducers<AppState, AppAction, Never>(
///         Scope(state: \.profile, action: { if case .profile(let a) = $0 { a } else { nil } },
///               child: ProfileReducer()).eraseToAnyReducer(),
///         Scope(state: \.counter, action: { if case .counter(let a) = $0 { a } else { nil } },
///               child: CounterReducer()).eraseToAnyReducer()
///     )
public struct Scope<ParentState, ParentAction, Child: Reducer>: Reducer {
    @usableFromInline let state: WritableKeyPath<ParentState, Child.State> & Sendable
    @usableFromInline let extract: @Sendable (ParentAction) -> Child.Action?
    @usableFromInline let child: Child

    /// Creates a scoped reducer.
    ///
    /// - Parameters:
    ///   - state: The slice of the parent state the child owns.
    ///   - action: Returns the child's action for parent actions it owns, else `nil`.
    ///   - child: The reducer of the slice.
    @inlinable public init(
        state: WritableKeyPath<ParentState, Child.State> & Sendable,
        action: @escaping @Sendable (ParentAction) -> Child.Action?,
        child: Child
    ) {
        self.state = state
        self.extract = action
        self.child = child
    }

    /// Applies the child reducer to its slice when the action belongs to it; otherwise does nothing.
    ///
    /// - Parameters:
    ///   - state: The parent state.
    ///   - action: A parent action.
    /// - Throws: Whatever the child throws.
    @inlinable public func reduce(into state: inout ParentState, action: ParentAction) throws(Child.Failure) {
        guard let childAction = extract(action) else { return }
        try child.reduce(into: &state[keyPath: self.state], action: childAction)
    }
}

/// Runs several reducers of the same state and action, in order, as one.
///
/// If one throws, the ones after it do not run; each reducer must itself leave the
/// state untouched when it throws, and reducers that run earlier must not have changed
/// it either (compose validating reducers first), so that the whole stays atomic.
public struct CombineReducers<State, Action, Failure: Error>: Reducer {
    @usableFromInline let reducers: [AnyReducer<State, Action, Failure>]

    /// Combines reducers that share a failure type (wrap each with `eraseToAnyReducer()`).
    ///
    /// - Parameter reducers: The reducers, applied in this order.
    @inlinable public init(_ reducers: AnyReducer<State, Action, Failure>...) {
        self.reducers = reducers
    }

    /// Combines an array of reducers that share a failure type.
    ///
    /// - Parameter reducers: The reducers, applied in this order.
    @inlinable public init(_ reducers: [AnyReducer<State, Action, Failure>]) {
        self.reducers = reducers
    }

    /// Applies every reducer in order.
    ///
    /// - Parameters:
    ///   - state: The state to update.
    ///   - action: The action to apply.
    /// - Throws: The first failure; later reducers are then skipped.
    @inlinable public func reduce(into state: inout State, action: Action) throws(Failure) {
        for reducer in reducers { try reducer.reduce(into: &state, action: action) }
    }
}
