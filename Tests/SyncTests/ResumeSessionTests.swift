import BuiltinApps
import Dispatch
import Foundation
import Observation
@testable import StoreHub
import StoreReplica
import StoreSyncTesting
import SyncCore
import SyncPOSIX
import SyncLocks
import Synchronization
import Testing

/// A raw `hello` for the json app, with optional resume and session.
private func hello(resume: JSON? = nil, session: JSON? = nil) -> JSON {
    var members: [JSONKey: JSON] = ["type": "hello", "protocol": 1, "app": "json"]
    if let resume { members["resume"] = resume }
    if let session { members["session"] = session }
    return .object(members)
}

/// Dispatches `count` json-app sets from a raw attached client and reads their actions back.
private func dispatchSets(_ client: RawClient, from first: Int, count: Int) throws {
    for n in first..<(first + count) {
        try client.send(["type": "dispatch", "id": JSON(n), "action": ["type": "set", "path": "/n", "value": JSON(n)]])
    }
    var seen = 0
    while seen < count {
        if try client.receive()["type"] == "action" { seen += 1 }
    }
}

/// A reducer that is not deterministic across processes: each copy adds its own `salt`
/// (as a reducer reading a clock, a random source or a global would).
struct DriftApp: SyncApp {
    typealias State = Int
    typealias Action = Int
    let salt: Int
    static let name = "drift"
    static let version = "1"
    static let summary = "test app: adds n plus a per-copy salt"
    static let commandHelp = "n"
    var initialState: Int { 0 }
    func reduce(into state: inout Int, action: Int) { state += action + salt }
    func decodeAction(_ json: JSON) throws(AppCodingError) -> Int {
        guard let n = json["n"]?.intValue else { throw AppCodingError("an action is {\"n\":integer}") }
        return n
    }
    func encodeAction(_ action: Int) -> JSON { ["n": JSON(action)] }
    func encodeState(_ state: Int) -> JSON { JSON(state) }
    func decodeState(_ json: JSON) throws(AppCodingError) -> Int {
        guard let n = json.intValue else { throw AppCodingError("the state is an integer") }
        return n
    }
    func describe(_ failure: Never) -> String {}
    func command(_ line: String) throws(AppCodingError) -> AppCommand<Int, Int> {
        guard let n = Int(line) else { throw AppCodingError("type an integer") }
        return .action(encodeAction(n))
    }
}

extension MultiProcessTests {
    @Suite("Resume, sessions, checkpoints and idle clients")
    struct ResumeSessions {
        @Test("resume inside the backlog replays exactly the missed actions; at the hub's seq nothing; otherwise a full welcome")
        func resumeCases() async throws {
            let hub = try InProcessHub(JSONApp())
            defer { Task { try? await hub.stop() } }
            let writer = try RawClient(path: hub.fixture.socket)
            defer { writer.close() }
            try writer.send(hello())
            let first = try writer.receive()
            #expect(first["resumed"] == false)
            guard let history = first["history"]?.stringValue else { throw HarnessError("welcome without history: \(first)") }
            #expect(history.utf8.count == 16)
            try dispatchSets(writer, from: 1, count: 5)

            // Within the backlog: a resumed welcome without state, then seqs 3, 4, 5.
            let resumer = try RawClient(path: hub.fixture.socket)
            defer { resumer.close() }
            try resumer.send(hello(resume: ["history": .string(history), "seq": 2]))
            let resumed = try resumer.receive()
            #expect(resumed["type"] == "welcome")
            #expect(resumed["resumed"] == true)
            #expect(resumed["seq"] == 2)
            #expect(resumed["state"] == nil && resumed["digest"] == nil, "\(resumed)")
            #expect(resumed["history"] == .string(history))
            for seq in 3...5 {
                let action = try resumer.receive()
                #expect(action["type"] == "action" && action["seq"] == JSON(seq), "\(action)")
            }
            try resumer.send(["type": "sync", "id": "s"])
            #expect(try resumer.receive()["type"] == "synced", "nothing else was replayed")

            // At the hub's seq: resumed, nothing replayed.
            let current = try RawClient(path: hub.fixture.socket)
            defer { current.close() }
            try current.send(hello(resume: ["history": .string(history), "seq": 5]))
            let atSeq = try current.receive()
            #expect(atSeq["resumed"] == true && atSeq["seq"] == 5)
            try current.send(["type": "sync"])
            #expect(try current.receive()["type"] == "synced")

            // Another history, or the future: a full welcome.
            for resume: JSON in [["history": "0123456789abcdef", "seq": 2], ["history": .string(history), "seq": 9]] {
                let client = try RawClient(path: hub.fixture.socket)
                defer { client.close() }
                try client.send(hello(resume: resume))
                let full = try client.receive()
                #expect(full["resumed"] == false && full["seq"] == 5 && full["state"] == ["n": 5], "\(full)")
            }
            // Malformed resume or session: bad-frame; a session of the wrong length: bad-hello.
            for (bad, code): (JSON, JSON) in [(hello(resume: ["seq": 1]), "bad-frame"),
                                              (hello(resume: ["history": "h", "seq": -1]), "bad-frame"),
                                              (hello(session: 7), "bad-frame"), (hello(session: ""), "bad-hello"),
                                              (hello(session: .string(String(repeating: "s", count: 129))), "bad-hello")] {
                let client = try RawClient(path: hub.fixture.socket)
                defer { client.close() }
                try client.send(bad)
                let error = try client.receive()
                #expect(error["type"] == "error" && error["error"]?["code"] == code, "\(bad) → \(error)")
            }
        }

        @Test("a resume further back than the backlog gets a full welcome")
        func resumePastBacklog() async throws {
            let hub = try InProcessHub(JSONApp()) { configuration in
                configuration.retainedActions = 3
                configuration.backlogBytes = 1
            }
            defer { Task { try? await hub.stop() } }
            let writer = try RawClient(path: hub.fixture.socket)
            defer { writer.close() }
            try writer.send(hello())
            let history = try writer.receive()["history"]?.stringValue ?? ""
            try dispatchSets(writer, from: 1, count: 10)
            let late = try RawClient(path: hub.fixture.socket)
            defer { late.close() }
            try late.send(hello(resume: ["history": .string(history), "seq": 2]))
            let full = try late.receive()
            #expect(full["resumed"] == false && full["seq"] == 10 && full["state"] == ["n": 10], "\(full)")
            let near = try RawClient(path: hub.fixture.socket)
            defer { near.close() }
            try near.send(hello(resume: ["history": .string(history), "seq": 8]))
            let resumed = try near.receive()
            #expect(resumed["resumed"] == true, "the last 3 actions stay resumable: \(resumed)")
        }

