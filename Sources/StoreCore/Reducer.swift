/// A pure function that folds an action into a state: Redux's third principle.
///
/// A reducer must be **deterministic**: the same state and action always give the same
/// result. No clocks, no randomness, no I/O, no reading of globals. This is what lets a
/// hub and every replica apply the same actions in the same order and end with equal
/// states. A value that must be random or time-dependent (seed 004 picked a random
/// element inside its reducer) is chosen once, before dispatch, by the dispatching
/// process, and carried in the action:
///
///     // Not this: state.current = state.items.randomElement()
///     // This:
///     let pick = state.items.indices.randomElement() ?? 0   // in a thunk or the UI
///     store.dispatch(.pick(index: pick))                     // the reducer just applies it
///
/// A reducer may refuse an action by throwing its typed ``Failure``. It must throw
/// **before** it mutates `state`: a reducer that throws leaves the state exactly as it
/// found it (validate first, then write). Stores treat a thrown action as never having
/// happened; the hub turns it into a `reject` that no replica ever sees.
///
/// A reducer cannot dispatch: it has no store to dispatch to. Follow-up work belongs in
/// middleware or a ``Thunk``.
public protocol Reducer<State, Action>: Sendable {
    /// The value-type state this reducer owns.
    associatedtype State
    /// The actions this reducer understands.
    associatedtype Action
    /// The error thrown to refuse an action; `Never` for reducers that accept everything.
    associatedtype Failure: Error = Never

    /// Applies `action` to `state` in place.
    ///
    /// - Parameters:
    ///   - state: The state to update. Untouched if this method throws.
    ///   - action: The action to apply.
    /// - Throws: ``Failure`` when the action is refused; `state` is then unchanged.
    func reduce(into state: inout State, action: Action) throws(Failure)
}

/// A reducer built from a closure that accepts every action.
///
///     let counter = Reduce<Int, CounterAction> { count, action in
///         switch action { case .increment: count += 1; case .decrement: count -= 1 }
///     }
public struct Reduce<State, Action>: Reducer {
    @usableFromInline let body: @Sendable (inout State, Action) -> Void

    /// Creates a reducer from a closure.
    ///
    /// - Parameter body: Applies an action to the state in place; must be pure.
    @inlinable public init(_ body: @escaping @Sendable (inout State, Action) -> Void) {
        self.body = body
    }

    /// Applies `action` by calling the closure.
    ///
    /// - Parameters:
    ///   - state: The state to update.
    ///   - action: The action to apply.
    @inlinable public func reduce(into state: inout State, action: Action) {
        body(&state, action)
    }
}

/// A reducer built from a closure that may refuse an action by throwing.
///
/// The closure must throw before it writes to the state.
public struct TryReduce<State, Action, Failure: Error>: Reducer {
    @usableFromInline let body: @Sendable (inout State, Action) throws(Failure) -> Void

    /// Creates a reducer from a throwing closure.
    ///
    /// - Parameter body: Validates, then applies an action to the state in place; must be pure.
    @inlinable public init(_ body: @escaping @Sendable (inout State, Action) throws(Failure) -> Void) {
        self.body = body
    }

    /// Applies `action` by calling the closure.
    ///
    /// - Parameters:
    ///   - state: The state to update; unchanged if this throws.
    ///   - action: The action to apply.
    /// - Throws: Whatever the closure throws.
    @inlinable public func reduce(into state: inout State, action: Action) throws(Failure) {
        try body(&state, action)
    }
}

/// A reducer whose concrete type is hidden, for storing reducers of one shape together.
public struct AnyReducer<State, Action, Failure: Error>: Reducer {
    @usableFromInline let body: @Sendable (inout State, Action) throws(Failure) -> Void

    /// Wraps `reducer`.
    ///
    /// - Parameter reducer: The reducer to erase.
    @inlinable public init<R: Reducer>(_ reducer: R)
    where R.State == State, R.Action == Action, R.Failure == Failure {
        self.body = { (state: inout State, action: Action) throws(Failure) in
            try reducer.reduce(into: &state, action: action)
        }
    }

    /// Applies `action` with the wrapped reducer.
    ///
    /// - Parameters:
    ///   - state: The state to update.
    ///   - action: The action to apply.
    /// - Throws: Whatever the wrapped reducer throws.
    @inlinable public func reduce(into state: inout State, action: Action) throws(Failure) {
        try body(&state, action)
    }
}

extension Reducer {
    /// This reducer with its concrete type hidden.
    ///
    /// - Returns: An ``AnyReducer`` that forwards to `self`.
    @inlinable public func eraseToAnyReducer() -> AnyReducer<State, Action, Failure> {
        AnyReducer(self)
    }
}
