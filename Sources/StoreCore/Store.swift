import Observation
import SyncLocks
import Synchronization

/// The single source of truth: a state that only actions change (Redux's three principles, enforced).
///
/// - **Read-only state.** ``state`` has no setter and the store hands out copies of a
///   value type; the only way to change it is ``dispatch(_:)-7ht3r`` (principle 2, which
///   seed 000 admits its package could not enforce).
/// - **Middleware and enhancers** wrap dispatch: inputs go through the enhancer chain
///   (for example ``StoreEnhancer/applyMiddleware(_:)`` with ``Middleware/thunk``) and
///   then to the reducer.
/// - **Subscriptions**: ``subscribe(sendCurrent:_:)`` for every new state,
///   ``subscribe(to:sendCurrent:onChange:)`` for a selected `Equatable` value that fires only
///   when that value changes, ``states(bufferingPolicy:)`` and ``values(of:bufferingPolicy:)``
///   as `AsyncStream`s, ``selection(_:)`` as an `Observable` object, and the store itself is
///   `Observable` (``state`` registers access).
///
/// ## Threads and re-entrancy
/// The store is `Sendable` and may be used from any thread or task. Dispatches are
/// serialised: one runs at a time, through the middleware, the reducer and every
/// subscriber callback. A dispatch made *during* a dispatch on the same thread (from a
/// middleware, a thunk or a subscriber) is queued and runs right after the current one,
/// in order, before the outer `dispatch` returns. A dispatch from another thread waits
/// until the current one (and its queue) has finished, then runs. So when `dispatch`
/// returns, the action and everything it queued have been applied and announced. Do not
/// block a subscriber on another thread that is itself dispatching to this store.
public final class Store<R: Reducer>: Sendable, Observable where R.State: Sendable, R.Action: Sendable {
    /// The state type.
    public typealias State = R.State
    /// The action type.
    public typealias Action = R.Action
    /// A dispatch function, as middleware sees it.
    public typealias Dispatch = @Sendable (Dispatchable<State, Action>) -> Void

    /// The reducer that applies every action.
    public let reducer: R

    @usableFromInline let core: Locked<Core>
    /// Held for the whole of a dispatch; its value is the entry of the enhancer chain.
    @usableFromInline let drain: Locked<DrainContext>
    /// The thread that holds `drain`, or 0.
    @usableFromInline let owner = Atomic<UInt>(0)
    /// Whether re-entrant dispatches may be waiting in `core.queue`. Only the thread holding
    /// `drain` queues (a re-entrant dispatch) and drains, so relaxed ordering suffices; it
    /// spares the lock per action when nothing was queued.
    @usableFromInline let queued = Atomic<Bool>(false)
    /// Whether the reducer is running (on `owner`'s thread, inside `core`'s lock): a dispatch
    /// or a read of ``state`` from there is a reducer reaching for its store, refused with a
    /// message rather than the lock's recursion trap.
    @usableFromInline let reducing = Atomic<Bool>(false)
    @usableFromInline let registrar = ObservationRegistrar()
    /// `\.state`, built once: a key path into a generic class is instantiated at run time,
    /// which costs microseconds, and the registrar needs it on every dispatch.
    @usableFromInline let stateKeyPath: KeyPath<Store, State> & Sendable
    @usableFromInline let onError: (@Sendable (R.Failure, Action) -> Void)?

    @usableFromInline struct DrainContext {
        @usableFromInline var chain: Dispatch?
        @usableFromInline init() {}
    }

    @usableFromInline struct Core {
        @usableFromInline var state: State
        /// Re-entrant dispatches waiting to run; a popped slot is emptied so that the caller
        /// holds the only reference (a thunk released here, inside the lock, could run a
        /// token's `deinit` that takes this very lock).
        @usableFromInline var queue: [Pending?] = []
        @usableFromInline var queueHead = 0
        @usableFromInline var subscribers: [Subscriber] = []
        @usableFromInline var nextSubscriberID: UInt64 = 1
        @usableFromInline var history: HistoryLog<State, Action>?

        @usableFromInline init(state: State) { self.state = state }

        @inlinable mutating func popPending() -> Pending? {
            guard queueHead < queue.count else { return nil }
            let next = queue[queueHead]
            queue[queueHead] = nil
            queueHead += 1
            if queueHead == queue.count {
                queue.removeAll(keepingCapacity: true)
                queueHead = 0
            }
            return next
        }
    }

