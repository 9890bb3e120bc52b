import Dispatch
import Observation
import SyncCore
import SyncLocks
import Synchronization

/// A replica seen from the main actor: its state and its link change on the main actor only,
/// so a SwiftUI view (or any main-actor code) can hold it directly and observe it.
///
/// The replica's reader thread applies actions at its own pace; the model takes the newest
/// state over to the main actor, coalescing: when actions arrive faster than the main actor
/// runs, it skips intermediate states and shows the latest (a view needs no more).
///
/// ```swift
/// @MainActor
/// final class CounterScreen {
///     let model: ReplicaModel<CounterApp>
///     init(replica: Replica<CounterApp>) { model = ReplicaModel(replica) }
///     func tapped() async throws { try await model.dispatch(.increment) }   // returns the seq
/// }
/// ```
@MainActor
public final class ReplicaModel<App: SyncApp>: Observable {
    /// The replica behind the model.
    public nonisolated let replica: Replica<App>
    private let registrar = ObservationRegistrar()
    private var currentState: App.State
    private var currentLink: LinkState
    private var currentWaiting: WaitingNotice?
    /// Whether a hop to the main actor is already scheduled (news since then rides along).
    private nonisolated let scheduled: Locked<Bool>
    private nonisolated let tokens: Locked<[Subscription]>

    /// Creates a model over an attached replica.
    ///
    /// - Parameter replica: The replica; the model holds it (close it when done).
    public init(_ replica: Replica<App>) {
        self.replica = replica
        scheduled = Locked(false)
        tokens = Locked([])
        // Placeholders until the first read below; the reads come after subscribing, so no
        // change between reading and subscribing can be missed.
        currentState = replica.app.initialState
        currentLink = .connected
        currentWaiting = nil
        let stateToken = replica.store.subscribe { [weak self] _ in self?.deliver() }
        let linkToken = replica.observeEvents { [weak self] event in
            switch event {
            case .connection, .disconnected: self?.deliver()
            default: break
            }
        }
        tokens.withLock { $0 = [stateToken, linkToken] }
        currentState = replica.store.state
        currentLink = replica.linkState
        currentWaiting = replica.waiting
    }

    deinit {
        // Released outside the lock: a token's release runs the replica's unsubscribe.
        let released = tokens.withLock { tokens in
            defer { tokens = [] }
            return tokens
        }
        withExtendedLifetime(released) {}
    }

    /// The replica's state, as of the last hop to the main actor. Observable.
    public var state: App.State {
        registrar.access(self, keyPath: \.state)
        return currentState
    }

    /// The link to the hub, as of the last hop to the main actor. Observable.
    public var linkState: LinkState {
        registrar.access(self, keyPath: \.linkState)
        return currentLink
    }

    /// What the hub holds the replica for while it reconnects (the history runs an older
    /// version of the app; it attaches once the history is upgraded), as of the last hop to
    /// the main actor; `nil` otherwise. Observable.
    public var waiting: WaitingNotice? {
        registrar.access(self, keyPath: \.waiting)
        return currentWaiting
    }

    /// Sends an action and waits until the hub has sequenced it and it is applied here.
    ///
    /// - Parameter action: The action.
    /// - Returns: The seq the hub gave it. ``state`` shows it after the next hop to the main actor.
    /// - Throws: ``ReplicaError`` with the hub's refusal, or when the link is gone.
    @discardableResult
    public func dispatch(_ action: App.Action) async throws(ReplicaError) -> UInt64 {
        try await replica.dispatch(action)
    }

    /// Dispatches through the local store (middleware and thunks run here), without waiting.
    ///
    /// - Parameter action: The action.
    public func send(_ action: App.Action) {
        replica.store.dispatch(action)
    }

    /// A value of the state that dispatches an action when set: for a text field or a toggle.
    ///
    /// - Parameters:
    ///   - keyPath: Where the value is in the state.
    ///   - action: The action that sets a new value.
    /// - Returns: The binding's getter and setter (wrap it in SwiftUI's `Binding` where available).
    public func binding<Value>(_ keyPath: KeyPath<App.State, Value>,
                               send action: @escaping (Value) -> App.Action) -> (get: () -> Value, set: (Value) -> Void) {
        // Strong: a binding that outlives its view keeps the model alive rather than crash.
        (get: { self.state[keyPath: keyPath] },
         set: { value in self.send(action(value)) })
    }

    /// Called on the reader thread (or the closing one): schedules one hop to the main
    /// actor, which reads the replica afresh (so the newest state and link always win).
    private nonisolated func deliver() {
        let schedule = scheduled.withLock { scheduled -> Bool in
            defer { scheduled = true }
            return !scheduled
        }
        guard schedule else { return }
        DispatchQueue.main.async { [weak self] in
            MainActor.assumeIsolated { self?.flush() }
        }
    }

    /// On the main actor: reads the replica's state and link now and tells observers.
    private func flush() {
        // Cleared before reading: news that arrives while reading schedules another hop.
        scheduled.withLock { $0 = false }
        let state = replica.store.state
        let link = replica.linkState
        let waiting = replica.waiting
        registrar.withMutation(of: self, keyPath: \.state) { currentState = state }
        if link != currentLink {
            registrar.withMutation(of: self, keyPath: \.linkState) { currentLink = link }
        }
        if waiting != currentWaiting {
            registrar.withMutation(of: self, keyPath: \.waiting) { currentWaiting = waiting }
        }
    }
}

#if canImport(SwiftUI)
import SwiftUI

extension ReplicaModel {
    /// A SwiftUI `Binding` to a value of the state that dispatches `action` when set.
    ///
    /// - Parameters:
    ///   - keyPath: Where the value is in the state.
    ///   - action: The action that sets a new value.
    /// - Returns: The binding.
    public func swiftUIBinding<Value>(_ keyPath: KeyPath<App.State, Value>,
                                      send action: @escaping (Value) -> App.Action) -> Binding<Value> {
        let pair = binding(keyPath, send: action)
        return Binding(get: pair.get, set: pair.set)
    }
}
#endif
