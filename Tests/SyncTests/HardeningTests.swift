import BuiltinApps
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import StoreHub
import StoreReplica
import SyncCore
import SyncPOSIX
import SyncLocks
import Synchronization
import Testing

extension MultiProcessTests {
    @Suite("Hardening: barrier, protocol growth, limits, start-up races, descriptors")
    struct HardeningTests {
        @Test("sync is answered in order after everything sequenced before it, with its id echoed; also before hello")
        func syncBarrierOnTheWire() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            try await fixture.startHub()
            let early = try RawClient(path: fixture.socket)
            defer { early.close() }
            try early.send(["type": "sync"])
            let answer = try early.receive()
            #expect(answer == ["type": "synced", "seq": 0])

            let client = try fixture.attachedRawClient()
            defer { client.close() }
            var burst: [UInt8] = []
            for index in 1...50 {
                burst += try Frame.encode(["type": "dispatch", "id": JSON(index), "action": ["type": "increment", "path": "/n"]])
            }
            burst += try Frame.encode(["type": "sync", "id": "barrier"])
            try client.sendBytes(burst)
            var acks = 0
            while true {
                let message = try client.receive()
                if message["type"] == "synced" {
                    #expect(message == ["type": "synced", "seq": 50, "id": "barrier"])
                    break
                }
                #expect(message["type"] == "action")
                acks += 1
            }
            #expect(acks == 50)
            try client.send(["type": "sync", "id": [1]])
            #expect(try client.receive()["error"]?["code"] == "bad-frame")
        }

