import CSyncTSan
import Synchronization

/// A value behind a lock: the one lock type of StoreSync, used everywhere instead of a raw
/// `Synchronization.Mutex`.
///
/// It is a `Mutex` (a futex word, no allocation per lock) that also tells ThreadSanitizer
/// what the lock guarantees. `Mutex` hands a contended lock over inside an uninstrumented
/// library, so TSan, seeing no happens-before edge between two critical sections, reported
/// races the lock excludes; suppressing them by function name hid real races too. `Locked`
/// acquires its own address for TSan after taking the lock and releases it before giving it
/// up (`__tsan_acquire`, `__tsan_release`). Outside a ThreadSanitizer build those calls
/// compile to nothing.
///
/// Like swift-nio's `NIOLockedValueBox`, it is a class, so that its address, which TSan keys
/// on, never moves. Never call user code that may take the same lock from `body` (it is not
/// recursive), and never free user code while holding it: move what must be released out of
/// `body` and let it go after.
public final class Locked<Value: ~Copyable>: Sendable {
    /// The lock and the value (internal; inlined into callers so a lock costs what a `Mutex` costs).
    @usableFromInline let mutex: Mutex<Value>

    /// Creates a lock around a value.
    ///
    /// - Parameter initialValue: The value.
    public init(_ initialValue: consuming sending Value) {
        mutex = Mutex(initialValue)
    }

    /// Runs `body` with the value, holding the lock.
    ///
    /// - Parameter body: Reads or changes the value; it must not take this lock again.
    /// - Returns: What `body` returns.
    /// - Throws: What `body` throws.
    @inlinable
    public func withLock<Result: ~Copyable, Failure: Error>(
        _ body: (inout sending Value) throws(Failure) -> sending Result
    ) throws(Failure) -> sending Result {
        let address = Unmanaged.passUnretained(self).toOpaque()
        return try mutex.withLock { (value: inout sending Value) throws(Failure) -> sending Result in
            csynctsan_acquire(address)
            defer { csynctsan_release(address) }
            return try body(&value)
        }
    }

    /// Whether this build tells ThreadSanitizer about its locks (a ThreadSanitizer build).
    public static var annotatesForThreadSanitizer: Bool { csynctsan_enabled() != 0 }
}
