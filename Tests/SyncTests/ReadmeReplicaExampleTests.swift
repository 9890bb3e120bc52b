import Testing

// docs/YOUR-APP.md's "A replica in your process" example, compiled and run as a test.
// Keep the lines between BEGIN and END identical to the page (ReadmeSyncTests checks them).

// BEGIN docs/YOUR-APP.md replica example
import BuiltinApps
import StoreReplica

func followCounter(socketPath: String) async throws -> Int {
    // Attach: connect, say hello, get the hub's state as of the welcome.
    let replica = try Replica.attach(app: CounterApp(), socketPath: socketPath, name: "example")
    defer { replica.close() }

    // The local store has the StoreCore API; remote actions notify it like local ones.
    let token = replica.store.subscribe(to: { $0.count }) { count in print("count is now \(count)") }
    defer { token.cancel() }

    // Send an action upstream and wait until the hub has sequenced it and it is applied here.
    let seq = try await replica.dispatch(.increment)
    print("increment got seq \(seq)")

    // Thunks run here only; the plain actions they dispatch go to the hub.
    replica.store.dispatch(CounterApp.step)
    try await replica.sync()                  // read your own writes

    do {
        try await replica.dispatch(json: ["type": "jump"])   // the hub refuses what it cannot decode
    } catch {
        print("refused: \(error)")            // refused: bad-action: unknown counter action "jump"; …
    }
    return replica.store.state.count
}
// END docs/YOUR-APP.md replica example

@Test("docs/YOUR-APP.md's replica example does what the page says")
func readmeReplicaExampleRuns() async throws {
    let hub = try InProcessHub(CounterApp())
    #expect(try await followCounter(socketPath: hub.fixture.socket) == 2)
    try await hub.stop()
}