        @Test("a session applies each dispatch id once: duplicate with the original seq, also across connections; a newer hello supersedes")
        func sessionsAndDuplicates() async throws {
            let hub = try InProcessHub(JSONApp())
            defer { Task { try? await hub.stop() } }
            let first = try RawClient(path: hub.fixture.socket)
            defer { first.close() }
            try first.send(hello(session: "s-1"))
            #expect(try first.receive()["type"] == "welcome")
            try first.send(["type": "dispatch", "id": 1, "action": ["type": "set", "path": "/a", "value": 1]])
            #expect(try first.receive()["seq"] == 1)
            // The same id again, even with another action: duplicate, not applied.
            try first.send(["type": "dispatch", "id": 1, "action": ["type": "set", "path": "/a", "value": 99]])
            #expect(try first.receive() == ["type": "duplicate", "id": 1, "seq": 1])
            // 1.0 is the same id; "1" is another.
            try first.send(["type": "dispatch", "id": .number(1.0), "action": ["type": "set", "path": "/a", "value": 98]])
            #expect(try first.receive() == ["type": "duplicate", "id": 1, "seq": 1])

            // The same session on a new connection takes it over; the old one is told why.
            let second = try RawClient(path: hub.fixture.socket)
            defer { second.close() }
            try second.send(hello(session: "s-1"))
            #expect(try second.receive()["type"] == "welcome")
            let superseded = try first.receive()
            #expect(superseded["type"] == "error" && superseded["error"]?["code"] == "superseded", "\(superseded)")
            #expect(try first.receiveOrEOF() == nil)
            try second.send(["type": "dispatch", "id": 1, "action": ["type": "set", "path": "/a", "value": 97]])
            #expect(try second.receive() == ["type": "duplicate", "id": 1, "seq": 1])
            try second.send(["type": "dispatch", "id": "1", "action": ["type": "set", "path": "/b", "value": 2]])
            #expect(try second.receive()["seq"] == 2)
            // A rejected dispatch is judged again when re-sent.
            try second.send(["type": "dispatch", "id": 3, "action": ["type": "nope"]])
            #expect(try second.receive()["type"] == "reject")
            try second.send(["type": "dispatch", "id": 3, "action": ["type": "set", "path": "/c", "value": 3]])
            #expect(try second.receive()["seq"] == 3)
            // Without a session there is no de-duplication.
            let plain = try RawClient(path: hub.fixture.socket)
            defer { plain.close() }
            try plain.send(hello())
            #expect(try plain.receive()["type"] == "welcome")
            try plain.send(["type": "dispatch", "id": 1, "action": ["type": "set", "path": "/d", "value": 4]])
            #expect(try plain.receive()["seq"] == 4)
            try second.send(["type": "status"])
            var status = try second.receive()
            while status["type"] != "status" { status = try second.receive() }
            #expect(status["seq"] == 4)
        }

        @Test("a checkpoint with the hub's digest follows every Nth action, also in a resume's replay")
        func checkpoints() async throws {
            let hub = try InProcessHub(JSONApp()) { $0.checkpointEvery = 2 }
            defer { Task { try? await hub.stop() } }
            let client = try RawClient(path: hub.fixture.socket)
            defer { client.close() }
            try client.send(hello())
            let history = try client.receive()["history"] ?? .null
            var digests: [Int: String] = [:]
            for n in 1...4 {
                try client.send(["type": "dispatch", "id": JSON(n), "action": ["type": "set", "path": "/n", "value": JSON(n)]])
                #expect(try client.receive()["seq"] == JSON(n))
                if n % 2 == 0 {
                    let checkpoint = try client.receive()
                    #expect(checkpoint["type"] == "checkpoint" && checkpoint["seq"] == JSON(n), "\(checkpoint)")
                    digests[n] = checkpoint["digest"]?.stringValue
                }
            }
            #expect(digests[4] == Digest.of(["n": 4]))
            let resumer = try RawClient(path: hub.fixture.socket)
            defer { resumer.close() }
            try resumer.send(hello(resume: ["history": history, "seq": 1]))
            #expect(try resumer.receive()["resumed"] == true)
            // Seqs 2 (checkpoint), 3, 4 (checkpoint).
            let replay = try (0..<5).map { _ in try resumer.receive() }
            #expect(replay.map { $0["type"] } == ["action", "checkpoint", "action", "action", "checkpoint"])
            #expect(replay[4]["digest"] == .string(digests[4] ?? ""))
            #expect(replay[1]["digest"] == .string(digests[2] ?? ""))
        }

        @Test("a replica whose reducer drifts is caught by a checkpoint and heals by re-hydrating")
        func divergenceHealed() async throws {
            let hub = try InProcessHub(DriftApp(salt: 0)) { $0.checkpointEvery = 2 }
            defer { Task { try? await hub.stop() } }
            let replica = try Replica.attach(app: DriftApp(salt: 1), socketPath: hub.fixture.socket, startReading: false,
                                             reconnect: ReconnectPolicy(initialDelay: .milliseconds(5)))
            defer { replica.close() }
            let changes = Locked<[ConnectionChange]>([])
            let token = replica.observeEvents { event in
                if case .connection(let change) = event { changes.withLock { $0.append(change) } }
            }
            defer { token.cancel() }
            replica.startReading()
            try await replica.dispatch(10)
            try await replica.dispatch(20)   // seq 2: checkpoint; here 32, at the hub 30
            try await waitUntil("the replica to re-hydrate") {
                changes.withLock { $0.contains { if case .rehydrated = $0 { true } else { false } } }
            }
            #expect(replica.divergences == 1)
            #expect(replica.store.state == 30, "the hub's state replaced the drifted one")
            let seen = changes.withLock { $0 }
            guard case .diverged(let seq, let reason)? = seen.first else {
                Issue.record("the first change is the divergence: \(seen)")
                return
            }
            #expect(seq == 2)
            #expect(reason.contains("checkpoint"))
            // Its status reports the last agreement, the re-hydrated state at seq 2, and the divergence.
            let status = try await replica.status()
            let own = status.replicas.first { $0.replica == replica.replicaID }
            #expect(own?.checked == DigestCheck(seq: 2, agreed: true, divergences: 1), "\(status.replicas)")
        }

        @Test("a replica reports its last agreeing digest comparison with each status, and the hub lists it")
        func checkedReported() async throws {
            let hub = try InProcessHub(JSONApp()) { $0.checkpointEvery = 3 }
            defer { Task { try? await hub.stop() } }
            let writer = try hub.attach()
            defer { writer.close() }
            let reader = try hub.attach()
            defer { reader.close() }
            // Attached from a checked full welcome at seq 0.
            var own = try await reader.status().replicas.first { $0.replica == reader.replicaID }
            #expect(own?.checked == DigestCheck(seq: 0, agreed: true, divergences: 0))
            for n in 1...4 { try await writer.dispatch(.set(try JSONPointer("/n"), JSON(n))) }
            try await waitUntil("the reader to apply seq 4") { reader.seq == 4 }
            // The checkpoint at seq 3 is the newest comparison, unless the reader's own
            // once-a-second digest check (a status at seq 4) came first on a slow machine.
            own = try await reader.status().replicas.first { $0.replica == reader.replicaID }
            #expect([3, 4].contains(own?.checked?.seq ?? 0) && own?.checked?.agreed == true && own?.checked?.divergences == 0,
                    "\(String(describing: own))")
            // A bare client (it applies nothing) reports nothing, and sees the others' reports.
            let observer = try HubConnection.status(at: hub.fixture.socket)
            #expect(observer.replicas.count == 2)
            #expect(observer.replicas.last?.checked == own?.checked)
        }

