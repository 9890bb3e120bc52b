import Foundation
import StoreReplica
import StoreSyncTesting
import SyncCore
import TallyApp
import Testing

@Suite("Tally: the reducer, exhaustively")
struct TallyReducerTests {
    @Test("every action's exact change; an empty name is refused and changes nothing")
    func exhaustive() {
        let store = TestStore(initialState: Tally().initialState, reducer: Tally())
        store.send(.add(name: "coffee", amount: 2)) { $0.counts["coffee"] = 2 }
        store.send(.add(name: "coffee", amount: -1)) { $0.counts["coffee"] = 1 }
        store.sendRefused(.add(name: "", amount: 1)) { #expect($0 == .emptyName) }
        store.sendRefused(.add(name: "coffee", amount: Int.max)) { #expect($0 == .outOfRange) }
        store.send(.reset(at: 1_700_000_000)) {
            $0.counts = [:]
            $0.resetAt = 1_700_000_000
        }
    }

    @Test("deterministic, also through the wire; actions are readable JSON")
    func deterministic() {
        let actions: [Tally.Action] = [.add(name: "tea", amount: 3), .add(name: "é", amount: 1), .reset(at: 12), .add(name: "tea", amount: 1)]
        #expect(DeterminismCheck.check(Tally(), actions: actions) == nil)
        #expect(Tally().encodeAction(.add(name: "tea", amount: 3)) == ["type": "add", "name": "tea", "amount": 3])
    }

    @Test("the table of cases decodes what Codable writes (each entry is checked against it in debug builds)")
    func taggedCases() throws {
        #expect(!Tally.Action.taggedCases.isEmpty)
        for action in [Tally.Action.add(name: "tea", amount: -2), .reset(at: 1_700_000_000.5)] {
            #expect(try Tally().decodeAction(Tally().encodeAction(action)) == action)
        }
        #expect(throws: AppCodingError.self) { try Tally().decodeAction(["type": "add", "name": "tea"]) }
    }
}

@Suite("Tally: its own daemon and CLI, as processes", .serialized, .timeLimit(.minutes(2)))
struct TallyProcessTests {
    @Test("tally-hub serves; tally-cli dispatches with the shorthand; a library replica converges")
    func endToEnd() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tally-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let socket = directory.appendingPathComponent("hub.sock").path
        let hub = try await startHub(in: directory, ["--data-dir", directory.appendingPathComponent("data").path])
        defer { stop(hub) }
        let dispatched = try await run("tally-cli", ["--socket", socket, "dispatch", "add coffee 2", "add tea"])
        #expect(dispatched.status == 0)
        #expect(dispatched.out == "1\n2\n")
        let replica = try await Replica.attach(app: Tally(), socketPath: socket, reconnect: .never, timeout: .seconds(10))
        defer { replica.close() }
        #expect(replica.store.state.counts == ["coffee": 2, "tea": 1])
        #expect(try await replica.dispatch(.add(name: "coffee", amount: 1)) == 3)
        let state = try await run("tally-cli", ["--socket", socket, "state"])
        #expect(state.out.contains(#""coffee":3"#), "\(state.out)")
        let status = try HubConnection.status(at: socket)
        #expect(status.app == "tally" && status.seq == 3)
        #expect(status.digest == Tally().digest(of: replica.store.state))
    }

    // BEGIN docs/YOUR-APP.md tally convergence example
    @Test("converges across processes with every fault")
    func converges() async throws {
        let harness = ConvergenceHarness(app: Tally(), hub: try builtExecutable("tally-hub"), cli: try builtExecutable("tally-cli"))
        let report = try await harness.run { random, replica in
            random.next() % 10 == 0
                ? .reset(at: Double(random.next() % 1_000_000))    // even a "clock" comes from the seed
                : .add(name: ["tea", "coffee", "water"][Int(random.next() % 3)], amount: Int(random.next() % 5) + 1)
        }
        #expect(report.seq > 0, "\(report)")   // on failure: the seed and the first diverging seq
    }
    // END docs/YOUR-APP.md tally convergence example

    @Test("a main-actor model over a replica of the tally, and a screen that holds one")
    @MainActor
    func mainActorModel() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("tally-model-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let socket = directory.appendingPathComponent("hub.sock").path
        let hub = try await startHub(in: directory)
        defer { stop(hub) }
        // BEGIN docs/YOUR-APP.md tally model example
        let replica = try await Replica.attach(app: Tally(), socketPath: socket, timeout: .seconds(5))
        defer { replica.close() }
        let model = ReplicaModel(replica)                  // @MainActor, Observable: hold it in a view
        let seq = try await model.dispatch(.add(name: "tea", amount: 2))
        while model.state.counts["tea"] != 2 {             // state changes on the main actor only
            try await Task.sleep(for: .milliseconds(5))
        }
        // END docs/YOUR-APP.md tally model example
        #expect(seq == 1)
        #expect(model.linkState == .connected)
        let screen = TallyScreen(replica: replica)
        #expect(try await screen.addCoffee() == 2)
        while screen.model.state.counts["coffee"] != 1 {
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(screen.model.state.counts == ["tea": 2, "coffee": 1])
    }

    /// Starts tally-hub on `directory/hub.sock` (the directory is created) and waits until it serves.
    private func startHub(in directory: URL, _ arguments: [String] = []) async throws -> Process {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let socket = directory.appendingPathComponent("hub.sock").path
        let hub = try start("tally-hub", ["--socket", socket] + arguments)
        let deadline = ContinuousClock.now + .seconds(30)
        while (try? HubConnection.status(at: socket)) == nil {
            guard ContinuousClock.now < deadline, hub.isRunning else {
                stop(hub)
                throw TallyTestError("tally-hub did not start")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        return hub
    }

    /// Kills a child by PID and reaps it.
    private func stop(_ process: Process) {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    private func start(_ name: String, _ arguments: [String]) throws -> Process {
        let process = Process()
        process.executableURL = try builtExecutable(name)
        process.arguments = arguments
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }

    private func run(_ name: String, _ arguments: [String]) async throws -> (status: Int32, out: String) {
        let process = Process()
        process.executableURL = try builtExecutable(name)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }
}

struct TallyTestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
