import SyncLocks
import Synchronization

/// A live subscription. Call ``cancel()`` to stop it; it also stops when released.
///
/// Keep the token for as long as you want callbacks: `let token = store.subscribe { … }`.
public final class Subscription: Sendable {
    private let onCancel: Locked<(@Sendable () -> Void)?>

    /// Creates a token that runs `onCancel` once, on ``cancel()`` or release.
    ///
    /// - Parameter onCancel: Removes the subscription from its source.
    public init(onCancel: @escaping @Sendable () -> Void) {
        self.onCancel = Locked(onCancel)
    }

    /// Stops the subscription; calling it again does nothing.
    ///
    /// After this returns no new callback starts. A callback that is already running on
    /// another thread (inside a dispatch there) is not waited for and may still be finishing:
    /// waiting would deadlock when `cancel` is called from inside a callback, or from a thread
    /// that callback waits on. Where that matters, note that dispatches are serialised: once a
    /// `dispatch` made after `cancel` returns, every earlier notification has finished.
    ///
    /// The source's reference to the callback is released outside every lock, so a callback
    /// that owns other tokens (of the same store or not) may be released freely.
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
