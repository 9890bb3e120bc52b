import StoreCore
import SyncLocks
import Synchronization

/// A task executor that lets the replica's reader thread carry on a task it wakes: a task
/// that prefers this executor and awaits the hub (``Replica/dispatch(_:)``, ``Replica/sync()``,
/// ``Replica/status()``) continues on the reader thread right after the answer is applied,
/// instead of waiting for a thread of the global pool to wake up for it.
///
/// On an idle machine that hop is the largest single wait of a round trip (one thread wake-up,
/// 10–20 µs on a virtual machine); see docs/PERFORMANCE.md. Opt in per task:
///
/// ```swift
/// try await withTaskExecutorPreference(replica.executor) {
///     let seq = try await replica.dispatch(.increment)   // resumes on the reader thread
///     print("sequenced as", seq)
/// }
/// ```
///
/// How it runs jobs:
/// - A job enqueued **by the reader thread** (it resumed a waiting task) runs on that thread
///   once the read it belongs to is applied and no lock is held: after the observers, before
///   the next read. A job such a task enqueues in turn (it yielded, or woke another task on
///   this executor) runs next, before the reader waits for the hub again.
/// - A job enqueued **by any other thread** (a task starting, or resumed by something else),
///   or after the reader has ended, goes to the global concurrent executor, as without a
///   preference.
///
/// The price is the reader's: while such a task runs, this replica applies nothing. Keep the
/// work between two awaits short, as on an event loop, and never block waiting for this
/// replica from it (a semaphore signalled by an observer of this replica, for instance, would
/// never be signalled). Sending is fine: a dispatch, a `sync`, a `status`, ``Replica/close()``.
public final class ReplicaExecutor: TaskExecutor, Sendable {
    /// The reader thread's id while it runs (0 before it starts and after it ends).
    private let reader = Atomic<UInt>(0)
    /// Jobs the reader thread enqueued, run by it at its next safe point.
    private let queued = Locked<[UnownedJob]>([])

    init() {}

    /// Takes a job: queued for the reader thread when the reader enqueues it, else handed to
    /// the global concurrent executor.
    ///
    /// - Parameter job: The job.
    public func enqueue(_ job: consuming ExecutorJob) {
        let id = reader.load(ordering: .acquiring)
        if id != 0, id == currentThreadID() {
            let unowned = UnownedJob(job)
            queued.withLock { $0.append(unowned) }
        } else {
            globalConcurrentExecutor.enqueue(job)
        }
    }

    /// Called by the reader thread when it starts.
    func readerStarted() {
        reader.store(currentThreadID(), ordering: .releasing)
    }

    /// Whether the calling thread is the reader thread (it must not wait for anything the
    /// reader does, such as room in the send queue).
    var isReaderThread: Bool {
        let id = reader.load(ordering: .acquiring)
        return id != 0 && id == currentThreadID()
    }

    /// Called by the reader thread when it ends: later jobs go to the global executor, and the
    /// ones already queued run now.
    func readerEnded() {
        reader.store(0, ordering: .releasing)
        // Jobs these enqueue go to the global executor now, so this ends.
        while runQueued() {}
    }

    /// Runs the jobs the reader thread queued before this call, on the calling (reader)
    /// thread; the ones they queue wait for the next call, so a task that keeps yielding
    /// cannot keep the reader from reading. Called with no lock held.
    ///
    /// - Returns: Whether jobs are queued again (the reader then polls instead of waiting).
    @discardableResult
    func runQueued() -> Bool {
        let jobs = queued.withLock { jobs -> [UnownedJob] in
            guard !jobs.isEmpty else { return [] }
            defer { jobs = [] }
            return jobs
        }
        guard !jobs.isEmpty else { return false }
        let me = asUnownedTaskExecutor()
        for job in jobs { job.runSynchronously(on: me) }
        return queued.withLock { !$0.isEmpty }
    }
}