        @Test("idle clients: nothing, half a frame, or no hello are closed with timeout; a listening replica is not")
        func idleClients() async throws {
            let hub = try InProcessHub(JSONApp()) { $0.idleTimeout = .milliseconds(300) }
            defer { Task { try? await hub.stop() } }
            let replica = try hub.attach()
            defer { replica.close() }
            let silent = try RawClient(path: hub.fixture.socket)
            defer { silent.close() }
            let half = try RawClient(path: hub.fixture.socket)
            defer { half.close() }
            try half.sendBytes([0, 0, 0, 40, UInt8(ascii: "{")])
            for client in [silent, half] {
                let error = try client.receive()
                #expect(error["type"] == "error" && error["error"]?["code"] == "timeout", "\(error)")
                #expect(try client.receiveOrEOF() == nil)
            }
            #expect(replica.isConnected)
            #expect(try await replica.dispatch(.set(try JSONPointer("/ok"), 1)) == 1)
            // A thousand silent connections: the hub stays responsive, and closes them all.
            let crowd = try (0..<1_000).map { _ in try RawClient(path: hub.fixture.socket) }
            defer { for client in crowd { client.close() } }
            #expect(try await replica.dispatch(.set(try JSONPointer("/crowd"), 1)) == 2)
            for client in crowd {
                var message = try client.receiveOrEOF()
                if message?["type"] == "error" { message = try client.receiveOrEOF() }
                #expect(message == nil)
            }
            let status = try await replica.status()
            #expect(status.replicas.first?.lag == 0)
            #expect(status.replicas.first?.queuedBytes == 0)
        }

        @Test("crash loop with replicas that come back by themselves: kill -9 twenty times, every dispatch applied exactly once, in order",
              arguments: [["--fsync", "always"], ["--fsync", "batch"],
                          // More dispatches outstanding than the hub remembers per session: a
                          // resume must re-send only what its replay did not acknowledge.
                          ["--fsync", "batch", "--dedup-window", "5"]])
        func replicasRideCrashLoop(flags: [String]) async throws {
            let mode = flags.joined(separator: " ")
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            let seed = UInt64.random(in: 0...UInt64.max)
            var random = SplitMix64(seed: seed)
            var hub = try await fixture.startHub(extra: ["--data-dir", data] + flags)
            let policy = ReconnectPolicy(initialDelay: .milliseconds(5), maxDelay: .milliseconds(100))
            let replicas = try (0..<3).map { k in
                try Replica.attach(app: JSONApp(), socketPath: fixture.socket, name: "r\(k)", reconnect: policy,
                                   onDispatchFailure: { error, json in Issue.record("seed \(seed): \(error) for \(json)") })
            }
            defer { for replica in replicas { replica.close() } }
            let perRound = 10, rounds = 20
            for round in 0..<rounds {
                // Fire-and-forget, in order: many outstanding when the hub dies.
                for (k, replica) in replicas.enumerated() {
                    for n in (round * perRound + 1)...((round + 1) * perRound) {
                        try replica.send(json: ["type": "append", "path": .string("/r\(k)"), "value": JSON(n)])
                    }
                }
                // A random moment: anywhere from before the first ack to after the last.
                try await Task.sleep(for: .microseconds(Int(random.next() % 20_000)))
                hub.signal(SIGKILL)
                _ = try await hub.waitForExit()
                hub = try await fixture.startHub(extra: ["--data-dir", data] + flags)
            }
            let total = perRound * rounds
            let expected = JSON.array((1...total).map { JSON($0) })
            try await waitUntil("seed \(seed), \(mode): every replica to hold every dispatch", timeout: .seconds(60)) {
                replicas.allSatisfy { replica in (0..<3).allSatisfy { replica.store.state["r\($0)"] == expected } }
            }
            let status = try HubStatusProbe.status(fixture.socket)
            #expect(status.seq == UInt64(3 * total), "seed \(seed): seq \(status.seq); each dispatch applied exactly once")
            for replica in replicas {
                #expect(JSONApp().digest(of: replica.store.state) == status.digest, "seed \(seed)")
                #expect(replica.seq == status.seq)
            }
            hub.signal(SIGTERM)
            #expect(try await hub.waitForExit() == 0)
        }

