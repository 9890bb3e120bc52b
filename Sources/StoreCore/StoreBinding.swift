/// A two-way binding to one state value whose writes dispatch an action.
///
/// This is seed 000's `@ReduxBindable` without its boilerplate: no property wrapper in
/// the state, no `initialize(store:)`, no store injected into state. Reading gives the
/// store's current value; writing dispatches `send(newValue)`, and the value changes
/// only when the reducer applies that action.
///
///     let limit = store.binding(\.limitText, send: { .setLimitText($0) })
///     limit.wrappedValue = "5"   // dispatches .setLimitText("5")
public struct StoreBinding<Value: Sendable>: Sendable {
    private let get: @Sendable () -> Value
    private let set: @Sendable (Value) -> Void

    /// Creates a binding from a getter and a setter.
    ///
    /// - Parameters:
    ///   - get: Reads the value.
    ///   - set: Handles a write, normally by dispatching an action.
    public init(get: @escaping @Sendable () -> Value, set: @escaping @Sendable (Value) -> Void) {
        self.get = get
        self.set = set
    }

    /// The current value; setting it dispatches the binding's action.
    public var wrappedValue: Value {
        get { get() }
        nonmutating set { set(newValue) }
    }
}

extension Store {
    /// A binding to the value at `keyPath` whose writes dispatch `send(newValue)`.
    ///
    /// - Parameters:
    ///   - keyPath: The value to read.
    ///   - send: Makes the action that sets it.
    /// - Returns: The binding.
    public func binding<Value: Sendable>(
        _ keyPath: KeyPath<State, Value> & Sendable,
        send: @escaping @Sendable (Value) -> Action
    ) -> StoreBinding<Value> {
        // The binding keeps the store alive, as a SwiftUI `Binding` to an object does.
        StoreBinding(
            get: { self.state[keyPath: keyPath] },
            set: { value in self.dispatch(.action(send(value))) }
        )
    }
}

#if canImport(SwiftUI)
import SwiftUI

extension StoreBinding {
    /// This binding as a `SwiftUI.Binding`, for `Toggle`, `TextField` and friends.
    public var swiftUI: Binding<Value> {
        Binding(get: { self.wrappedValue }, set: { self.wrappedValue = $0 })
    }
}

extension Store {
    /// A `SwiftUI.Binding` to the value at `keyPath` whose writes dispatch `send(newValue)`.
    ///
    /// - Parameters:
    ///   - keyPath: The value to read.
    ///   - send: Makes the action that sets it.
    /// - Returns: The SwiftUI binding: `Toggle("Up", isOn: store.swiftUIBinding(\.isIncrementing, send: { .setIncrementing($0) }))`.
    public func swiftUIBinding<Value: Sendable>(
        _ keyPath: KeyPath<State, Value> & Sendable,
        send: @escaping @Sendable (Value) -> Action
    ) -> Binding<Value> {
        binding(keyPath, send: send).swiftUI
    }
}
#endif