    @usableFromInline enum Pending: Sendable {
        case input(Dispatchable<State, Action>)
        case received(Action)
    }

    /// A subscription as the store keeps it: called with every new state.
    ///
    /// `@unchecked Sendable`: `id` and `callback` are immutable, `cancelled` is atomic, and
    /// subclasses' mutable state (``SelectorSubscriber``) is touched only while the
    /// calling thread holds the store's dispatch lock, which serialises all notifications.
    @usableFromInline class Subscriber: @unchecked Sendable {
        @usableFromInline let id: UInt64
        @usableFromInline let callback: (@Sendable (State) -> Void)?
        @usableFromInline let cancelled = Atomic<Bool>(false)
        @usableFromInline init(id: UInt64, callback: (@Sendable (State) -> Void)?) {
            self.id = id
            self.callback = callback
        }
        /// Delivers a new state.
        @inlinable func notify(_ state: State) { callback?(state) }
    }

    /// A selector subscription: fires `onChange` only when the selected value changes.
    ///
    /// One virtual call per action, no closure in between: with many selectors per store
    /// (one per view, say) this is the notification hot path. `@unchecked Sendable` as for
    /// ``Subscriber``: `selector` and `onChange` are immutable, and `last` is read and written
    /// only in `init` (inside `withDrain`) and in `notify` (always under the dispatch lock).
    @usableFromInline final class SelectorSubscriber<Value: Equatable>: Subscriber, @unchecked Sendable {
        @usableFromInline let selector: @Sendable (State) -> Value
        @usableFromInline let onChange: @Sendable (Value) -> Void
        /// Written only under the dispatch lock (see ``Subscriber``); no dynamic exclusivity check needed.
        @usableFromInline @exclusivity(unchecked) var last: Value
        @usableFromInline init(id: UInt64, selector: @escaping @Sendable (State) -> Value, last: Value,
                               onChange: @escaping @Sendable (Value) -> Void) {
            self.selector = selector
            self.onChange = onChange
            self.last = last
            super.init(id: id, callback: nil)
        }
        @inlinable override func notify(_ state: State) {
            let value = selector(state)
            if value != last {
                last = value
                onChange(value)
            }
        }
    }

    /// Creates a store, Redux's `createStore(reducer, preloadedState, enhancer)`.
    ///
    /// - Parameters:
    ///   - initialState: The starting state.
    ///   - reducer: The pure reducer that applies every action.
    ///   - enhancer: Wraps dispatch, e.g. `.applyMiddleware(.thunk, .logging(to: log))`.
    ///   - history: Opt-in time-travel recording; `nil` (the default) records nothing.
    ///   - onError: Called when the reducer refuses a dispatched action (the state is then unchanged).
    @inlinable public convenience init(
        initialState: State,
        reducer: R,
        enhancer: StoreEnhancer<State, Action> = .identity,
        history: HistoryPolicy? = nil,
        onError: (@Sendable (R.Failure, Action) -> Void)? = nil
    ) {
        self.init(initialState: initialState, reducer: reducer, enhancer: enhancer, history: history,
                  onError: onError, terminal: nil)
    }

