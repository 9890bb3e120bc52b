import BuiltinApps
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
@testable import StoreHub
import StoreReplica
import SyncCore
import SyncPOSIX
import SyncLocks
import Synchronization
import Testing

extension MultiProcessTests {
    @Suite("Durability: journal, snapshots, recovery")
    struct DurabilityTests {
        /// A raw client attached to the json app that remembers its replica id.
        final class Writer {
            let client: RawClient
            let replica: Int
            init(socket: String) throws {
                client = try RawClient(path: socket)
                try client.send(["type": "hello", "protocol": 1, "app": "json"])
                let welcome = try client.receive()
                guard welcome["type"] == "welcome", let replica = welcome["replica"]?.intValue else {
                    throw HarnessError("expected welcome, got \(welcome.canonicalString)")
                }
                self.replica = replica
            }
        }

        /// The hub's state, read from a fresh attach.
        static func state(_ socket: String) throws -> (seq: Int, state: JSON, history: String) {
            let client = try RawClient(path: socket)
            defer { client.close() }
            try client.send(["type": "hello", "protocol": 1, "app": "json"])
            let welcome = try client.receive()
            guard let seq = welcome["seq"]?.intValue, let state = welcome["state"],
                  let history = welcome["history"]?.stringValue else {
                throw HarnessError("unexpected welcome \(welcome.canonicalString)")
            }
            return (seq, state, history)
        }

        @Test("crash loop: kill -9 at a random moment, 20 times; every acknowledged action survives, none twice, order kept",
              arguments: ["always", "batch", "never"])
        func crashLoop(mode: String) async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            let seed = UInt64.random(in: 0...UInt64.max)
            var random = SplitMix64(seed: seed)
            let clients = 3
            var applied = [Int](repeating: 0, count: clients)   // what the recovered state holds per client
            var history: String?
            for iteration in 0..<20 {
                let hub = try await fixture.startHub(app: "json", extra: ["--data-dir", data, "--fsync", mode])
                let (seq, state, recoveredHistory) = try Self.state(fixture.socket)
                if let history { #expect(recoveredHistory == history, "the history id changed across a restart") }
                history = recoveredHistory
                // Every acknowledged action is there, exactly once and in order (the arrays are 1…m).
                var total = 0
                for k in 0..<clients {
                    let values = state["c\(k)"]?.arrayValue?.compactMap(\.intValue) ?? []
                    #expect(values == Array(stride(from: 1, through: values.count, by: 1)),
                            "seed \(seed), iteration \(iteration): client \(k)'s actions are not 1…m: \(values)")
                    #expect(values.count >= applied[k],
                            "seed \(seed), iteration \(iteration): client \(k) had \(applied[k]) acknowledged, the hub recovered \(values.count)")
                    applied[k] = values.count
                    total += values.count
                }
                #expect(seq == total, "seed \(seed), iteration \(iteration): seq \(seq) but \(total) actions in the state")

