import Dispatch
import Observation
import SyncCore
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
    /// The latest state and link from the reader thread, waiting for the main actor.
    private nonisolated let inbox: Mutex<Inbox>
    private nonisolated let tokens: Mutex<[Subscription]>

    private struct Inbox {
        var state: App.State?
        var link: LinkState?
        var scheduled = false
    }

    /// Creates a model over an attached replica.
    ///
    /// - Parameter replica: The replica; the model holds it (close it when done).
    public init(_ replica: Replica<App>) {
        self.replica = replica
        currentState = replica.store.state
        currentLink = replica.linkState
        inbox = Mutex(Inbox())
        tokens = Mutex([])
        let stateToken = replica.store.subscribe { [weak self] state in
            self?.deliver { $0.state = state }
        }
        let linkToken = replica.observeEvents { [weak self, replica] event in
            switch event {
            case .connection, .disconnected:
                let link = replica.linkState
                self?.deliver { $0.link = link }
            default:
                break
            }
        }
        tokens.withLock { $0 = [stateToken, linkToken] }
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
        (get: { [unowned self] in self.state[keyPath: keyPath] },
         set: { [unowned self] value in self.send(action(value)) })
    }

    /// Called on the reader thread: stores the news and schedules one hop to the main actor.
    private nonisolated func deliver(_ update: (inout Inbox) -> Void) {
        let schedule = inbox.withLock { inbox -> Bool in
            update(&inbox)
            defer { inbox.scheduled = true }
            return !inbox.scheduled
        }
        guard schedule else { return }
        DispatchQueue.main.async { [weak self] in
            MainActor.assumeIsolated { self?.flush() }
        }
    }

    /// On the main actor: takes the newest state and link and tells observers.
    private func flush() {
        let (state, link) = inbox.withLock { inbox -> (App.State?, LinkState?) in
            defer {
                inbox.state = nil
                inbox.link = nil
                inbox.scheduled = false
            }
            return (inbox.state, inbox.link)
        }
        if let state {
            registrar.withMutation(of: self, keyPath: \.state) { currentState = state }
        }
        if let link, link != currentLink {
            registrar.withMutation(of: self, keyPath: \.linkState) { currentLink = link }
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