    /// Creates a store whose chain ends in `terminal` instead of the reducer.
    ///
    /// A replica uses this: its dispatched actions go upstream to the hub, and the reducer
    /// runs only on actions the hub sequences (``receive(_:)``).
    ///
    /// - Parameters:
    ///   - initialState: The starting state.
    ///   - reducer: The reducer for ``receive(_:)`` and ``apply(_:)``.
    ///   - enhancer: Wraps dispatch.
    ///   - history: Opt-in time-travel recording.
    ///   - onError: Called when the reducer refuses a dispatched or received action.
    ///   - terminal: Where plain actions go after the enhancer chain; `nil` means the reducer.
    @inlinable package init(
        initialState: State,
        reducer: R,
        enhancer: StoreEnhancer<State, Action>,
        history: HistoryPolicy?,
        onError: (@Sendable (R.Failure, Action) -> Void)?,
        terminal: (@Sendable (Action) -> Void)?
    ) {
        self.reducer = reducer
        self.onError = onError
        self.stateKeyPath = \Store.state
        var core = Core(state: initialState)
        if let history { core.history = HistoryLog(start: initialState, policy: history) }
        self.core = Locked(core)
        self.drain = Locked(DrainContext())
        let context = StoreContext<State, Action>(
            getState: { [weak self] in
                // A released store has no state to give; only a thunk outliving its store can get here.
                self?.core.withLock { $0.state } ?? initialState
            },
            dispatch: { [weak self] input in self?.dispatch(input) }
        )
        let base: Dispatch = { [weak self] input in
            guard let self else { return }
            switch input {
            case .action(let action):
                if let terminal {
                    terminal(action)
                } else {
                    self.withDrain { self.applyAndNotify(action) }
                }
            case .thunk(let thunk):
                // A thunk that no middleware handled still runs (it is never dropped):
                // `Middleware.thunk` only chooses where in the chain thunks run.
                thunk.run(context)
            }
        }
        let chain = enhancer.enhance(context, base)
        // What middleware dispatched while it was being built waited in the queue (there
        // was no chain yet); it runs now, through the finished chain.
        let me = currentThreadID()
        drain.withLock { context in
            context.chain = chain
            owner.store(me, ordering: .relaxed)
            drainQueue(chain)
            owner.store(0, ordering: .relaxed)
        }
    }

    /// Stops a reducer that reaches for its store (Redux: "Reducers may not dispatch actions").
    @inlinable func refuseInsideReducer(_ what: StaticString) {
        if reducing.load(ordering: .relaxed), owner.load(ordering: .relaxed) == currentThreadID() {
            preconditionFailure("StoreCore: a reducer may not \(what): it is a pure function of its state and action (replicas replay it); dispatch from middleware, a thunk or a subscriber instead")
        }
    }

    // MARK: - State

    /// The current state: a copy, readable from any thread, never writable from outside.
    ///
    /// Reading it inside `withObservationTracking` (or a SwiftUI view body) registers an
    /// observation that fires when an action changes the state.
    public var state: State {
        if !observable.load(ordering: .relaxed) { observable.store(true, ordering: .relaxed) }
        registrar.access(self, keyPath: stateKeyPath)
        // Read while a batch is announced (``receiveBatch(_:)``): a tracking registered now
        // must hear of the batch's later actions, so the batch announces itself again.
        if batchAnnounced.load(ordering: .acquiring) { readDuringBatch.store(true, ordering: .releasing) }
        refuseInsideReducer("read its store's state")
        return core.withLock { $0.state }
    }

    /// Set while ``receiveBatch(_:)`` has announced a change of `state` to Observation.
    @usableFromInline let batchAnnounced = Atomic<Bool>(false)
    /// Set by a read of ``state`` while a batch is announced (see there).
    @usableFromInline let readDuringBatch = Atomic<Bool>(false)

    /// Set by the first read of ``state``. Until then no observation can exist
    /// (`withObservationTracking` only sees properties that were read), so dispatch skips
    /// the registrar, whose `willSet`/`didSet` cost a lock and a key-path lookup each.
    @usableFromInline let observable = Atomic<Bool>(false)

