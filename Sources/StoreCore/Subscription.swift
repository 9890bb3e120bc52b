import Synchronization

/// A live subscription. Call ``cancel()`` to stop it; it also stops when released.
///
/// Keep the token for as long as you want callbacks: `let token = store.subscribe { … }`.
public final class Subscription: Sendable {
    private let onCancel: Mutex<(@Sendable () -> Void)?>

    /// Creates a token that runs `onCancel` once, on ``cancel()`` or release.
    ///
    /// - Parameter onCancel: Removes the subscription from its source.
    public init(onCancel: @escaping @Sendable () -> Void) {
        self.onCancel = Mutex(onCancel)
    }

    /// Stops the subscription. After this returns no new callback starts; calling it again does nothing.
    public func cancel() {
        let action = onCancel.withLock { value -> (@Sendable () -> Void)? in
            defer { value = nil }
            return value
        }
        action?()
    }

    /// Whether ``cancel()`` has run.
    public var isCancelled: Bool { onCancel.withLock { $0 == nil } }

    deinit { cancel() }
}
