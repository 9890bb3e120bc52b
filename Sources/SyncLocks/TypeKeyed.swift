/// Values kept by a type's identity, under one ``Locked``, readable from any thread: what a
/// module that knows a concrete type registers for generic code that only has it as a
/// parameter (`HubSpecialization`, `ReplicaSpecialization`).
package final class TypeKeyed: Sendable {
    private let values = Locked<[ObjectIdentifier: any Sendable]>([:])

    /// Creates an empty store.
    package init() {}

    /// Keeps `value` for `type`, replacing what was kept for it.
    ///
    /// - Parameters:
    ///   - value: The value.
    ///   - type: The type it belongs to.
    package func set(_ value: any Sendable, for type: Any.Type) {
        values.withLock { $0[ObjectIdentifier(type)] = value }
    }

    /// The value kept for `type`, if any.
    ///
    /// - Parameter type: The type.
    /// - Returns: The value, or `nil`.
    package func value(for type: Any.Type) -> (any Sendable)? {
        values.withLock { $0[ObjectIdentifier(type)] }
    }
}
