import BuiltinApps
import Foundation
import StoreHub
import StoreReplica
import SyncCore
import SyncPOSIX
import SyncLocks
import Synchronization
import Testing

/// A hub running on a thread of its own in this process, on a temp socket.
final class InProcessHub<App: SyncApp>: Sendable {
    let hub: Hub<App>
    let fixture: Fixture
    private let done = Atomic<Bool>(false)

    init(_ app: App, maxFrameBytes: Int = Frame.defaultMaxPayloadBytes,
         configure: (inout HubConfiguration) -> Void = { _ in }) throws {
        fixture = try Fixture()
        var configuration = HubConfiguration(socketPath: fixture.socket, maxFrameBytes: maxFrameBytes)
        configure(&configuration)
        hub = try Hub(app: app, configuration: configuration)
        let hub = self.hub
        Thread.detachNewThread { [self] in
            try? hub.run()
            done.store(true, ordering: .releasing)
        }
    }

    /// Attaches a replica; by default it does not reconnect, so a stopped hub ends it.
    func attach(name: String? = nil, middleware: [Middleware<App.State, App.Action>] = [.thunk],
                reconnect: ReconnectPolicy = .never) throws -> Replica<App> {
        try Replica.attach(app: hub.app, socketPath: fixture.socket, name: name, middleware: middleware, reconnect: reconnect)
    }

    /// Whether the hub's thread is still inside `run`.
    var isRunning: Bool { !done.load(ordering: .acquiring) }

    func stop() async throws {
        hub.stop()
        try await waitUntil("the hub thread to finish") { done.load(ordering: .acquiring) }
        fixture.shutdown()
    }
}

@Suite("StoreReplica library (hub in-process)")
struct ReplicaLibraryTests {
    @Test("status says upgradable_to when the hub serves an older version of its app than it carries, and nothing otherwise")
    func upgradableTo() async throws {
        let older = try InProcessHub(TodosV1App()) { $0.versions = TodosApp().versions }
        let status = try HubConnection.status(at: older.fixture.socket)
        #expect(status.fingerprint == "todos@1" && status.upgradableTo == "todos@2")
        try await older.stop()
        let newest = try InProcessHub(JSONApp())
        #expect(try HubConnection.status(at: newest.fixture.socket).upgradableTo == nil)
        try await newest.stop()
    }

