/// The store as middleware, thunks and enhancers see it: read the state, dispatch.
public struct StoreContext<State: Sendable, Action: Sendable>: Sendable {
    /// Reads the store's current state.
    public let getState: @Sendable () -> State
    /// Dispatches an action or a thunk through the whole middleware chain.
    ///
    /// Called while a dispatch is in progress on this thread, it is queued and runs
    /// right after the current one, in order.
    public let dispatch: @Sendable (Dispatchable<State, Action>) -> Void

    /// Creates a context.
    ///
    /// - Parameters:
    ///   - getState: Reads the current state.
    ///   - dispatch: Dispatches through the store.
    @inlinable public init(
        getState: @escaping @Sendable () -> State,
        dispatch: @escaping @Sendable (Dispatchable<State, Action>) -> Void
    ) {
        self.getState = getState
        self.dispatch = dispatch
    }

    /// Dispatches a plain action through the whole middleware chain.
    ///
    /// - Parameter action: The action.
    @inlinable public func send(_ action: Action) { dispatch(.action(action)) }
}

/// Code that sits between `dispatch` and the reducer, as in Redux.
///
/// A middleware receives the store context (`getState`, `dispatch`) and `next`, the
/// rest of the chain, and returns its own dispatch function. It may pass an input on
/// (`next(input)`), swallow it (not call `next`), transform it (call `next` with
/// something else), delay it (call `next` later, from anywhere), or add actions
/// (`context.dispatch`, which starts again at the top of the chain).
public struct Middleware<State: Sendable, Action: Sendable>: Sendable {
    /// A dispatch function: the shape of `next` and of what a middleware returns.
    public typealias Dispatch = @Sendable (Dispatchable<State, Action>) -> Void

    /// Builds this middleware's dispatch function around `next`.
    public let wrap: @Sendable (_ context: StoreContext<State, Action>, _ next: @escaping Dispatch) -> Dispatch

    /// Creates a middleware in Redux's curried form.
    ///
    /// - Parameter wrap: Given the context and `next`, returns the dispatch function.
    @inlinable public init(wrap: @escaping @Sendable (_ context: StoreContext<State, Action>, _ next: @escaping Dispatch) -> Dispatch) {
        self.wrap = wrap
    }

    /// Creates a middleware from a function of one input.
    ///
    /// - Parameter handle: Called for each input with the context and `next`.
    @inlinable public init(_ handle: @escaping @Sendable (
        _ context: StoreContext<State, Action>, _ next: @escaping Dispatch, _ input: Dispatchable<State, Action>
    ) -> Void) {
        self.wrap = { context, next in { input in handle(context, next, input) } }
    }
}

/// A function that wraps a store's dispatch, as Redux's store enhancers wrap `createStore`.
///
/// ``StoreEnhancer/applyMiddleware(_:)`` is one; enhancers compose with
/// ``StoreEnhancer/composed(with:)``, the outer one seeing each input first.
public struct StoreEnhancer<State: Sendable, Action: Sendable>: Sendable {
    /// A dispatch function.
    public typealias Dispatch = @Sendable (Dispatchable<State, Action>) -> Void

    /// Returns the dispatch function that wraps `dispatch`.
    public let enhance: @Sendable (_ context: StoreContext<State, Action>, _ dispatch: @escaping Dispatch) -> Dispatch

    /// Creates an enhancer.
    ///
    /// - Parameter enhance: Given the context and the inner dispatch, returns the outer dispatch.
    @inlinable public init(_ enhance: @escaping @Sendable (_ context: StoreContext<State, Action>, _ dispatch: @escaping Dispatch) -> Dispatch) {
        self.enhance = enhance
    }

    /// The enhancer that changes nothing.
    @inlinable public static var identity: StoreEnhancer { StoreEnhancer { _, dispatch in dispatch } }

    /// This enhancer wrapped around `inner`: inputs reach `self` first, then `inner`.
    ///
    /// - Parameter inner: The enhancer closer to the reducer.
    /// - Returns: The composition, Redux's `compose(self, inner)`.
    @inlinable public func composed(with inner: StoreEnhancer) -> StoreEnhancer {
        let outer = self
        return StoreEnhancer { context, dispatch in
            outer.enhance(context, inner.enhance(context, dispatch))
        }
    }

    /// Redux's `applyMiddleware`: the first middleware sees each input first.
    ///
    /// - Parameter middlewares: The chain, outermost first.
    /// - Returns: An enhancer that runs the chain before the reducer.
    @inlinable public static func applyMiddleware(_ middlewares: Middleware<State, Action>...) -> StoreEnhancer {
        applyMiddleware(middlewares)
    }

    /// Redux's `applyMiddleware` over an array.
    ///
    /// - Parameter middlewares: The chain, outermost first.
    /// - Returns: An enhancer that runs the chain before the reducer.
    @inlinable public static func applyMiddleware(_ middlewares: [Middleware<State, Action>]) -> StoreEnhancer {
        StoreEnhancer { context, dispatch in
            middlewares.reversed().reduce(dispatch) { next, middleware in middleware.wrap(context, next) }
        }
    }
}

extension Middleware {
    /// Runs thunks; passes plain actions on.
    ///
    /// A synchronous thunk runs inside the dispatch; an asynchronous one starts a new
    /// `Task` and the dispatch returns at once. The thunk's own dispatches start at the
    /// top of the chain, so other middleware sees them.
    @inlinable public static var thunk: Middleware {
        Middleware { context, next, input in
            switch input {
            case .action:
                next(input)
            case .thunk(let thunk):
                thunk.run(context)
            }
        }
    }

    /// Writes each action, and the state after it, to `sink`.
    ///
    /// Lines look like `action: increment` and `state: CounterState(count: 1, …)`;
    /// thunks are logged as `thunk`.
    ///
    /// On a StoreSync replica the `state:` line shows the state *before* the action takes
    /// effect: a replica's dispatch only sends the action to the hub, and it is applied
    /// when the hub's sequenced copy comes back. Log applied states from the replica's
    /// events or a store subscription instead.
    ///
    /// - Parameter sink: Receives one line per call, e.g. `{ print($0) }` or a file writer.
    /// - Returns: The logging middleware.
    public static func logging(to sink: @escaping @Sendable (String) -> Void) -> Middleware {
        Middleware { context, next, input in
            switch input {
            case .action(let action):
                sink("action: \(action)")
                next(input)
                sink("state: \(context.getState())")
            case .thunk:
                sink("thunk")
                next(input)
            }
        }
    }
}