                // Each client pipelines a burst; the hub is killed after a random number of acks.
                let writers = try (0..<clients).map { _ in try Writer(socket: fixture.socket) }
                defer { for writer in writers { writer.client.close() } }
                let burst = 40
                for (k, writer) in writers.enumerated() {
                    var bytes: [UInt8] = []
                    for n in (applied[k] + 1)...(applied[k] + burst) {
                        bytes += try Frame.encode(["type": "dispatch", "id": JSON(n),
                                                   "action": ["type": "append", "path": .string("/c\(k)"), "value": JSON(n)]])
                    }
                    try writer.client.sendBytes(bytes)
                }
                let killAfter = Int(random.next() % UInt64(burst))
                var acked = [Int](repeating: 0, count: clients)
                func absorb(_ message: JSON, into k: Int, replica: Int) {
                    if message["type"] == "action", message["origin"]?.intValue == replica, let n = message["id"]?.intValue {
                        #expect(n == max(acked[k], applied[k]) + 1, "acks out of order for client \(k)")
                        acked[k] = n
                    }
                }
                while acked[0] < applied[0] + killAfter {
                    absorb(try writers[0].client.receive(), into: 0, replica: writers[0].replica)
                }
                hub.signal(SIGKILL)
                _ = try await hub.waitForExit()
                // Whatever reached a client before the kill was broadcast, so it is on disk.
                for (k, writer) in writers.enumerated() {
                    while let message = try writer.client.receiveOrEOF() { absorb(message, into: k, replica: writer.replica) }
                    applied[k] = max(applied[k], acked[k])
                }
            }
            let hub = try await fixture.startHub(app: "json", extra: ["--data-dir", data, "--fsync", mode])
            let (_, state, _) = try Self.state(fixture.socket)
            for k in 0..<clients {
                #expect((state["c\(k)"]?.arrayValue?.count ?? 0) >= applied[k], "seed \(seed): client \(k) lost acknowledged actions")
            }
            hub.signal(SIGTERM)
            #expect(try await hub.waitForExit() == 0)
        }

        /// Starts a json hub on `data`, dispatches `count` actions, and kills it (no final snapshot).
        static func journalOf(_ count: Int, fixture: Fixture, data: String) async throws -> String {
            let hub = try await fixture.startHub(app: "json", extra: ["--data-dir", data])
            let writer = try Writer(socket: fixture.socket)
            defer { writer.client.close() }
            for n in 1...count {
                try writer.client.send(["type": "dispatch", "id": JSON(n), "action": ["type": "append", "path": "/l", "value": JSON(n)]])
                _ = try writer.client.receive()
            }
            hub.signal(SIGKILL)
            _ = try await hub.waitForExit()
            let segments = try FileSystem.list(data).filter { $0.hasPrefix("journal-") }.sorted()
            return data + "/" + (try #require(segments.last))
        }

        static func flipByte(_ path: String, at offset: Int) throws {
            var bytes = try FileSystem.read(path)
            bytes[offset] ^= 0x20
            try FileSystem.writeAtomically(path, bytes)
        }

        @Test("a torn tail (cut mid-record, or a flipped byte in the last record) recovers the prefix with a warning")
        func tornTail() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            let journal = try await Self.journalOf(5, fixture: fixture, data: data)
            let size = try #require(FileSystem.size(journal))
            try FileSystem.truncate(journal, to: size - 5)
            var hub = try await fixture.startHub(app: "json", extra: ["--data-dir", data])
            #expect(try Self.state(fixture.socket).state == ["l": [1, 2, 3, 4]])
            #expect(hub.errorLines.contains { $0.contains("torn tail at offset") && $0.contains(journal) }, "\(hub.errorLines)")
            hub.signal(SIGKILL)
            _ = try await hub.waitForExit()

            // Four records remain; damage the last one's body.
            let remaining = try #require(FileSystem.size(journal))
            try Self.flipByte(journal, at: remaining - 3)
            hub = try await fixture.startHub(app: "json", extra: ["--data-dir", data])
            #expect(try Self.state(fixture.socket).state == ["l": [1, 2, 3]])
            #expect(hub.errorLines.contains { $0.contains("torn tail") }, "\(hub.errorLines)")
            hub.signal(SIGTERM)
            #expect(try await hub.waitForExit() == 0)
        }

        @Test("a flipped byte in the middle refuses to start, naming file and offset; --check-data and --repair")
        func corruptMiddle() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            let journal = try await Self.journalOf(6, fixture: fixture, data: data)
            try Self.flipByte(journal, at: 20)   // inside the first record's body
            let hub = try fixture.spawn("hubd", ["--socket", fixture.socket, "--app", "json", "--data-dir", data])
            #expect(try await hub.waitForExit() == 4)
            #expect(hub.errorLines.contains { $0.contains(journal) && $0.contains("offset 0") && $0.contains("backup") },
                    "\(hub.errorLines)")
            let check = try fixture.spawn("hubd", ["--check-data", data])
            #expect(try await check.waitForExit() == 1)
            #expect(check.lines.contains { $0.contains("corrupt at offset 0") }, "\(check.lines)")
            // Repair does not "fix" mid-file corruption by dropping data.
            let repair = try fixture.spawn("hubd", ["--check-data", data, "--repair"])
            #expect(try await repair.waitForExit() == 1)
            #expect(FileSystem.size(journal) != nil)
        }

        @Test("--check-data reports a torn tail and --repair truncates exactly it")
        func checkAndRepair() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            let journal = try await Self.journalOf(3, fixture: fixture, data: data)
            let size = try #require(FileSystem.size(journal))
            // Preallocated zeros after the last record are a torn tail too.
            let fd = try FileSystem.open(journal, O_WRONLY | O_APPEND)
            try [UInt8](repeating: 0, count: 64).withUnsafeBytes { try FileSystem.writeAll(fd, $0, path: journal) }
            FileSystem.close(fd)
            let check = try fixture.spawn("hubd", ["--check-data", data])
            #expect(try await check.waitForExit() == 1)
            #expect(check.lines.contains { $0.contains("torn tail at offset \(size)") && $0.contains("64 bytes") }, "\(check.lines)")
            #expect(FileSystem.size(journal) == size + 64)
            let repair = try fixture.spawn("hubd", ["--check-data", data, "--repair"])
            #expect(try await repair.waitForExit() == 0)
            #expect(repair.lines.contains { $0.contains("truncated") }, "\(repair.lines)")
            #expect(repair.lines.contains { $0.contains("recovered state: seq 3") }, "\(repair.lines)")
            #expect(FileSystem.size(journal) == size)
        }

        @Test("one hub per data directory; another app's directory is refused; flags need --data-dir")
        func directoryGuards() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            let first = try await fixture.startHub(app: "json", extra: ["--data-dir", data])
            let second = try fixture.spawn("hubd", ["--socket", fixture.directory + "/other.sock", "--app", "json", "--data-dir", data])
            #expect(try await second.waitForExit() == 1)
            #expect(second.errorLines.contains { $0.contains("another hub is using the data directory \(data)") }, "\(second.errorLines)")
            first.signal(SIGTERM)
            #expect(try await first.waitForExit() == 0)
            let counter = try fixture.spawn("hubd", ["--socket", fixture.socket, "--app", "counter", "--data-dir", data])
            #expect(try await counter.waitForExit() == 4)
            #expect(counter.errorLines.contains { $0.contains("app-mismatch") && $0.contains("json@1") && $0.contains("counter@1") },
                    "\(counter.errorLines)")
            for flags in [["--fsync", "always"], ["--snapshot-every", "10"], ["--dedup-window", "5"]] {
                let usage = try fixture.spawn("hubd", ["--socket", fixture.socket] + flags)
                #expect(try await usage.waitForExit() == 2)
                #expect(usage.errorLines.contains { $0.contains("needs --data-dir") })
            }
            for flags in [["--checkpoint-every", "-1"], ["--idle-timeout", "0"], ["--backlog-bytes", "x"]] {
                let usage = try fixture.spawn("hubd", ["--socket", fixture.socket] + flags)
                #expect(try await usage.waitForExit() == 2)
                #expect(usage.errorLines.contains { $0.contains(flags[0]) }, "\(usage.errorLines)")
            }
        }

        @Test("history and replica ids survive a restart; an in-memory hub says so and gets a new history")
        func historyAndReplicaIDs() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            var hub = try await fixture.startHub(app: "json", extra: ["--data-dir", data])
            let writers = try (0..<3).map { _ in try Writer(socket: fixture.socket) }
            for writer in writers {
                try writer.client.send(["type": "dispatch", "id": 1, "action": ["type": "set", "path": "/x", "value": 1]])
                _ = try writer.client.receive()
                writer.client.close()
            }
            let before = try Self.state(fixture.socket)
            hub.signal(SIGKILL)
            _ = try await hub.waitForExit()
            hub = try await fixture.startHub(app: "json", extra: ["--data-dir", data])
            let after = try Self.state(fixture.socket)
            #expect(after.history == before.history)
            let late = try Writer(socket: fixture.socket)
            #expect(late.replica > writers.map(\.replica).max() ?? 0)
            late.client.close()
            hub.signal(SIGTERM)
            _ = try await hub.waitForExit()

            let memory = try await fixture.startHub(app: "json")
            #expect(memory.errorLines.contains { $0.contains("in memory") }, "\(memory.errorLines)")
            #expect(try Self.state(fixture.socket).history != before.history)
            memory.signal(SIGTERM)
            _ = try await memory.waitForExit()
        }

        @Test("a full disk: dispatches get reject unavailable, nothing unwritten is applied, and the hub recovers by itself")
        func fullDisk() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            var configuration = HubConfiguration(socketPath: fixture.socket)
            configuration.dataDirectory = fixture.directory + "/data"
            let hub = try Hub(app: JSONApp(), configuration: configuration)
            let finished = Atomic<Bool>(false)
            Thread.detachNewThread {
                try? hub.run()
                finished.store(true, ordering: .releasing)
            }
            defer {
                StorageFaults.writeFailure.withLock { $0 = nil }
            }
            let replica = try Replica.attach(app: JSONApp(), socketPath: fixture.socket)
            #expect(try await replica.dispatch(.set(try JSONPointer("/a"), 1)) == 1)
            StorageFaults.writeFailure.withLock { $0 = ENOSPC }
            let pointerB = try JSONPointer("/b"), pointerC = try JSONPointer("/c")
            do throws(ReplicaError) {
                try await replica.dispatch(.set(pointerB, 2))
                Issue.record("a dispatch that cannot be journaled must be refused")
            } catch {
                #expect(error.wireError?.code == .unavailable, "\(error)")
                #expect(error.description.contains("No space left"), "\(error)")
            }
            let status = try await replica.status()
            #expect(status.seq == 1)
            #expect(status.storage?["unavailable"] != nil)
            #expect(replica.store.state == ["a": 1])
            StorageFaults.writeFailure.withLock { $0 = nil }
            // The hub probes about once a second and then accepts again, by itself.
            var seq: UInt64?
            let deadline = ContinuousClock.now + scaled(.seconds(20))
            while ContinuousClock.now < deadline {
                do throws(ReplicaError) {
                    seq = try await replica.dispatch(.set(pointerC, 3))
                    break
                } catch {
                    #expect(error.wireError?.code == .unavailable, "\(error)")
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            #expect(seq == 2)
            #expect(replica.store.state == ["a": 1, "c": 3])
            replica.close()
            hub.stop()
            try await waitUntil("the hub to stop") { finished.load(ordering: .acquiring) }
            // What survives a restart is exactly what was acknowledged.
            let again = try Hub(app: JSONApp(), configuration: configuration)
            #expect(again.history == hub.history)
            let running = HubThread(again)
            let check = try Replica.attach(app: JSONApp(), socketPath: fixture.socket)
            #expect(check.store.state == ["a": 1, "c": 3])
            #expect(check.welcomeSeq == 2)
            check.close()
            try await running.stop()
        }

        @Test("snapshots compact the journal: disk use stays bounded by the state plus the retained window")
        func compaction() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            var configuration = HubConfiguration(socketPath: fixture.socket)
            let data = fixture.directory + "/data"
            configuration.dataDirectory = data
            configuration.snapshotEvery = 100
            configuration.retainedActions = 50
            let hub = try Hub(app: JSONApp(), configuration: configuration)
            let finished = Atomic<Bool>(false)
            Thread.detachNewThread {
                try? hub.run()
                finished.store(true, ordering: .releasing)
            }
            let replica = try Replica.attach(app: JSONApp(), socketPath: fixture.socket)
            for n in 1...1_000 { try await replica.dispatch(.set(try JSONPointer("/n"), JSON(n))) }
            let files = try FileSystem.list(data)
            let segments = files.filter { $0.hasPrefix("journal-") }
            let snapshots = files.filter { $0.hasPrefix("snapshot-") }
            #expect(snapshots.count <= 2, "\(files)")
            #expect(segments.count <= 3, "\(files)")
            let journalBytes = segments.reduce(0) { $0 + (FileSystem.size(data + "/" + $1) ?? 0) }
            // About 150 records of 80 bytes, each with its commit mark (28 bytes): bounded by the
            // retained window, not by the 1,000 actions.
            #expect(journalBytes < 200 * 110, "journal holds \(journalBytes) bytes after compaction")
            replica.close()
            hub.stop()
            try await waitUntil("the hub to stop") { finished.load(ordering: .acquiring) }
            let again = try Hub(app: JSONApp(), configuration: configuration)
            let running = HubThread(again)
            let check = try Replica.attach(app: JSONApp(), socketPath: fixture.socket)
            #expect(check.store.state == ["n": 1_000])
            check.close()
            try await running.stop()
        }
    }
}