        @Test("replica-cli watch and attach ride through kill -9 of the hub: one line down, one line back, every seq once")
        func cliRidesRestart() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            var hub = try await fixture.startHub(extra: ["--data-dir", data])
            let watcher = try fixture.cli(["watch"])
            let attached = try fixture.cli(["attach"])
            try await waitUntil("both to attach") { try HubStatusProbe.status(fixture.socket).replicas.count == 2 }
            #expect(try await fixture.runCLI(["dispatch", "set /a 1", "set /b 2"]).out == ["1", "2"])
            _ = try await watcher.waitForLine("seq 2") { $0.contains(#""seq":2"#) }
            hub.signal(SIGKILL)
            _ = try await hub.waitForExit()
            try await waitUntil("watch to report the drop") {
                watcher.errorLines.contains { $0.contains("link to the hub dropped") }
            }
            // A line typed while the hub is down is kept and sent once it is back; attach says so
            // once, without "ask again" (which would apply it twice).
            try await waitUntil("attach to see the drop") { attached.lines.contains { $0.contains("link to the hub dropped") } || attached.errorLines.contains { $0.contains("link to the hub dropped") } }
            attached.write("set /q 9\n")
            let queued = try await attached.waitForLine("attach's queued line") { $0.hasPrefix("queued:") }
            #expect(queued.contains("do not type it again"), "\(queued)")
            #expect(!(attached.lines + attached.errorLines).contains { $0.contains("ask again") }, "\(attached.lines)")
            hub = try await fixture.startHub(extra: ["--data-dir", data])
            try await waitUntil("both to come back") { try HubStatusProbe.status(fixture.socket).replicas.count == 2 }
            _ = try await watcher.waitForLine("seq 3 (the queued line)") { $0.contains(#""seq":3"#) }
            #expect(try await fixture.runCLI(["dispatch", "set /c 3"]).out == ["4"])
            _ = try await watcher.waitForLine("seq 4") { $0.contains(#""seq":4"#) }
            let seqs = watcher.lines.compactMap { line in (try? JSON(parsing: line))?["seq"]?.intValue }
            #expect(seqs == [1, 2, 3, 4], "watch prints every seq exactly once: \(watcher.lines)")
            #expect(try await fixture.runCLI(["state"]).out == [#"{"a":1,"b":2,"c":3,"q":9}"#])
            #expect(watcher.errorLines.filter { $0.contains("link to the hub dropped") }.count == 1, "\(watcher.errorLines)")
            #expect(watcher.errorLines.contains { $0.contains("link back: resumed at seq 2") }, "\(watcher.errorLines)")
            _ = try await attached.waitForLine("attach's link back line") { $0.contains("link back: resumed at seq 2") }
            #expect(watcher.isRunning && attached.isRunning)
            hub.signal(SIGTERM)
            _ = try await hub.waitForExit()
        }

        @Test("a replica dropped as a slow consumer comes back by itself and resumes; nothing missed, nothing twice")
        func slowConsumerResumes() async throws {
            let hub = try InProcessHub(JSONApp()) { $0.maxQueuedBytesPerReplica = 64 << 10 }
            defer { Task { try? await hub.stop() } }
            let slow = try Replica.attach(app: JSONApp(), socketPath: hub.fixture.socket, startReading: false,
                                          reconnect: ReconnectPolicy(initialDelay: .milliseconds(5), maxDelay: .milliseconds(50)))
            defer { slow.close() }
            let gate = DispatchSemaphore(value: 0)
            let seqs = Locked<[UInt64]>([])
            let changes = Locked<[ConnectionChange]>([])
            let token = slow.observeEvents { event in
                switch event {
                case .action(let seq, _, _, _, _, _):
                    // The first action blocks the reader: the replica stops reading.
                    if seqs.withLock({ $0.isEmpty }) { gate.wait() }
                    seqs.withLock { $0.append(seq) }
                case .connection(let change):
                    changes.withLock { $0.append(change) }
                default:
                    break
                }
            }
            defer { token.cancel() }
            slow.startReading()
            // A fast replica that reads all along writes ~2 MB: past the socket buffers and the
            // 64 KiB queue of the replica that stopped reading. It sends 100 actions at a time and
            // waits until it has applied them before the next 100, so what waits for it at the hub
            // is at most 100 action frames (~15 KB), under 64 KiB however loaded the machine is:
            // only the slow replica can reach the limit.
            let fast = try hub.attach()
            defer { fast.close() }
            for batch in stride(from: 1, through: 20_000, by: 100) {
                for n in batch..<(batch + 100) { try fast.send(json: ["type": "set", "path": "/n", "value": JSON(n)]) }
                try await waitUntil("the fast replica to apply seq \(batch + 99)") { fast.seq >= UInt64(batch + 99) }
            }
            try await waitUntil("the hub to drop the slow replica") {
                try HubConnection.status(at: hub.fixture.socket).replicas.count == 1
            }
            gate.signal()
            try await waitUntil("the slow replica to catch up (seq \(slow.seq))") { slow.seq == 20_000 && slow.isConnected }
            #expect(seqs.withLock { $0 } == Array(1...20_000), "every seq once, in order")
            #expect(slow.store.state == ["n": 20_000])
            let seen = changes.withLock { $0 }
            #expect(seen.contains { if case .dropped(let reason) = $0 { reason.contains("slow-consumer") } else { false } }, "\(seen)")
            #expect(seen.contains { if case .resumed = $0 { true } else { false } }, "\(seen)")
        }

        @Test("replica ids are never handed out twice in a history, even to replicas that never dispatched, across kill -9")
        func replicaIDsLeased() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            var seen: Set<Int> = []
            for _ in 0..<3 {
                let hub = try await fixture.startHub(extra: ["--data-dir", data])
                for _ in 0..<2 {
                    let client = try RawClient(path: fixture.socket)
                    defer { client.close() }
                    try client.send(hello())
                    let welcome = try client.receive()
                    guard let replica = welcome["replica"]?.intValue else { throw HarnessError("\(welcome)") }
                    #expect(!seen.contains(replica), "replica id \(replica) handed out twice: \(seen)")
                    seen.insert(replica)
                }
                hub.signal(SIGKILL)
                _ = try await hub.waitForExit()
            }
        }

        @Test("sync and status answer only what is committed: after a refused dispatch on a full disk, they name the durable seq")
        func barrierAfterFailedCommit() async throws {
            let hub = try InProcessHub(JSONApp()) { configuration in
                // Beside the socket, in the fixture's directory (removed with it).
                configuration.dataDirectory = (configuration.socketPath as NSString).deletingLastPathComponent + "/data"
            }
            defer { StorageFaults.writeFailure.withLock { $0 = nil } }
            let client = try RawClient(path: hub.fixture.socket)
            defer { client.close() }
            try client.send(hello())
            _ = try client.receive()
            try client.send(["type": "dispatch", "id": 1, "action": ["type": "set", "path": "/a", "value": 1]])
            #expect(try client.receive()["seq"] == 1)
            StorageFaults.writeFailure.withLock { $0 = ENOSPC }
            // One write: the dispatch is sequenced in memory, then the barrier asks for the seq.
            try client.sendBytes(try Frame.encode(["type": "dispatch", "id": 2, "action": ["type": "set", "path": "/b", "value": 2]])
                                 + Frame.encode(["type": "sync", "id": "s"]) + Frame.encode(["type": "status"]))
            let reject = try client.receive()
            #expect(reject["type"] == "reject" && reject["error"]?["code"] == "unavailable", "\(reject)")
            let synced = try client.receive()
            #expect(synced == ["type": "synced", "id": "s", "seq": 1])
            let status = try client.receive()
            #expect(status["seq"] == 1 && status["storage"]?["unavailable"] != nil, "\(status)")
            StorageFaults.writeFailure.withLock { $0 = nil }
            try await hub.stop()
        }

        @Test("hubd --check-determinism refuses an action a random reducer would diverge on; a deterministic one passes")
        func hubDeterminismCheck() async throws {
            let hub = try InProcessHub(RandomPickApp()) { $0.checkDeterminism = true }
            defer { Task { try? await hub.stop() } }
            let replica = try hub.attach()
            defer { replica.close() }
            do {
                try await replica.dispatch(.pick)
                Issue.record("a reducer calling randomElement() must be refused under --check-determinism")
            } catch {
                #expect(error.wireError?.code == .rejected)
                #expect(error.description.contains("not deterministic"), "\(error)")
            }
            #expect(try await replica.dispatch(.fixed("red")) == 1)
            #expect(replica.store.state == ["red"])
        }

        @Test("a replica rides a hub restart: queued dispatches are applied once, watch-style events see every seq once")
        func replicaRidesRestart() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            var hub = try await fixture.startHub(extra: ["--data-dir", data])
            let replica = try Replica.attach(app: JSONApp(), socketPath: fixture.socket, startReading: false,
                                             reconnect: ReconnectPolicy(initialDelay: .milliseconds(10), maxDelay: .milliseconds(100)))
            defer { replica.close() }
            let seqs = Locked<[UInt64]>([])
            let changes = Locked<[ConnectionChange]>([])
            let token = replica.observeEvents { event in
                switch event {
                case .action(let seq, _, _, _, _, _): seqs.withLock { $0.append(seq) }
                case .connection(let change): changes.withLock { $0.append(change) }
                default: break
                }
            }
            defer { token.cancel() }
            replica.startReading()
            for n in 1...3 { #expect(try await replica.dispatch(.set(try JSONPointer("/n"), JSON(n))) == UInt64(n)) }
            // linkState is observable (a SwiftUI view holding the replica would redraw).
            let told = Atomic<Bool>(false)
            #expect(withObservationTracking { replica.linkState } onChange: { told.store(true, ordering: .releasing) } == .connected)
            hub.signal(SIGKILL)
            _ = try await hub.waitForExit()
            try await waitUntil("the replica to notice") { !replica.isConnected }
            try await waitUntil("linkState's observers to be told") { told.load(ordering: .acquiring) }
            // Dispatched while the hub is down: queued, sent on the same session once it is back.
            let queued = Task { try await replica.dispatch(.set(try JSONPointer("/queued"), 1)) }
            hub = try await fixture.startHub(extra: ["--data-dir", data])
            #expect(try await queued.value == 4)
            #expect(try await replica.dispatch(.set(try JSONPointer("/n"), 5)) == 5)
            try await replica.sync()
            #expect(seqs.withLock { $0 } == [1, 2, 3, 4, 5], "every seq once, in order")
            #expect(replica.store.state == ["n": 5, "queued": 1])
            let seen = changes.withLock { $0 }
            #expect(seen.contains(.resumed(seq: 3)), "\(seen)")
            #expect(try HubStatusProbe.status(fixture.socket).digest == JSONApp().digest(of: replica.store.state))
            hub.signal(SIGTERM)
            _ = try await hub.waitForExit()
        }
    }
}

/// Seed 004's mistake, served by a hub: `pick` chooses a random colour inside the reducer.
struct RandomPickApp: SyncApp {
    typealias State = [String]
    enum Action: Sendable, Equatable {
        case pick
        case fixed(String)
    }
    static let name = "pick"
    static let version = "1"
    var initialState: [String] { [] }
    func reduce(into state: inout [String], action: Action) {
        switch action {
        case .pick: state.append("color-\(UInt64.random(in: 0...UInt64.max))")
        case .fixed(let color): state.append(color)
        }
    }
    func decodeAction(_ json: JSON) throws(AppCodingError) -> Action {
        if let color = json["color"]?.stringValue { return .fixed(color) }
        return .pick
    }
    func encodeAction(_ action: Action) -> JSON {
        switch action {
        case .pick: ["type": "pick"]
        case .fixed(let color): ["type": "fixed", "color": .string(color)]
        }
    }
    func encodeState(_ state: [String]) -> JSON { .array(state.map { .string($0) }) }
    func decodeState(_ json: JSON) throws(AppCodingError) -> [String] { json.arrayValue?.compactMap(\.stringValue) ?? [] }
    func describe(_ failure: Never) -> String {}
    func command(_ line: String) throws(AppCodingError) -> AppCommand<[String], Action> { .action(encodeAction(.pick)) }
}

extension MultiProcessTests {
    @Suite("The convergence harness (StoreSyncTesting) on the built-in apps")
    struct Harness {
        @Test("hubd and replica-cli on the json app: killed replica, late joiner, slow consumer, hub kill -9; every digest equal")
        func jsonAppConverges() async throws {
            let harness = ConvergenceHarness(app: JSONApp(), hub: try builtExecutable("hubd"),
                                             cli: try Executables.url("replica-cli"), hubArguments: ["--app", "json"])
            let report = try await harness.run { random, replica in
                let pointer = (try? JSONPointer("/r\(replica)/\(random.next() % 4)")) ?? .root
                return random.next() % 3 == 0 ? .set(pointer, JSON(Int(random.next() % 100))) : .increment(pointer, by: 1)
            }
            #expect(report.seq >= 3 * 40 - 20, "\(report)")
        }

        @Test("actions the reducer refuses are outcomes: counted in the report, the run finishes at once")
        func refusalsAreCounted() async throws {
            let harness = ConvergenceHarness(app: JSONApp(), hub: try builtExecutable("hubd"),
                                             cli: try Executables.url("replica-cli"), replicas: 2, actionsPerReplica: 20,
                                             faults: [], seed: 7, hubArguments: ["--app", "json"])
            let started = ContinuousClock.now
            let report = try await harness.run { random, replica in
                // About one in four removes a member that is never there: the reducer refuses it.
                let missing = (try? JSONPointer("/never/here")) ?? .root
                let pointer = (try? JSONPointer("/r\(replica)")) ?? .root
                return random.next() % 4 == 0 ? .remove(missing) : .increment(pointer, by: 1)
            }
            #expect(report.refused > 0, "\(report)")
            #expect(report.seq + UInt64(report.refused) == 40, "\(report)")
            // Not the 120 s the harness once waited for answers that never come.
            #expect(ContinuousClock.now - started < .seconds(60))
        }

        @Test("the counter app, without faults, with a fixed seed")
        func counterConverges() async throws {
            let harness = ConvergenceHarness(app: CounterApp(), hub: try builtExecutable("hubd"),
                                             cli: try Executables.url("replica-cli"), replicas: 2, actionsPerReplica: 20,
                                             faults: [], seed: 42, hubArguments: ["--app", "counter"])
            let report = try await harness.run { random, _ in random.next() % 2 == 0 ? .increment : .decrement }
            #expect(report.seq == 40)
            #expect(report.seed == 42)
        }
    }
}

/// A Codable app whose state can leave the range JSON carries exactly.
struct WideCounterApp: CodableSyncApp {
    struct State: Codable, Equatable, Sendable { var total = 0 }
    enum Action: TaggedEnumCodable, Equatable, Sendable { case add(amount: Int) }
    static let name = "wide"
    static let version = "1"
    var initialState: State { State() }
    func reduce(into state: inout State, action: Action) {
        switch action {
        case .add(let amount): state.total = state.total &+ amount
        }
    }
}

extension MultiProcessTests {
    @Suite("Snapshots the app cannot read back")
    struct UnreadableSnapshots {
        @Test("a state that does not survive its encoding is never snapshotted, so the hub still restarts from its journal")
        func skippedSnapshotRestarts() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            var configuration = HubConfiguration(socketPath: fixture.socket)
            configuration.dataDirectory = fixture.directory + "/data"
            configuration.snapshotEvery = 1
            let lines = Locked<[String]>([])
            configuration.logger = HubLogger { level, message, metadata in
                lines.withLock { $0.append(HubLogger.line(program: "hubd", level: level, message: message, metadata: metadata)) }
            }
            for round in 0..<2 {
                let hub = try Hub(app: WideCounterApp(), configuration: configuration)
                let finished = Atomic<Bool>(false)
                Thread.detachNewThread {
                    try? hub.run()
                    finished.store(true, ordering: .releasing)
                }
                let client = try RawClient(path: fixture.socket)
                defer { client.close() }
                try client.send(["type": "hello", "protocol": 1, "app": "wide"])
                let welcome = try client.receive()
                #expect(welcome["type"] == "welcome", "round \(round): \(welcome)")
                if round == 0 {
                    // 2^53 + 1: a total JSON cannot carry exactly.
                    try client.send(["type": "dispatch", "id": 1, "action": ["type": "add", "amount": 9_007_199_254_740_991]])
                    #expect(try client.receive()["seq"] == 1)
                    try client.send(["type": "dispatch", "id": 2, "action": ["type": "add", "amount": 2]])
                    #expect(try client.receive()["seq"] == 2)
                } else {
                    #expect(welcome["seq"] == 2, "the restarted hub recovered both actions from its journal")
                }
                hub.stop()
                try await waitUntil("the hub to stop") { finished.load(ordering: .acquiring) }
            }
            #expect(lines.withLock { $0.contains { $0.contains("not writing a snapshot at seq 2") } }, "\(lines.withLock { $0 })")
        }
    }
}

extension MultiProcessTests {
    @Suite("replica-cli against a hub of an app it was not built with")
    struct UnknownAppHub {
        @Test("the error names the hub's socket, its app, and --socket")
        func namesSocketAndFlag() async throws {
            let hub = try InProcessHub(WideCounterApp())
            defer { Task { try? await hub.stop() } }
            let (status, _, err) = try await hub.fixture.runCLI(["attach"])
            #expect(status == 1)
            let text = err.joined(separator: "\n")
            #expect(text.contains(hub.fixture.socket) && text.contains("\"wide\"") && text.contains("--socket"), "\(text)")
        }

        @Test("state, dispatch and watch work with any hub, as raw JSON, without the app built in")
        func genericClient() async throws {
            let hub = try InProcessHub(WideCounterApp())
            defer { Task { try? await hub.stop() } }
            let watcher = try hub.fixture.cli(["watch"])
            try await waitUntil("watch to attach") { try HubStatusProbe.status(hub.fixture.socket).replicas.count == 1 }
            let sent = try await hub.fixture.runCLI(["dispatch", #"{"type":"add","amount":5}"#, #"{"type":"add","amount":2}"#])
            #expect(sent.status == 0 && sent.out == ["1", "2"], "\(sent)")
            let state = try await hub.fixture.runCLI(["state"])
            #expect(state.out == [#"{"total":7}"#], "\(state)")
            let pointed = try await hub.fixture.runCLI(["state", "--json", "--pointer", "/total"])
            let json = try JSON(parsing: pointed.out.first ?? "")
            #expect(json["state"] == 7 && json["seq"] == 2 && json["digest"]?.stringValue?.count == 16, "\(pointed)")
            _ = try await watcher.waitForLine("the second action") { $0.contains(#""seq":2"#) }
            // The line as documented, with when the hub sequenced it (RFC 3339); the dispatching
            // CLI gave no name (no --name), so none is shown.
            var first = try JSON(parsing: watcher.lines.first ?? "").objectValue ?? [:]
            #expect(first.removeValue(forKey: "time")?.stringValue?.hasSuffix("Z") == true, "\(watcher.lines)")
            #expect(JSON.object(first).canonicalString
                == #"{"action":{"amount":5,"type":"add"},"id":1,"origin":2,"seq":1}"#, "\(watcher.lines)")
            // The hub still validates: a refusal is reported with its code, exit 1.
            let refused = try await hub.fixture.runCLI(["dispatch", #"{"type":"jump"}"#])
            #expect(refused.status == 1 && refused.err.joined().contains("bad-action"), "\(refused)")
            let usage = try await hub.fixture.runCLI(["dispatch", "add 5"])
            #expect(usage.status == 2, "\(usage)")
            watcher.signal(SIGTERM)
            #expect(try await watcher.waitForExit() == 0)
        }
    }
}

/// The same app name and version as ``WideCounterApp``, with a changed reducer: the mistake a
/// newcomer makes when they edit a reducer and forget to bump the version.
struct DriftedWideCounterApp: CodableSyncApp {
    typealias State = WideCounterApp.State
    typealias Action = WideCounterApp.Action
    static let name = WideCounterApp.name
    static let version = WideCounterApp.version
    var initialState: State { State() }
    func reduce(into state: inout State, action: Action) {
        switch action {
        case .add(let amount): state.total = state.total &+ 2 &* amount
        }
    }
}

extension MultiProcessTests {
    @Suite("Divergence found in about a second")
    struct FastDivergence {
        @Test("a replica with a changed reducer (same fingerprint) finds out within seconds, long before the first checkpoint, and re-hydrates")
        func changedReducerIsFound() async throws {
            let hub = try InProcessHub(WideCounterApp())
            defer { Task { try? await hub.stop() } }
            let writer = try hub.attach()
            defer { writer.close() }
            let drifted = try Replica.attach(app: DriftedWideCounterApp(), socketPath: hub.fixture.socket,
                                             reconnect: ReconnectPolicy(initialDelay: .milliseconds(5), maxDelay: .milliseconds(50)))
            defer { drifted.close() }
            let diverged = Locked<[String]>([])
            let token = drifted.observeEvents { event in
                if case .connection(.diverged(let seq, let reason)) = event { diverged.withLock { $0.append("\(seq): \(reason)") } }
            }
            defer { token.cancel() }
            let started = ContinuousClock.now
            var amount = 0
            // A trickle of actions (one per 50 ms), until the drifted replica notices or 20 s pass.
            let deadline = ContinuousClock.now + scaled(.seconds(20))
            while diverged.withLock({ $0.isEmpty }), ContinuousClock.now < deadline {
                amount += 1
                _ = try await writer.dispatch(.add(amount: 1))
                try await Task.sleep(for: .milliseconds(50))
            }
            let report = diverged.withLock { $0.first } ?? ""
            // Both digests and the seq are named; far fewer actions than --checkpoint-every.
            #expect(report.contains("digest") && report.contains("the hub's is"), "\(report)")
            #expect(amount < 1_000, "\(amount) actions")
            #expect(ContinuousClock.now - started < .seconds(15))
        }

        @Test("hubd --checkpoint-interval: while actions flow a checkpoint follows within about two intervals; a lone action gets none")
        func timedCheckpoints() async throws {
            let hub = try InProcessHub(JSONApp()) { $0.checkpointInterval = .milliseconds(200) }
            defer { Task { try? await hub.stop() } }
            let client = try RawClient(path: hub.fixture.socket)
            defer { client.close() }
            try client.send(["type": "hello", "protocol": 1, "app": "json"])
            _ = try client.receive()
            // A lone action after a quiet spell: nothing follows it (the status answer comes next).
            try client.send(["type": "dispatch", "id": 1, "action": ["type": "set", "path": "/a", "value": 1]])
            #expect(try client.receive()["type"] == "action")
            try client.send(["type": "status"])
            #expect(try client.receive()["type"] == "status")
            // A steady flow (an action every 20 ms): a checkpoint follows one of them.
            let started = ContinuousClock.now
            var seq = 1
            var checkpoint: JSON?
            while checkpoint == nil, ContinuousClock.now - started < .seconds(10) {
                seq += 1
                try client.send(["type": "dispatch", "id": JSON(seq), "action": ["type": "set", "path": "/a", "value": JSON(seq)]])
                let action = try client.receive()
                #expect(action["type"] == "action" && action["seq"] == JSON(seq), "\(action)")
                try client.send(["type": "status"])
                var next = try client.receive()
                if next["type"] == "checkpoint" {
                    checkpoint = next
                    next = try client.receive()
                }
                #expect(next["type"] == "status", "\(next)")
                try await Task.sleep(for: .milliseconds(20))  // the pace of the flow, not a wait for a condition
            }
            let found = try #require(checkpoint, "no checkpoint in 10 s of steady actions")
            #expect(found["seq"] == JSON(seq) && seq >= 2, "\(found)")
            #expect(found["digest"]?.stringValue == JSONApp().digest(of: ["a": JSON(seq)]))
            #expect(ContinuousClock.now - started >= .milliseconds(200), "a flow's first interval carries none")
        }
    }
}

extension MultiProcessTests {
    @Suite("Inspection across processes")
    struct Inspection {
        @Test("top: one line per refresh on a pipe, JSON with --json; seq, actions/s, replicas, lag")
        func top() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let hub = try await fixture.startHub(app: "json")
            let reader = try fixture.attachedRawClient(name: "reader")
            defer { reader.close() }
            #expect(try await fixture.runCLI(["dispatch", "set /a 1", "set /a 2"]).out == ["1", "2"])
            let plain = try await fixture.runCLI(["top", "--count", "1"])
            #expect(plain.status == 0 && plain.out.count == 1, "\(plain)")
            #expect(plain.out.first?.hasPrefix("seq 2  actions/s -  replicas 1  max lag") == true, "\(plain)")
            let json = try await fixture.runCLI(["top", "--json", "--count", "2", "--interval", "0.2"])
            let lines = json.out.compactMap { try? JSON(parsing: $0) }
            #expect(lines.count == 2 && lines.allSatisfy { $0["seq"] == 2 && $0["replicas"] == 1 }, "\(json)")
            #expect(lines.last?["actions_per_s"] == 0, "\(json)")
            #expect(try await fixture.runCLI(["top", "--count", "0"]).status == 2)
            hub.signal(SIGTERM)
            _ = try await hub.waitForExit()
        }

        @Test("hubd --export DIR: the data directory as NDJSON, oldest first, snapshot included")
        func export() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            let hub = try await fixture.startHub(app: "json", extra: ["--data-dir", data, "--snapshot-every", "3"])
            #expect(try await fixture.runCLI(["dispatch", "set /a 1", "set /b 2", "set /c 3", "set /d 4", "remove /a"]).out == ["1", "2", "3", "4", "5"])
            hub.signal(SIGTERM)
            #expect(try await hub.waitForExit() == 0)
            let export = try fixture.spawn(try Executables.url("hubd").path, ["--export", data])
            #expect(try await export.waitForExit() == 0, "\(export.errorLines)")
            let lines = export.lines.compactMap { try? JSON(parsing: $0) }
            #expect(lines.first?["type"] == "history" && lines.first?["app"] == "json@1", "\(export.lines)")
            let actions = lines.filter { $0["type"] == "action" }.compactMap { $0["seq"]?.intValue }
            #expect(actions == [1, 2, 3, 4, 5] || actions == [4, 5], "\(export.lines)")
            let snapshot = try #require(lines.first { $0["type"] == "snapshot" }, "\(export.lines)")
            // SIGTERM wrote a last snapshot: at seq 5, after the records it covers.
            #expect(snapshot["seq"] == 5 && snapshot["state"] == ["b": 2, "c": 3, "d": 4], "\(snapshot)")
            #expect(lines.last(where: { $0["type"] == "action" })?["action"] == ["type": "remove", "path": "/a"], "\(export.lines)")
            let missing = try fixture.spawn(try Executables.url("hubd").path, ["--export", fixture.directory + "/nothing"])
            #expect(try await missing.waitForExit() == 1)
            #expect(missing.errorLines.joined().contains("not a StoreSync data directory"), "\(missing.errorLines)")
        }

        @Test("history --from A --to B: the actions from the hub's resume window; older ones refused with a reason")
        func history() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            // The window holds the last 10 000 actions and no more (a byte budget of 1).
            let hub = try await fixture.startHub(app: "json", extra: ["--backlog-bytes", "1"])
            #expect(try await fixture.runCLI(["dispatch", "set /a 1", "set /a 2", "set /a 3", "set /a 4", "set /a 5"]).out == ["1", "2", "3", "4", "5"])
            let some = try await fixture.runCLI(["history", "--from", "2", "--to", "4"])
            #expect(some.status == 0, "\(some)")
            #expect(some.out.compactMap { try? JSON(parsing: $0) }.map { $0["seq"] } == [2, 3, 4], "\(some)")
            #expect(some.out.first.flatMap { try? JSON(parsing: $0) }?["action"] == ["type": "set", "path": "/a", "value": 2])
            #expect(try await fixture.runCLI(["history", "--from", "5"]).out.count == 1)
            #expect(try await fixture.runCLI(["history", "--from", "7"]).status == 2)
            #expect(try await fixture.runCLI(["history", "--from", "1", "--to", "9"]).status == 1)
            #expect(try await fixture.runCLI(["history"]).status == 2)
            // Past the resume window (at least the last 10 000 actions): refused, saying why.
            let writer = try fixture.attachedRawClient()
            defer { writer.close() }
            for n in 1...10_100 { try writer.send(["type": "dispatch", "id": JSON(n), "action": ["type": "set", "path": "/n", "value": JSON(n)]]) }
            try await waitUntil("every dispatch to be sequenced") { try HubStatusProbe.status(fixture.socket).seq == 10_105 }
            let old = try await fixture.runCLI(["history", "--from", "1", "--to", "2"])
            #expect(old.status == 1 && old.err.joined().contains("resume window"), "\(old)")
            let recent = try await fixture.runCLI(["history", "--from", "10100"])
            #expect(recent.out.count == 6, "\(recent)")
            hub.signal(SIGTERM)
            _ = try await hub.waitForExit()
        }

        @Test("the history request: attached or not, the actions A…B as broadcast, in pages; refusals keep the connection; malformed is bad-frame")
        func historyRequest() async throws {
            let hub = try InProcessHub(JSONApp())
            defer { Task { try? await hub.stop() } }
            let writer = try RawClient(path: hub.fixture.socket)
            defer { writer.close() }
            try writer.send(["type": "hello", "protocol": 1, "app": "json"])
            _ = try writer.receive()
            let total = 5_000
            var burst: [UInt8] = []
            for n in 1...total {
                burst += try Frame.encode(["type": "dispatch", "id": JSON(n), "action": ["type": "set", "path": "/n", "value": JSON(n)]])
            }
            try writer.sendBytes(burst)
            var broadcast: [Int: JSON] = [:]
            while broadcast.count < total {
                let message = try writer.receive()
                if message["type"] == "action", let seq = message["seq"]?.intValue { broadcast[seq] = message }
            }
            // An observer (no hello) asks for 2…3, with an id: exactly the broadcast objects.
            let observer = try RawClient(path: hub.fixture.socket)
            defer { observer.close() }
            try observer.send(["type": "history", "from": 2, "to": 3, "id": "h1"])
            let small = try observer.receive()
            #expect(small["type"] == "history" && small["id"] == "h1" && small["from"] == 2 && small["to"] == 3 && small["seq"] == JSON(total), "\(small)")
            #expect(small["actions"]?.arrayValue == [broadcast[2] ?? .null, broadcast[3] ?? .null])
            // Without "to": up to the hub's seq, one page at most (4 096 actions); the next page follows.
            try observer.send(["type": "history", "from": 1])
            let first = try observer.receive()
            #expect(first["to"] == 4_096 && first["actions"]?.arrayValue?.count == 4_096, "\(String(describing: first["to"]))")
            try observer.send(["type": "history", "from": 4_097])
            let second = try observer.receive()
            #expect(second["to"] == JSON(total) && second["actions"]?.arrayValue?.count == total - 4_096)
            #expect(second["actions"]?.arrayValue?.last == broadcast[total])
            // Not sequenced yet: refused, and the connection goes on.
            try observer.send(["type": "history", "from": JSON(total + 1)])
            let refused = try observer.receive()
            #expect(refused["type"] == "history" && refused["error"]?["code"] == "history-unavailable", "\(refused)")
            try observer.send(["type": "status"])
            #expect(try observer.receive()["type"] == "status")
            // An attached replica may ask too; malformed requests are bad-frame (and close).
            try writer.send(["type": "history", "from": JSON(total), "to": JSON(total)])
            let mine = try writer.receive()
            #expect(mine["type"] == "history" && mine["actions"]?.arrayValue == [broadcast[total] ?? .null], "\(mine)")
            try observer.send(["type": "history", "from": 0])
            let bad = try observer.receive()
            #expect(bad["type"] == "error" && bad["error"]?["code"] == "bad-frame", "\(bad)")
        }

        @Test("history --diff: each action A…B with the JSON Patch it made, from the state before A rebuilt here")
        func historyDiff() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let hub = try await fixture.startHub(app: "json")
            #expect(try await fixture.runCLI(["dispatch", "set /a 1", "set /a 2", "set /b [1]", "append /b 2"]).out == ["1", "2", "3", "4"])
            let diff = try await fixture.runCLI(["history", "--from", "2", "--to", "4", "--diff"])
            #expect(diff.status == 0, "\(diff)")
            let lines = diff.out.compactMap { try? JSON(parsing: $0) }
            #expect(lines.map { $0["seq"] } == [2, 3, 4], "\(diff)")
            #expect(lines.first?["patch"] == [["op": "replace", "path": "/a", "value": 2]], "\(diff)")
            #expect(lines.dropFirst().first?["patch"] == [["op": "add", "path": "/b", "value": [1]]], "\(diff)")
            #expect(lines.last?["patch"] == [["op": "add", "path": "/b/1", "value": 2]], "\(diff)")
            #expect(lines.first?["action"] == ["type": "set", "path": "/a", "value": 2])
            hub.signal(SIGTERM)
            _ = try await hub.waitForExit()
        }

        @Test("time travel: replica-cli state --at SEQ from the hub's window, hubd --export DIR --at SEQ from the data directory")
        func stateAt() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            let hub = try await fixture.startHub(app: "json", extra: ["--data-dir", data, "--snapshot-every", "3"])
            #expect(try await fixture.runCLI(["dispatch", "set /a 1", "set /b 2", "set /a 3", "remove /b", "set /c 5"]).out == ["1", "2", "3", "4", "5"])
            #expect(try await fixture.runCLI(["state", "--at", "2"]).out == [#"{"a":1,"b":2}"#])
            #expect(try await fixture.runCLI(["state", "--at", "0"]).out == ["{}"])
            let json = try await fixture.runCLI(["state", "--at", "4", "--json", "--pointer", "/a"])
            let line = try JSON(parsing: json.out.first ?? "")
            #expect(line["seq"] == 4 && line["state"] == 3 && line["digest"]?.stringValue == JSONApp().digest(of: ["a": 3]), "\(json)")
            #expect(try await fixture.runCLI(["state", "--at", "9"]).status == 1)
            hub.signal(SIGTERM)
            #expect(try await hub.waitForExit() == 0)
            // Offline, from the directory: the snapshot at seq 5 (written at the stop) and the
            // journal, which still starts at seq 1.
            func exportAt(_ seq: String) async throws -> ChildProcess {
                let child = try fixture.spawn(try Executables.url("hubd").path, ["--export", data, "--at", seq])
                _ = try await child.waitForExit()
                return child
            }
            #expect(try await exportAt("3").lines == [#"{"a":3,"b":2}"#])
            #expect(try await exportAt("5").lines == [#"{"a":3,"c":5}"#])
            let beyond = try await exportAt("6")
            #expect(beyond.errorLines.joined().contains("holds actions up to seq 5"), "\(beyond.errorLines)")
        }

        @Test("replica-cli: a mistyped option names the closest one; status says when --app is not the hub's")
        func cliHints() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let hub = try await fixture.startHub(app: "json")
            let typo = try await fixture.runCLI(["--jsn", "status"])
            #expect(typo.status == 2 && typo.err.joined().contains("did you mean --json?"), "\(typo)")
            let other = try await fixture.runCLI(["--app", "counter", "status"])
            #expect(other.status == 0 && other.err.joined().contains("runs app \"json\", not \"counter\""), "\(other)")
            hub.signal(SIGTERM)
            _ = try await hub.waitForExit()
        }

        @Test("attach prints its link-back line before the actions a resume replays")
        func linkBackFirst() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            var hub = try await fixture.startHub(app: "json", extra: ["--data-dir", data])
            let attached = try fixture.cli(["attach"])
            try await waitUntil("attach to attach") { try HubStatusProbe.status(fixture.socket).replicas.count == 1 }
            #expect(try await fixture.runCLI(["dispatch", "set /a 1"]).out == ["1"])
            _ = try await attached.waitForLine("#1") { $0.hasPrefix("#1 ") }
            // attach is stopped while the hub restarts and seq 2 is sequenced without it.
            attached.signal(SIGSTOP)
            hub.signal(SIGKILL)
            _ = try await hub.waitForExit()
            hub = try await fixture.startHub(app: "json", extra: ["--data-dir", data])
            #expect(try await fixture.runCLI(["dispatch", "set /b 2"]).out == ["2"])
            attached.signal(SIGCONT)
            _ = try await attached.waitForLine("#2, replayed") { $0.hasPrefix("#2 ") }
            let lines = attached.lines
            let back = try #require(lines.firstIndex { $0.hasPrefix("link back: resumed at seq 1") }, "\(lines)")
            let replayed = try #require(lines.firstIndex { $0.hasPrefix("#2 ") })
            #expect(back < replayed, "\(lines)")
            hub.signal(SIGTERM)
            _ = try await hub.waitForExit()
        }

        @Test("watch --diff prints each action with the JSON Patch it made to the state")
        func watchDiff() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let hub = try await fixture.startHub(app: "json")
            #expect(try await fixture.runCLI(["dispatch", "set /a 1"]).out == ["1"])
            let watcher = try fixture.cli(["watch", "--diff"])
            try await waitUntil("watch to attach") { try HubStatusProbe.status(fixture.socket).replicas.count == 1 }
            #expect(try await fixture.runCLI(["dispatch", "set /b [1,2]", "remove /a", "append /b 3", "set /b/0 9"]).out == ["2", "3", "4", "5"])
            _ = try await watcher.waitForLine("seq 5") { $0.contains(#""seq":5"#) }
            let patches = watcher.lines.compactMap { try? JSON(parsing: $0) }.map { $0["patch"].map { JSON.array([$0]).canonicalString } ?? "none" }
            #expect(patches == [
                #"[[{"op":"add","path":"/b","value":[1,2]}]]"#,
                #"[[{"op":"remove","path":"/a"}]]"#,
                #"[[{"op":"add","path":"/b/2","value":3}]]"#,
                #"[[{"op":"replace","path":"/b/0","value":9}]]"#,
            ], "\(watcher.lines)")
            watcher.signal(SIGTERM)
            _ = try await watcher.waitForExit()
            hub.signal(SIGTERM)
            _ = try await hub.waitForExit()
        }
    }
}
