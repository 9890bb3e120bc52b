import BuiltinApps
import Foundation
import Observation
import StoreReplica
import SyncCore
import Synchronization
import SyncPOSIX
import Testing

@Suite("Async attach, link changes as a sequence, and the main-actor model")
struct AsyncAndMainActorTests {
    @Test("try await attach suspends instead of blocking, times out, and says why there is no hub")
    func asyncAttach() async throws {
        let hub = try InProcessHub(CounterApp())
        defer { Task { try? await hub.stop() } }    // also when an expectation fails early
        let replica = try await Replica.attach(app: CounterApp(), socketPath: hub.fixture.socket, reconnect: .never,
                                               timeout: .seconds(5))
        defer { replica.close() }
        #expect(try await replica.dispatch(.increment) == 1)
        replica.close()
        do {
            _ = try await Replica.attach(app: CounterApp(), socketPath: hub.fixture.socket + ".none", timeout: .seconds(1))
            Issue.record("attach must fail without a hub")
        } catch {
            guard case .noHub = error else { Issue.record("unexpected \(error)"); return }
        }
        // A listener that never answers: the welcome deadline ends the wait.
        let silent = try UnixSocketListener(path: hub.fixture.directory + "/silent.sock")
        defer { silent.close() }
        let start = ContinuousClock.now
        await #expect(throws: ReplicaError.self) {
            _ = try await Replica.attach(app: CounterApp(), socketPath: silent.path, timeout: .milliseconds(200))
        }
        // Ended by the 200 ms timeout, not by a hang: the bound only separates the two, and is
        // wide because a loaded machine resumes the awaiting task late (5.98 s was seen).
        #expect(ContinuousClock.now - start < scaled(.seconds(30)))
        try await hub.stop()
    }

    @Test("Task cancellation ends the wait of attach, dispatch, status and sync at once; a cancelled dispatch is still applied once")
    func cancellation() async throws {
        let fixture = try Fixture()
        defer { fixture.shutdown() }
        let hub = try await fixture.startHub(app: "counter")
        let replica = try await Replica.attach(app: CounterApp(), socketPath: fixture.socket, reconnect: .never, timeout: .seconds(10))
        defer { replica.close() }
        #expect(try await replica.dispatch(.increment) == 1)
        // A hub that answers nothing (stopped): each wait is cancelled while it waits.
        hub.signal(SIGSTOP)
        defer { hub.signal(SIGCONT) }
        func cancelled<T: Sendable>(_ what: String, _ body: @escaping @Sendable () async throws -> T) async {
            let task = Task { try await body() }
            // Most likely waiting by then (the hub never answers); cancelled either way.
            try? await Task.sleep(for: .milliseconds(100))
            let start = ContinuousClock.now
            task.cancel()
            let result = await task.result
            guard case .failure(let error) = result, case .cancelled? = error as? ReplicaError else {
                Issue.record("\(what): expected cancelled, got \(result)")
                return
            }
            #expect(ContinuousClock.now - start < .seconds(5), "\(what)")
        }
        await cancelled("dispatch") { try await replica.dispatch(.increment) }
        await cancelled("status") { try await replica.status() }
        await cancelled("sync") { try await replica.sync() }
        await cancelled("attach") {
            try await Replica.attach(app: CounterApp(), socketPath: fixture.socket, reconnect: .never, timeout: .seconds(60))
        }
        // Already cancelled: nothing is sent.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await replica.dispatch(.decrement)
        }
        guard case .failure(let error) = await early.result, case .cancelled? = error as? ReplicaError else {
            Issue.record("a dispatch in a cancelled task must not be sent")
            return
        }
        // The hub goes on: the cancelled dispatch (sent before its wait was cancelled) is
        // applied once; the decrement never went; later answers still reach their callers.
        hub.signal(SIGCONT)
        try await replica.sync()
        // The cancelled increment was sent when its wait began (unless the cancel came first,
        // on a very slow machine): applied once at most, and the decrement never.
        let count = replica.store.state.count
        #expect(count == 2 || count == 1, "\(count)")
        #expect(try await replica.status().seq == UInt64(count))
        #expect(try await replica.dispatch(.increment) == UInt64(count + 1))
    }

    @Test("the link's life is an AsyncSequence that ends with the replica")
    func linkChanges() async throws {
        let hub = try InProcessHub(CounterApp())
        defer { Task { try? await hub.stop() } }    // also when an expectation fails early
        let replica = try hub.attach()
        defer { replica.close() }
        let changes = replica.linkChanges()
        try await hub.stop()
        let collected = try await withDeadline("the link changes to finish") {
            var all: [ConnectionChange] = []
            for await change in changes { all.append(change) }
            return all
        }
        #expect(collected.isEmpty, "a replica that does not reconnect ends without changes: \(collected)")
        #expect(!replica.isConnected)
    }

    @Test("ReplicaModel: state and link change on the main actor, observably; dispatch returns the seq")
    @MainActor
    func mainActorModel() async throws {
        let hub = try InProcessHub(CounterApp())
        defer { Task { try? await hub.stop() } }    // also when an expectation fails early
        let replica = try hub.attach()
        defer { replica.close() }
        let model = ReplicaModel(replica)
        let told = Atomic<Bool>(false)
        _ = withObservationTracking { model.state.count } onChange: { told.store(true, ordering: .releasing) }
        #expect(try await model.dispatch(.increment) == 1)
        try await waitOnMain("the model to show the new state on the main actor") { model.state.count == 1 }
        let wasTold = told.load(ordering: .acquiring)
        #expect(wasTold)
        // Two-way binding: setting dispatches through the store.
        let limit = model.binding(\.limitText, send: CounterApp.Action.setLimitText)
        limit.set("4")
        try await waitOnMain("the binding's action to come back") { limit.get() == "4" }
        #expect(model.linkState == .connected)
        try await hub.stop()
        try await waitOnMain("the model to show the ended link") {
            if case .disconnected = model.linkState { true } else { false }
        }
        replica.close()
    }
}

/// A listening socket that never answers (a hung hub): connections wait in its backlog.
struct UnixSocketListener: Sendable {
    let path: String
    private let socket: ListeningSocket

    init(path: String) throws {
        self.path = path
        socket = try UnixSocket.listen(at: path)
    }

    func close() { _ = socket.close() }
}

/// `waitUntil` for conditions that read main-actor state: checked on the main actor, which is
/// free between checks (the model's hops run then).
@MainActor
func waitOnMain(_ what: String, timeout: Duration = .seconds(30), _ condition: () -> Bool) async throws {
    let deadline = ContinuousClock.now + scaled(timeout)
    while !condition() {
        guard ContinuousClock.now < deadline else { throw HarnessError("timed out waiting for \(what)") }
        try await Task.sleep(for: .milliseconds(5))
    }
}
