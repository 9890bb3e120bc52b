import SyncLocks
import Synchronization

/// A caller waiting for the hub's answer (a dispatch's acknowledgement, a `status`, a
/// `sync`), which the task's cancellation may end first.
///
/// The reader and the connection's end resume it with the answer or a failure; a cancelled
/// task resumes it with ``ReplicaError/cancelled``. Whichever comes first wins and the others
/// do nothing, so a waiter stays in its queue after a cancellation (replies are matched by
/// order: the answer that was meant for it is then dropped, never given to the next caller).
@usableFromInline
final class ReplyWaiter<T: Sendable>: Sendable {
    private enum State {
        /// Created; the continuation is not there yet.
        case empty
        case waiting(CheckedContinuation<T, any Error>)
        /// Cancelled before the continuation was set.
        case cancelled
        case done
    }

    private let state = Locked(State.empty)

    @usableFromInline init() {}

    /// Waits for the answer: `start` registers this waiter and sends the request; the task's
    /// cancellation ends the wait with ``ReplicaError/cancelled`` (a task already cancelled
    /// does not call `start`, so nothing is sent).
    ///
    /// - Parameter start: Registers the waiter where the answer will find it, and asks.
    /// - Returns: The answer.
    /// - Throws: ``ReplicaError``: the failure the waiter was resumed with, or `cancelled`.
    @usableFromInline
    func wait(_ start: (ReplyWaiter<T>) -> Void) async throws(ReplicaError) -> T {
        if Task.isCancelled { throw .cancelled }
        do {
            return try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                    set(continuation)
                    start(self)
                }
            } onCancel: {
                cancel()
            }
        } catch let error as ReplicaError {
            throw error
        } catch {
            throw .disconnected(String(describing: error))
        }
    }

    /// Sets the continuation; resumes it at once when the task was cancelled meanwhile.
    ///
    /// - Parameter continuation: The caller's continuation.
    @usableFromInline func set(_ continuation: CheckedContinuation<T, any Error>) {
        let cancelled = state.withLock { state -> Bool in
            if case .cancelled = state {
                state = .done
                return true
            }
            state = .waiting(continuation)
            return false
        }
        if cancelled { continuation.resume(throwing: ReplicaError.cancelled) }
    }

    /// Takes the continuation, if it is still waiting (outside the lock, the caller resumes it).
    private func take() -> CheckedContinuation<T, any Error>? {
        state.withLock { state in
            switch state {
            case .waiting(let continuation):
                state = .done
                return continuation
            case .empty:
                state = .done
                return nil
            case .cancelled, .done:
                return nil
            }
        }
    }

    /// Resumes the caller with the answer (nothing when it was cancelled or already answered).
    ///
    /// - Parameter value: The answer.
    /// - Returns: Whether the caller got it.
    @usableFromInline @discardableResult
    func resume(returning value: T) -> Bool {
        guard let continuation = take() else { return false }
        continuation.resume(returning: value)
        return true
    }

    /// Resumes the caller with a failure (nothing when it was cancelled or already answered).
    ///
    /// - Parameter error: The failure.
    @usableFromInline func resume(throwing error: any Error) { take()?.resume(throwing: error) }

    /// The task was cancelled: the caller gets ``ReplicaError/cancelled`` now, or as soon as it
    /// starts waiting.
    @usableFromInline func cancel() {
        let continuation = state.withLock { state -> CheckedContinuation<T, any Error>? in
            switch state {
            case .empty:
                state = .cancelled
                return nil
            case .waiting(let continuation):
                state = .done
                return continuation
            case .cancelled, .done:
                return nil
            }
        }
        continuation?.resume(throwing: ReplicaError.cancelled)
    }
}
