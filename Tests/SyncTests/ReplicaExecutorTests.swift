#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import BuiltinApps
import StoreReplica
import SyncCore
import Synchronization
import Testing

/// The calling thread, as a number (for comparing threads only).
private func threadNumber() -> UInt {
    #if canImport(Darwin)
    UInt(bitPattern: pthread_self())
    #else
    UInt(pthread_self())
    #endif
}

/// Learns the replica's reader thread: its action observers run there.
private func readerThread(of replica: Replica<CounterApp>) async throws -> UInt {
    let seen = Atomic<UInt>(0)
    let token = replica.observeActions { _ in seen.store(threadNumber(), ordering: .releasing) }
    defer { token.cancel() }
    try await replica.dispatch(.increment)
    try await waitUntil("an observer call on the reader thread") { seen.load(ordering: .acquiring) != 0 }
    return seen.load(ordering: .acquiring)
}

/// From a task that prefers `replica.executor`: dispatches until the task runs on the reader
/// thread (a wait that starts on a pool thread may be answered before the task suspends, and
/// the task then goes on there; once on the reader it stays, since the reader cannot read an
/// answer before the task waits).
private func reachReader(_ replica: Replica<CounterApp>, _ reader: UInt) async {
    var tries = 0
    repeat {
        _ = try? await replica.dispatch(.increment)
        tries += 1
    } while threadNumber() != reader && tries < 200
}

@Suite("ReplicaExecutor: tasks awaiting the hub go on on the reader thread")
struct ReplicaExecutorTests {
    @Test("with the preference a task resumes on the reader thread after dispatch, sync and status; without it, elsewhere")
    func resumesOnReader() async throws {
        let hub = try InProcessHub(CounterApp())
        let replica = try hub.attach()
        defer { replica.close() }
        let reader = try await readerThread(of: replica)
        let onReader = try await withTaskExecutorPreference(replica.executor) { () async throws -> [Bool] in
            var answers: [Bool] = []
            // A wait that starts on a pool thread may get its answer before the task has
            // suspended, and the task then simply goes on there. Once on the reader thread it
            // stays: the reader cannot read an answer before the task waits (it is running it).
            var dispatched = 1
            repeat {
                try await replica.dispatch(.increment)
                dispatched += 1
            } while threadNumber() != reader && dispatched < 200
            try await replica.dispatch(.increment)
            dispatched += 1
            answers.append(threadNumber() == reader)
            _ = try await replica.sync()
            answers.append(threadNumber() == reader)
            _ = try await replica.status()
            answers.append(threadNumber() == reader)
            // The state already holds the action when the task goes on.
            answers.append(replica.store.state.count == dispatched)
            return answers
        }
        #expect(onReader == [true, true, true, true])
        try await replica.dispatch(.increment)
        #expect(threadNumber() != reader, "without a preference the global pool resumes the task")
        replica.close()
        try await hub.stop()
    }