        @Test("a replica ignores hub message types and members it does not know (fake hub)")
        func replicaIgnoresUnknownHubMessages() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let app = CounterApp()
            let listener = try UnixSocket.listen(at: fixture.socket)
            defer { listener.close() }
            let welcome: JSON = [
                "type": "welcome", "protocol": 1, "hub": "00000000000000aa", "replica": 7, "seq": 0,
                "state": app.encodeState(app.initialState), "digest": .string(app.digest(of: app.initialState)),
                "history": "0123456789abcdef", "resumed": false,
            ]
            let script: [JSON] = [
                welcome,
                ["type": "checkpoint", "seq": 0, "digest": .string(app.digest(of: app.initialState)), "extra": true],
                ["type": "action", "seq": 1, "origin": 3, "id": 1, "action": ["type": "increment"], "session": "s"],
                ["type": "teleport"],
                ["type": "action", "seq": 2, "origin": 3, "id": 2, "action": ["type": "increment"]],
            ]
            let served = Atomic<Bool>(false)
            Thread.detachNewThread {
                guard UnixSocket.waitUntil(listener.fd, timeoutMilliseconds: 10_000),
                      let connection = try? UnixSocket.accept(listener.fd) else { return }
                defer { UnixSocket.close(connection) }
                // Read the hello, then play the script and keep the connection open until the replica closes.
                var hello = [UInt8](repeating: 0, count: 4096)
                _ = UnixSocket.waitUntil(connection, timeoutMilliseconds: 10_000)
                _ = hello.withUnsafeMutableBytes { UnixSocket.read(connection, into: $0) }
                var stream: [UInt8] = []
                for message in script { stream += (try? Frame.encode(message)) ?? [] }
                try? UnixSocket.writeAll(connection, stream)
                served.store(true, ordering: .releasing)
                _ = UnixSocket.waitUntil(connection, timeoutMilliseconds: 10_000)
            }
            let replica = try Replica.attach(app: app, socketPath: fixture.socket)
            defer { replica.close() }
            // The fake hub marks the script played after its write returns, which can be after
            // the replica applied it: wait for both.
            try await waitUntil("the replica to apply both actions (seq \(replica.seq))") {
                (replica.seq == 2 || !replica.isConnected) && served.load(ordering: .acquiring)
            }
            let ended = replica.isConnected ? nil : await replica.waitUntilDisconnected()
            #expect(ended == nil, "the replica stopped: \(ended?.description ?? "")")
            #expect(replica.store.state.count == 2)
            let playedScript = served.load(ordering: .acquiring)
            #expect(playedScript)
        }

        @Test("a dispatch larger than the hub's limit is refused locally; the connection stays up; nothing is silent")
        func oversizedDispatchRefusedLocally() async throws {
            let hub = try InProcessHub(JSONApp(), maxFrameBytes: 1024)
            let failures = Locked<[String]>([])
            let replica = try Replica.attach(app: JSONApp(), socketPath: hub.fixture.socket,
                                             onDispatchFailure: { error, _ in failures.withLock { $0.append(error.description) } })
            #expect(replica.maxFrameBytes == 1024)
            let big: JSON = ["type": "set", "path": "/big", "value": .string(String(repeating: "x", count: 2_000))]
            do {
                try await replica.dispatch(json: big)
                Issue.record("an oversized dispatch must be refused")
            } catch {
                #expect(error.wireError?.code == .frameTooLarge)
                #expect(error.description.contains("1024"))
            }
            #expect(throws: ReplicaError.self) { try replica.send(json: big) }
            replica.store.dispatch(.set(try JSONPointer("/big"), .string(String(repeating: "y", count: 2_000))))
            // Reported off the dispatch lock, on the replica's failure queue.
            try await waitUntil("the oversized store dispatch to be reported") { failures.withLock { $0.count } == 1 }
            // The connection is fine: the next dispatch goes through.
            #expect(replica.isConnected)
            #expect(try await replica.dispatch(.set(try JSONPointer("/small"), 1)) == 1)
            let id = try replica.send(.set(try JSONPointer("/small"), 2))
            try await replica.sync()
            #expect(replica.store.state["small"] == 2)
            #expect(id != .number(0))

            // After the connection is gone, a fire-and-forget dispatch is reported, never dropped.
            replica.close()
            _ = await replica.waitUntilDisconnected()
            #expect(throws: ReplicaError.self) { try replica.send(.set(try JSONPointer("/late"), 1)) }
            replica.store.dispatch(.set(try JSONPointer("/late"), 1))
            try await waitUntil("the late store dispatch to be reported") { failures.withLock { $0.count } == 2 }
            let reported = failures.withLock { $0 }
            #expect(reported.last?.contains("disconnected") == true)
            try await hub.stop()
        }

        @Test("two hubs started together on one path: exactly one serves, the other says why", arguments: 0..<5)
        func twoHubsRace(round: Int) async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let first = try fixture.spawn("hubd", ["--socket", fixture.socket, "--app", "json"], name: "hub A\(round)")
            let second = try fixture.spawn("hubd", ["--socket", fixture.socket, "--app", "json"], name: "hub B\(round)")
            try await waitUntil("one of the two hubs to give up") { !first.isRunning || !second.isRunning }
            let (winner, loser) = first.isRunning ? (first, second) : (second, first)
            #expect(try await loser.waitForExit() == 1)
            #expect(loser.errorLines.contains { $0.contains("already listening on \(fixture.socket)") }, "\(loser.errorLines)")
            try await waitUntil("the winner to serve") { (try? HubStatusProbe.status(fixture.socket)) != nil }
            #expect(winner.isRunning)
            winner.signal(SIGTERM)
            #expect(try await winner.waitForExit() == 0)
            #expect(access(fixture.socket, F_OK) != 0)
        }

        @Test("a stopping hub removes its socket only if the path is still the socket it bound")
        func unlinkOnlyWhatItBound() async throws {
            let hub = try InProcessHub(CounterApp())
            // Someone else now owns the path: the hub's file is replaced by another socket.
            #expect(unlink(hub.fixture.socket) == 0)
            let impostor = try UnixSocket.listen(at: hub.fixture.socket + ".other")
            defer { impostor.close() }
            #expect(rename(hub.fixture.socket + ".other", hub.fixture.socket) == 0)
            hub.hub.stop()
            try await waitUntil("the hub to stop") { !hub.isRunning }
            #expect(access(hub.fixture.socket, F_OK) == 0, "the hub removed a socket it did not bind")
            try await hub.stop()
        }

        @Test("every socket the library opens is close-on-exec from birth")
        func closeOnExec() async throws {
            func socketDescriptors() -> Set<Int32> {
                var found: Set<Int32> = []
                for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
                    guard let fd = Int32(name),
                          let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(name)"),
                          target.hasPrefix("socket:") else { continue }
                    found.insert(fd)
                }
                return found
            }
            // Only the sockets this test makes: the test process has others (the test runner's own).
            let before = socketDescriptors()
            let hub = try InProcessHub(CounterApp())
            let replica = try hub.attach()
            try await replica.dispatch(.increment)
            let raw = try RawClient(path: hub.fixture.socket)
            defer { raw.close() }
            try raw.send(["type": "status"])
            _ = try raw.receive()
            var sockets = 0
            for fd in socketDescriptors().subtracting(before) {
                let flags = fcntl(fd, F_GETFD)
                guard flags >= 0 else { continue }
                sockets += 1
                #expect(flags & FD_CLOEXEC != 0, "socket descriptor \(fd) is inherited by child processes")
            }
            #expect(sockets >= 4)   // listener, the hub's two connections, the replica's and the raw client's
            replica.close()
            try await hub.stop()
        }

        @Test("the library's socket writes never raise SIGPIPE, with SIGPIPE at its default action")
        func noSigpipeFromSockets() async throws {
            // The test runner ignores SIGPIPE (Fixture); restore the default for the length of
            // this test (the suite is serialized, so no child-pipe write runs meanwhile). If a
            // library write raised SIGPIPE, this process would die here.
            let previous = signal(SIGPIPE, SIG_DFL)
            defer { signal(SIGPIPE, previous) }
            var pair: [Int32] = [-1, -1]
            #if canImport(Darwin)
            let type = SOCK_STREAM
            #else
            let type = Int32(SOCK_STREAM.rawValue)
            #endif
            #expect(socketpair(AF_UNIX, type, 0, &pair) == 0)
            UnixSocket.close(pair[1])
            let result = [UInt8](repeating: 1, count: 16).withUnsafeBytes { UnixSocket.write(pair[0], $0) }
            #expect(result == .failed(EPIPE))
            UnixSocket.close(pair[0])

            // A replica whose hub vanished: its sends fail with an error, the process lives on.
            let hub = try InProcessHub(CounterApp())
            let replica = try hub.attach()
            try await replica.dispatch(.increment)
            try await hub.stop()
            _ = await replica.waitUntilDisconnected()
            #expect(throws: ReplicaError.self) { try replica.send(.increment) }
            let failures = Locked(0)
            let second = try InProcessHub(CounterApp())
            let other = try Replica.attach(app: CounterApp(), socketPath: second.fixture.socket, reconnect: .never,
                                           onDispatchFailure: { _, _ in failures.withLock { $0 += 1 } })
            defer { other.close() }
            second.hub.stop()
            for _ in 0..<100 where other.isConnected { other.store.dispatch(.increment) }
            _ = await other.waitUntilDisconnected()
            other.store.dispatch(.increment)
            // Failures are reported on the replica's serial queue, after the dispatch returns.
            try await waitUntil("the dispatch failure to be reported") { failures.withLock { $0 } >= 1 }
            try await second.stop()
        }
    }
}