    @Test("dispatch returns the seq once applied; a refusal throws the hub's code and message")
    func dispatchAndReject() async throws {
        let hub = try InProcessHub(JSONApp())
        let replica = try hub.attach(name: "lib")
        #expect(replica.welcomeSeq == 0)
        #expect(try await replica.dispatch(.set(try JSONPointer("/a"), 1)) == 1)
        #expect(replica.store.state == ["a": 1])
        #expect(replica.seq == 1)
        await #expect(throws: ReplicaError.rejected(WireError(.rejected, "increment /a/b: cannot descend into /a: it is a number, not an object or array"))) {
            try await replica.dispatch(.increment(try JSONPointer("/a/b"), by: 1))
        } 
        do {
            try await replica.dispatch(json: ["type": "frobnicate"])
            Issue.record("expected a refusal")
        } catch {
            #expect(error.wireError?.code == .badAction)
        }
        #expect(replica.store.state == ["a": 1])
        #expect(replica.seq == 1)
        replica.close()
        try await hub.stop()
    }

    @Test("actions from another replica notify subscribers and selectors exactly like local ones")
    func remoteActionsNotify() async throws {
        let hub = try InProcessHub(CounterApp())
        let a = try hub.attach(name: "a")
        let b = try hub.attach(name: "b")
        let seen = Locked<[Int]>([])
        let token = b.store.subscribe(to: { $0.count }) { count in seen.withLock { $0.append(count) } }
        try await a.dispatch(.increment)
        try await a.dispatch(.setLimitText("5"))   // does not change the count: the selector stays quiet
        try await a.dispatch(.increment)
        try await b.sync()
        #expect(seen.withLock { $0 } == [1, 2])
        #expect(b.store.state == a.store.state)
        #expect(b.store.state == CounterApp.State(count: 2, isIncrementing: true, limitText: "5"))
        token.cancel()
        a.close(); b.close()
        try await hub.stop()
    }

    @Test("thunks and middleware run only in the dispatching replica; only plain actions travel")
    func thunksRunOnce() async throws {
        let hub = try InProcessHub(CounterApp())
        let runs = Locked<[String]>([])
        func spy(_ name: String) -> Middleware<CounterApp.State, CounterApp.Action> {
            Middleware { _, next, input in
                runs.withLock { $0.append("\(name):\(input.action.map { "\($0)" } ?? "thunk")") }
                next(input)
            }
        }
        let a = try hub.attach(middleware: [spy("a"), .thunk])
        let b = try hub.attach(middleware: [spy("b"), .thunk])
        try await a.dispatch(.setLimitText("1"))
        a.store.dispatch(CounterApp.step)   // count 0 < limit 1: increments
        try await a.sync()
        a.store.dispatch(CounterApp.step)   // count 1, limit 1: nothing
        try await a.sync()
        try await b.sync()
        #expect(runs.withLock { $0 } == ["a:thunk", "a:increment", "a:thunk"])
        #expect(b.store.state.count == 1)
        #expect(a.store.state == b.store.state)
        a.close(); b.close()
        try await hub.stop()
    }

    @Test("a late joiner is hydrated from the welcome and follows on without a gap")
    func lateJoiner() async throws {
        let hub = try InProcessHub(TodosApp())
        let a = try hub.attach()
        for i in 0..<50 {
            try await a.dispatch(.add(id: "t\(i)", title: "todo \(i)", createdAt: Double(i)))
        }
        let late = try hub.attach()
        #expect(late.welcomeSeq == 50)
        #expect(late.store.state == a.store.state)
        let events = late.events()
        try await a.dispatch(.toggle(id: "t3"))
        let first = try await withDeadline("the late joiner's first action event") { () -> (UInt64, TodosApp.Action)? in
            for await event in events {
                if case .action(let seq, _, _, let action, _, _) = event { return (seq, action) }
            }
            return nil
        }
        let (seq, action) = try #require(first, "the event stream ended without an action")
        #expect(seq == 51)
        #expect(action == .toggle(id: "t3"))
        #expect(late.store.state.todos[3].completed)
        a.close(); late.close()
        try await hub.stop()
    }

    @Test("the hub refuses a replica running another app")
    func appMismatch() async throws {
        let hub = try InProcessHub(CounterApp())
        #expect(throws: ReplicaError.self) {
            _ = try Replica.attach(app: JSONApp(), socketPath: hub.fixture.socket)
        }
        do {
            _ = try Replica.attach(app: JSONApp(), socketPath: hub.fixture.socket)
            Issue.record("a replica of another app must not attach")
        } catch {
            #expect(error.wireError?.code == .appMismatch)
        }
        try await hub.stop()
    }

    @Test("when the hub stops, the replica learns it and waiting dispatches fail")
    func hubGoes() async throws {
        let hub = try InProcessHub(CounterApp())
        let replica = try hub.attach()
        try await replica.dispatch(.increment)
        try await hub.stop()
        let reason = await replica.waitUntilDisconnected()
        #expect(reason.wireError?.code == .shuttingDown)
        #expect(!replica.isConnected)
        await #expect(throws: ReplicaError.self) { try await replica.dispatch(.increment) }
        #expect(replica.store.state.count == 1)
    }

    @Test("no hub: attach fails with a message naming the path")
    func noHub() throws {
        let fixture = try Fixture()
        defer { fixture.shutdown() }
        do {
            _ = try Replica.attach(app: CounterApp(), socketPath: fixture.socket)
            Issue.record("attach should fail")
        } catch {
            guard case .noHub(let message) = error else { Issue.record("unexpected \(error)"); return }
            #expect(message.contains(fixture.socket))
        }
    }
}
