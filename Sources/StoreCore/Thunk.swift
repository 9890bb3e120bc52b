/// Deferred work that reads state and dispatches actions: the home of side effects.
///
/// Reducers are pure, so anything that needs the current state to decide what to do,
/// waits for something, or talks to the world is a thunk. ``ThunkMiddleware`` runs it
/// when dispatched; the actions it dispatches go through the store like any other. In
/// StoreSync a thunk runs only in the process that dispatched it, and only the plain
/// actions it produces travel to the hub, so its side effects happen once.
public struct Thunk<State: Sendable, Action: Sendable>: Sendable {
    /// What a running thunk may do: read state and dispatch.
    public typealias Context = StoreContext<State, Action>

    /// The thunk's body: synchronous, or asynchronous (run in a new task).
    public enum Body: Sendable {
        /// Runs inline, during the dispatch.
        case sync(@Sendable (Context) -> Void)
        /// Runs in a new unstructured `Task`; the dispatch returns at once.
        case async(@Sendable (Context) async -> Void)
    }

    /// The work to run.
    public let body: Body

    /// Creates a synchronous thunk.
    ///
    /// - Parameter body: Reads state and dispatches, during the dispatch call.
    @inlinable public init(_ body: @escaping @Sendable (Context) -> Void) { self.body = .sync(body) }

    /// Creates an asynchronous thunk (seed 001's authentication that finishes later).
    ///
    /// - Parameter body: Runs in a new task; may await, then dispatch.
    @inlinable public init(async body: @escaping @Sendable (Context) async -> Void) { self.body = .async(body) }

    /// Runs the thunk: a synchronous body now, an asynchronous one in a new `Task`.
    ///
    /// - Parameter context: The store as the thunk sees it.
    @inlinable public func run(_ context: Context) {
        switch body {
        case .sync(let body):
            body(context)
        case .async(let body):
            Task { await body(context) }
        }
    }
}

/// What can be dispatched to a store: a plain action or a thunk.
public enum Dispatchable<State: Sendable, Action: Sendable>: Sendable {
    /// A plain action, bound for the reducer.
    case action(Action)
    /// A thunk, run by ``ThunkMiddleware``.
    case thunk(Thunk<State, Action>)

    /// The plain action, or `nil` for a thunk.
    @inlinable public var action: Action? {
        if case .action(let action) = self { return action }
        return nil
    }
}