    /// Announces a change of `state` to observers, if there can be any.
    @inlinable
    func withStateMutation<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        guard observable.load(ordering: .relaxed) else { return try body() }
        registrar.willSet(self, keyPath: stateKeyPath)
        defer { registrar.didSet(self, keyPath: stateKeyPath) }
        return try body()
    }

    /// The current state without registering an observation (for the store's own use).
    @usableFromInline package var unobservedState: State { core.withLock { $0.state } }

    // MARK: - Dispatch

    /// Whether the calling thread is inside this store's dispatch (middleware, the terminal, a
    /// subscriber): it holds the dispatch lock, so it must not wait for anything that needs it.
    package var isDispatchingOnCurrentThread: Bool { owner.load(ordering: .relaxed) == currentThreadID() }

    /// Dispatches an action or a thunk through the enhancer chain.
    ///
    /// - Parameter input: What to dispatch.
    @inlinable public func dispatch(_ input: Dispatchable<State, Action>) {
        let me = currentThreadID()
        if owner.load(ordering: .relaxed) == me {
            if reducing.load(ordering: .relaxed) { refuseInsideReducer("dispatch actions") }
            core.withLock { $0.queue.append(.input(input)) }
            queued.store(true, ordering: .relaxed)
            return
        }
        drain.withLock { context in
            guard let chain = context.chain else {
                // Dispatched while middleware is being built: queued, run once the chain is.
                core.withLock { $0.queue.append(.input(input)) }
                queued.store(true, ordering: .relaxed)
                return
            }
            owner.store(me, ordering: .relaxed)
            chain(input)
            drainQueue(context.chain)
            owner.store(0, ordering: .relaxed)
        }
    }

    /// Dispatches a plain action through the enhancer chain.
    ///
    /// - Parameter action: The action.
    @inlinable public func dispatch(_ action: Action) {
        dispatch(.action(action))
    }

    /// Dispatches a thunk.
    ///
    /// It runs where ``Middleware/thunk`` sits in the chain, or, without that middleware,
    /// at the end of the chain (never dropped).
    ///
    /// - Parameter thunk: The thunk.
    @inlinable public func dispatch(_ thunk: Thunk<State, Action>) {
        dispatch(.thunk(thunk))
    }

    /// Applies an action that was already decided elsewhere, skipping the enhancer chain.
    ///
    /// A replica calls this for every action the hub sequences, so middleware and thunks
    /// never run twice. Subscribers are notified as for a local dispatch. Called during a
    /// dispatch on the same thread, the action is queued like a dispatch (and a refusal
    /// then goes to `onError`).
    ///
    /// - Parameter action: The sequenced action.
    /// - Throws: The reducer's failure; the state is then unchanged.
    @inlinable package func receive(_ action: Action) throws(R.Failure) {
        let me = currentThreadID()
        if owner.load(ordering: .relaxed) == me {
            core.withLock { $0.queue.append(.received(action)) }
            queued.store(true, ordering: .relaxed)
            return
        }
        try drain.withLock { (context: inout DrainContext) throws(R.Failure) -> Void in
            owner.store(me, ordering: .relaxed)
            defer {
                drainQueue(context.chain)
                owner.store(0, ordering: .relaxed)
            }
            try applyThrowing(action)
        }
    }

    /// Applies a run of sequenced actions in one hold of the dispatch lock.
    ///
    /// `body` is called once with an `apply` function; each call applies one action with the
    /// reducer (skipping middleware), notifies subscribers, and runs what they dispatched,
    /// exactly as ``receive(_:)`` would. A replica's reader uses it for every frame of one
    /// read, so the lock is taken once per batch instead of once per action.
    ///
    /// - Parameter body: Calls `apply` for each action, in order; stops at a refusal.
    @inlinable package func receiveBatch(_ body: (_ apply: (Action) throws(R.Failure) -> Void) -> Void) {
        let me = currentThreadID()
        if owner.load(ordering: .relaxed) == me {
            // Already inside a dispatch on this thread (a subscriber reading frames): apply inline.
            body { (action: Action) throws(R.Failure) in try applyThrowing(action) }
            return
        }
        drain.withLock { context in
            owner.store(me, ordering: .relaxed)
            let chain = context.chain
            // One Observation mutation for the whole batch, announced at its first action and
            // ended after its last: an observation fires once per change anyway, and the
            // registrar's `willSet`/`didSet` (a lock and a key-path look-up each) run once per
            // read instead of once per action. Subscribers still hear every action. A tracking
            // registered by a read of `state` during the batch (another thread re-rendering)
            // saw an intermediate state: the batch is announced again before its next action,
            // or at its end, so that tracking hears of the rest.
            var announced = false
            body { (action: Action) throws(R.Failure) in
                if observable.load(ordering: .relaxed) {
                    if !announced {
                        announced = true
                        batchAnnounced.store(true, ordering: .releasing)
                        registrar.willSet(self, keyPath: stateKeyPath)
                    } else {
                        announceAgainIfReadDuringBatch()
                    }
                }
                try applyAnnounced(action)
                drainQueue(chain)
            }
            if announced {
                batchAnnounced.store(false, ordering: .releasing)
                announceAgainIfReadDuringBatch()
                registrar.didSet(self, keyPath: stateKeyPath)
            }
            // What the body queued after its last apply (a dispatch from a callback it ran).
            drainQueue(chain)
            owner.store(0, ordering: .relaxed)
        }
    }

    /// Applies an action directly with the reducer, reporting a refusal to the caller.
    ///
    /// The hub validates every dispatch this way before giving it a sequence number.
    ///
    /// - Parameter action: The action.
    /// - Throws: The reducer's failure; the state is then unchanged.
    @inlinable package func apply(_ action: Action) throws(R.Failure) {
        try receive(action)
    }

    /// Replaces the state wholesale and notifies subscribers (hydration from a snapshot).
    ///
    /// - Parameter state: The new state.
    @usableFromInline package func replaceState(_ state: State) {
        withDrain {
            let subscribers = withStateMutation {
                core.withLock { core -> [Subscriber] in
                    core.state = state
                    return core.subscribers
                }
            }
            notify(subscribers, state)
        }
    }

    /// Runs `body` as part of the dispatch in progress on this thread, or as a dispatch of its own.
    @inlinable
    func withDrain<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        let me = currentThreadID()
        if owner.load(ordering: .relaxed) == me { return try body() }
        return try drain.withLock { (context: inout DrainContext) throws(E) -> T in
            owner.store(me, ordering: .relaxed)
            defer {
                drainQueue(context.chain)
                owner.store(0, ordering: .relaxed)
            }
            return try body()
        }
    }

    /// Runs everything queued by re-entrant dispatches, in order. Caller holds `drain`.
    ///
    /// - Parameter chain: The enhancer chain, read from `drain`'s value by the caller.
    @inlinable func drainQueue(_ chain: Dispatch?) {
        guard queued.load(ordering: .relaxed) else { return }
        queued.store(false, ordering: .relaxed)
        while let next = core.withLock({ $0.popPending() }) {
            switch next {
            case .input(let input):
                chain?(input)
            case .received(let action):
                applyAndNotify(action)
            }
        }
    }

    /// Applies and notifies, sending a refusal to `onError`. Caller holds `drain`.
    @inlinable func applyAndNotify(_ action: Action) {
        do {
            try applyThrowing(action)
        } catch {
            onError?(error, action)
        }
    }

    /// Applies one action with the reducer, records it, and notifies. Caller holds `drain`.
    @inlinable func applyThrowing(_ action: Action) throws(R.Failure) {
        try withStateMutation { () throws(R.Failure) in try applyAnnounced(action) }
    }

    /// Inside an announced batch: if ``state`` was read since the announcement (a tracking
    /// registered then saw an intermediate state), ends that change and announces another.
    @inlinable func announceAgainIfReadDuringBatch() {
        guard readDuringBatch.exchange(false, ordering: .acquiringAndReleasing) else { return }
        registrar.didSet(self, keyPath: stateKeyPath)
        registrar.willSet(self, keyPath: stateKeyPath)
    }

    /// ``applyThrowing(_:)`` inside a change of `state` the caller has already announced to
    /// Observation (or that nobody can observe yet).
    @inlinable func applyAnnounced(_ action: Action) throws(R.Failure) {
        // No tuple crosses the lock: where this runs unspecialised (a generic caller in another
        // module), a tuple of generic types costs a locked run-time metadata look-up per action.
        var state: State?
        let subscribers = try core.withLock { (core: inout Core) throws(R.Failure) -> [Subscriber] in
            reducing.store(true, ordering: .relaxed)
            defer { reducing.store(false, ordering: .relaxed) }
            try reducer.reduce(into: &core.state, action: action)
            core.history?.record(action, state: core.state)
            if !core.subscribers.isEmpty { state = core.state }
            return core.subscribers
        }
        if let state { notify(subscribers, state) }
    }

    @inlinable func notify(_ subscribers: [Subscriber], _ state: State) {
        // `subscribers` holds a strong reference to each element for the whole loop, so the
        // loop borrows them instead of retaining and releasing each one (with 100 selector
        // subscriptions that pair was a third of the cost of a dispatch).
        subscribers.withUnsafeBufferPointer { buffer in
            for index in buffer.indices {
                Unmanaged.passUnretained(buffer[index])._withUnsafeGuaranteedRef { subscriber in
                    if !subscriber.cancelled.load(ordering: .relaxed) { subscriber.notify(state) }
                }
            }
        }
    }
}