    @Test("many tasks on the executor dispatch concurrently; every dispatch is answered once and the state converges")
    func manyTasks() async throws {
        let hub = try InProcessHub(CounterApp())
        let replica = try hub.attach()
        defer { replica.close() }
        let other = try hub.attach()
        defer { other.close() }
        let tasks = 8, each = 100
        let seqs = try await withThrowingTaskGroup(of: [UInt64].self) { group in
            for _ in 0..<tasks {
                group.addTask(executorPreference: replica.executor) {
                    var seqs: [UInt64] = []
                    for _ in 0..<each { seqs.append(try await replica.dispatch(.increment)) }
                    return seqs
                }
            }
            var all: [[UInt64]] = []
            for try await seqs in group { all.append(seqs) }
            return all
        }
        // Each task's seqs rise (one outstanding at a time), and no seq is given twice.
        for list in seqs { #expect(list == list.sorted()) }
        #expect(Set(seqs.joined()).count == tasks * each)
        #expect(replica.store.state.count == tasks * each)
        try await other.sync()
        #expect(other.store.state.count == tasks * each)
        try await hub.stop()
    }

    @Test("a task on the reader thread may close the replica; a later task with the preference still runs and learns it is closed")
    func closeFromReader() async throws {
        let hub = try InProcessHub(CounterApp())
        let replica = try hub.attach()
        defer { replica.close() }
        try await withTaskExecutorPreference(replica.executor) {
            try await replica.dispatch(.increment)
            replica.close()   // on the reader thread: must not wait for itself
        }
        let reason = try await withDeadline("the replica to end") { await replica.waitUntilDisconnected() }
        #expect(reason.description.contains("closed by this replica"))
        // The reader has ended: the executor hands jobs to the global pool, which runs them.
        let outcome = await withTaskExecutorPreference(replica.executor) { () async -> Result<UInt64, ReplicaError> in
            do throws(ReplicaError) { return .success(try await replica.dispatch(.increment)) } catch { return .failure(error) }
        }
        guard case .failure(.disconnected) = outcome else {
            Issue.record("a dispatch after close must fail disconnected, got \(outcome)")
            return
        }
        try await hub.stop()
    }

    @Test("a task on the executor hears of a reconnection while it is under way, not after the backoff")
    func reconnectingReachesTask() async throws {
        let hub = try InProcessHub(CounterApp())
        // A long backoff: the first attempt waits 15–45 s.
        let replica = try hub.attach(reconnect: ReconnectPolicy(initialDelay: .seconds(30), maxDelay: .seconds(30)))
        defer { replica.close() }
        let reader = try await readerThread(of: replica)
        let changes = replica.linkChanges()
        let waiting = Atomic<Bool>(false)
        let heard = Task(executorPreference: replica.executor) { () async -> [ConnectionChange] in
            // On the reader thread, the reader cannot see the hub go until the task waits.
            await reachReader(replica, reader)
            waiting.store(true, ordering: .releasing)
            var seen: [ConnectionChange] = []
            for await change in changes {
                seen.append(change)
                if case .reconnecting = change { break }
            }
            return seen
        }
        try await waitUntil("the task to wait for link changes") { waiting.load(ordering: .acquiring) }
        try await hub.stop()
        let start = ContinuousClock.now
        let seen = try await withDeadline("the reconnecting change", timeout: .seconds(10)) { await heard.value }
        #expect(ContinuousClock.now - start < .seconds(10))
        guard seen.count == 2, case .dropped = seen[0], case .reconnecting(attempt: 1) = seen[1] else {
            Issue.record("expected dropped then reconnecting(1), got \(seen)")
            return
        }
    }

    @Test("a task on the executor that keeps yielding does not keep the reader from reading")
    func yieldingTask() async throws {
        let hub = try InProcessHub(CounterApp())
        let replica = try hub.attach()
        defer { replica.close() }
        let other = try hub.attach()
        defer { other.close() }
        let reader = try await readerThread(of: replica)
        let base = Atomic<Int>(-1)
        let seen = Atomic<Int>(0)
        let task = Task(executorPreference: replica.executor) {
            await reachReader(replica, reader)
            // On the reader thread now: poll the state, yielding between looks.
            let start = replica.store.state.count
            base.store(start, ordering: .releasing)
            while replica.store.state.count < start + 10, !Task.isCancelled { await Task.yield() }
            seen.store(replica.store.state.count - start, ordering: .releasing)
        }
        defer { task.cancel() }
        try await waitUntil("the task to poll") { base.load(ordering: .acquiring) >= 0 }
        for _ in 0..<10 { try await other.dispatch(.increment) }
        try await waitUntil("the polling task to see the other replica's actions") { seen.load(ordering: .acquiring) == 10 }
        try await hub.stop()
    }

    @Test("a task that a task on the reader thread wakes runs at once, not at the hub's next message")
    func wakesAnother() async throws {
        let hub = try InProcessHub(CounterApp())
        let replica = try hub.attach()
        defer { replica.close() }
        let reader = try await readerThread(of: replica)
        let (stream, continuation) = AsyncStream.makeStream(of: Int.self)
        let waiting = Atomic<Bool>(false)
        let got = Atomic<Int>(0)
        let sleeper = Task(executorPreference: replica.executor) {
            await reachReader(replica, reader)
            // On the reader thread: the reader cannot read on before this task waits.
            waiting.store(true, ordering: .releasing)
            for await value in stream {
                got.store(value, ordering: .releasing)
                break
            }
        }
        defer { sleeper.cancel() }
        try await waitUntil("the sleeper to wait") { waiting.load(ordering: .acquiring) }
        let waker = Task(executorPreference: replica.executor) {
            await reachReader(replica, reader)
            // On the reader thread; nothing more comes from the hub after this.
            continuation.yield(7)
        }
        await waker.value
        try await waitUntil("the sleeper to wake", timeout: .seconds(5)) { got.load(ordering: .acquiring) == 7 }
        try await hub.stop()
    }

    @Test("a task waiting on the executor when the hub stops is resumed with the failure")
    func hubStops() async throws {
        let hub = try InProcessHub(CounterApp())
        let replica = try hub.attach()
        defer { replica.close() }
        let waiting = Task(executorPreference: replica.executor) { () async -> ReplicaError? in
            do throws(ReplicaError) {
                // Dispatches until the hub is gone; the last one fails.
                while true { try await replica.dispatch(.increment) }
            } catch {
                return error
            }
        }
        try await waitUntil("a few dispatches from the task") { replica.store.state.count > 10 }
        try await hub.stop()
        let error = try await withDeadline("the waiting task to end") { await waiting.value }
        guard case .disconnected? = error else {
            Issue.record("expected disconnected, got \(String(describing: error))")
            return
        }
    }
}
