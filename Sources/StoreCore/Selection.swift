import Observation
import SyncLocks
import Synchronization

/// An `Observable` view of one selected value of a store, updated only when it changes.
///
/// In SwiftUI, a view that reads `selection.value` re-renders when that value changes
/// and not when other parts of the state do (seed 002's performance caveat).
///
///     let count = store.selection { $0.count }
///     Text("\(count.value)")
public final class Selection<Value: Equatable & Sendable>: Sendable, Observable {
    private let storage: Locked<Value>
    private let registrar = ObservationRegistrar()
    /// `\.value`, built once (see `Store.stateKeyPath`).
    private let valueKeyPath: KeyPath<Selection, Value> & Sendable
    private let token: Locked<Subscription?> = Locked(nil)

    init(initial: Value) {
        storage = Locked(initial)
        valueKeyPath = \Selection.value
    }

    /// The selected value, as of the last action that changed it.
    public var value: Value {
        registrar.access(self, keyPath: valueKeyPath)
        return storage.withLock { $0 }
    }

    func update(_ value: Value) {
        registrar.willSet(self, keyPath: valueKeyPath)
        storage.withLock { $0 = value }
        registrar.didSet(self, keyPath: valueKeyPath)
    }

    func attach(_ subscription: Subscription) {
        token.withLock { $0 = subscription }
    }
}

extension Store {
    /// An `Observable` object holding one selected value, kept up to date.
    ///
    /// - Parameter selector: Picks the value out of the state.
    /// - Returns: The selection; it follows the store while it is alive.
    public func selection<Value: Equatable & Sendable>(
        _ selector: @escaping @Sendable (State) -> Value
    ) -> Selection<Value> {
        let selection = Selection(initial: selector(unobservedState))
        // `sendCurrent` delivers the value at the moment of registration, atomically with it,
        // so an action applied between reading the state above and subscribing is not missed.
        let token = subscribe(to: selector, sendCurrent: true) { [weak selection] value in selection?.update(value) }
        selection.attach(token)
        return selection
    }
}
