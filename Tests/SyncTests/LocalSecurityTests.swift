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
import Synchronization
import Testing

/// The resident memory of a process, in bytes (Linux `/proc`).
func residentBytes(of pid: Int32) -> Int? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
          let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
          let kilobytes = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) }) else { return nil }
    return kilobytes * 1024
}

/// A directory the test creates with a given owner and mode (removed with the fixture).
func makeDirectory(_ path: String, mode: mode_t, owner: uid_t? = nil) throws {
    guard mkdir(path, 0o700) == 0 else { throw HarnessError("mkdir \(path): \(errno)") }
    if let owner { guard chown(path, owner, gid_t.max) == 0 else { throw HarnessError("chown \(path)") } }
    guard chmod(path, mode) == 0 else { throw HarnessError("chmod \(path)") }
}

/// Memory a sanitizer's own bookkeeping adds to a process (its shadow memory and history grow
/// with every allocation and synchronisation): bounds on resident memory are checked with
/// this much more room when `STORESYNC_DEADLINE_SCALE` says the processes are sanitized.
let sanitizerAllowance = deadlineScale > 1 ? 192 << 20 : 0

/// Whether the test runs as root (needed to act as a second user).
let runningAsRoot = geteuid() == 0

extension MultiProcessTests {
    @Suite("No local client can wedge, exhaust or impersonate the hub")
    struct LocalSecurityTests {
        @Test("a squatted socket directory (another user's, or world-writable) is refused by the hub and by clients, naming it",
              .enabled(if: runningAsRoot, "needs root to create a directory owned by another user"))
        func squattedDirectory() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            // Everyone may pass through the fixture directory, as through /tmp.
            _ = chmod(fixture.directory, 0o755)
            let squatted = fixture.directory + "/storesync-0"
            try makeDirectory(squatted, mode: 0o777, owner: 65534)
            let hub = try fixture.spawn("hubd", ["--socket", squatted + "/hub.sock"])
            #expect(try await hub.waitForExit() == 1)
            let line = hub.errorLines.joined(separator: "\n")
            #expect(line.contains(squatted) && line.contains("nobody") && line.contains("777"), "\(line)")
            #expect(!FileSystem.exists(squatted + "/hub.sock"))
            let cli = try fixture.spawn("replica-cli", ["--socket", squatted + "/hub.sock", "status"])
            #expect(try await cli.waitForExit() == 1)
            #expect(cli.errorLines.contains { $0.contains(squatted) && $0.contains("another user") }, "\(cli.errorLines)")

            // A directory of one's own that others may write to is refused too; a sticky one of root's is fine.
            let open = fixture.directory + "/open"
            try makeDirectory(open, mode: 0o777)
            let second = try fixture.spawn("hubd", ["--socket", open + "/hub.sock"])
            #expect(try await second.waitForExit() == 1)
            #expect(second.errorLines.contains { $0.contains("everyone may write") && $0.contains("chmod") }, "\(second.errorLines)")
            let sticky = fixture.directory + "/sticky"
            try makeDirectory(sticky, mode: 0o1777)
            let third = try fixture.spawn("hubd", ["--socket", sticky + "/hub.sock"])
            try await waitUntil("hubd to listen in a sticky directory; \(third.errorLines)") {
                (try? HubStatusProbe.status(sticky + "/hub.sock")) != nil
            }
            third.signal(SIGTERM)
            #expect(try await third.waitForExit() == 0)
        }

        @Test("another user who can open the socket gets forbidden; --allow-uid admits them; the hub logs uid and pid",
              .enabled(if: runningAsRoot, "needs root to run a client as another user"))
        func secondUser() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            _ = chmod(fixture.directory, 0o755)
            let cli = try Executables.url("replica-cli").path
            let hub = try await fixture.startHub(extra: ["--socket-mode", "0666"])
            let asNobody = ["--reuid=65534", "--regid=65534", "--clear-groups", cli, "--socket", fixture.socket]
            let refused = try fixture.spawn("/usr/bin/setpriv", asNobody + ["dispatch", #"{"type":"set","path":"/password","value":"hunter2"}"#])
            #expect(try await refused.waitForExit() == 1)
            #expect(refused.errorLines.contains { $0.contains("forbidden") && $0.contains("65534") }, "\(refused.errorLines)")
            try await waitUntil("the refusal to be logged; \(hub.errorLines)") { hub.errorLines.contains { $0.contains("refused uid 65534") } }
            #expect(try HubStatusProbe.status(fixture.socket).seq == 0)
            hub.signal(SIGTERM)
            #expect(try await hub.waitForExit() == 0)

            let admitting = try await fixture.startHub(extra: ["--socket-mode", "0666", "--allow-uid", "nobody"])
            let admitted = try fixture.spawn("/usr/bin/setpriv", asNobody + ["--name", "guest", "dispatch", #"{"type":"set","path":"/a","value":1}"#])
            #expect(try await admitted.waitForExit() == 0, "\(admitted.errorLines)")
            try await waitUntil("the attach to be logged with uid and pid; \(admitting.errorLines)") {
                admitting.errorLines.contains { $0.contains("(guest)") && $0.contains("uid 65534") && $0.contains("pid ") }
            }
            admitting.signal(SIGTERM)
            #expect(try await admitting.waitForExit() == 0)
        }

        @Test("--socket-group: a member by its supplementary groups (as the kernel says) is admitted, and its client accepts the group-writable directory",
              .enabled(if: runningAsRoot, "needs root to act as another user"))
        func supplementaryGroup() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            _ = chmod(fixture.directory, 0o755)
            // A group no account has (so only the kernel's view of the client can say it is in it).
            let group: gid_t = 47_011
            let shared = fixture.directory + "/shared"
            try makeDirectory(shared, mode: 0o770)
            #expect(chown(shared, 0, group) == 0)
            let socket = shared + "/hub.sock"
            let hub = try fixture.spawn("hubd", ["--socket", socket, "--app", "json", "--socket-mode", "0660",
                                                 "--socket-group", "\(group)"])
            try await waitUntil("the hub to listen; \(hub.errorLines)") { (try? HubStatusProbe.status(socket)) != nil }
            let cli = try Executables.url("replica-cli").path
            let member = try fixture.spawn("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--groups=\(group)", cli,
                                                                "--socket", socket, "dispatch", #"{"type":"set","path":"/a","value":1}"#])
            #expect(try await member.waitForExit() == 0, "\(member.errorLines)")
            #expect(try HubStatusProbe.status(socket).seq == 1)
            // Without the group the kernel refuses the socket file itself.
            let outsider = try fixture.spawn("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", cli,
                                                                  "--socket", socket, "state"])
            #expect(try await outsider.waitForExit() == 1)
            hub.signal(SIGTERM)
            #expect(try await hub.waitForExit() == 0)
        }

        @Test("a client refuses a socket served by another user unless told to trust it (STORESYNC_HUB_UID / --hub-uid)",
              .enabled(if: runningAsRoot, "needs root to run a hub as another user"))
        func clientChecksTheHub() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            _ = chmod(fixture.directory, 0o755)
            let theirs = fixture.directory + "/theirs"
            try makeDirectory(theirs, mode: 0o755, owner: 65534)
            let socket = theirs + "/hub.sock"
            let hubd = try Executables.url("hubd").path
            let hub = try fixture.spawn("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", hubd,
                                                             "--socket", socket, "--socket-mode", "0666", "--allow-uid", "0"])
            try await waitUntil("nobody's hub to listen; \(hub.errorLines)") { FileSystem.exists(socket) }
            let refused = try fixture.spawn("replica-cli", ["--socket", socket, "state"])
            #expect(try await refused.waitForExit() == 1)
            #expect(refused.errorLines.contains { $0.contains("STORESYNC_HUB_UID") || $0.contains("another user") },
                    "\(refused.errorLines)")
            let trusting = try fixture.spawn("replica-cli", ["--socket", socket, "--hub-uid", "nobody", "state"])
            #expect(try await trusting.waitForExit() == 0, "\(trusting.errorLines)")
            #expect(trusting.lines == [#"{"count":0,"isIncrementing":true,"limitText":""}"#])
            hub.signal(SIGTERM)
            _ = try await hub.waitForExit()
        }

        @Test("hello name at most 256 bytes and session at most 128 (bad-hello); string ids at most 128 (reject); names escaped in the log")
        func stringLimits() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let hub = try await fixture.startHub()
            func hello(name: String? = nil, session: String? = nil) -> JSON {
                var members: [JSONKey: JSON] = ["type": "hello", "protocol": 1, "app": "json"]
                if let name { members["name"] = .string(name) }
                if let session { members["session"] = .string(session) }
                return .object(members)
            }
            for (message, code): (JSON, String) in [(hello(name: String(repeating: "n", count: 257)), "bad-hello"),
                                                    (hello(name: String(repeating: "é", count: 129)), "bad-hello"),
                                                    (hello(name: String(repeating: "n", count: 512 << 10)), "bad-hello"),
                                                    (hello(session: String(repeating: "s", count: 129)), "bad-hello")] {
                let client = try RawClient(path: fixture.socket)
                defer { client.close() }
                try client.send(message)
                let answer = try client.receive()
                #expect(answer["type"] == "error" && answer["error"]?["code"] == .string(code), "\(answer)")
                #expect(try client.receiveOrEOF() == nil)
            }
            let fine = try RawClient(path: fixture.socket)
            defer { fine.close() }
            try fine.send(hello(name: String(repeating: "n", count: 256), session: String(repeating: "s", count: 128)))
            #expect(try fine.receive()["type"] == "welcome")
            let longID = String(repeating: "i", count: 129)
            try fine.send(["type": "dispatch", "id": .string(longID), "action": ["type": "set", "path": "/a", "value": 1]])
            let reject = try fine.receive()
            #expect(reject["type"] == "reject" && reject["error"]?["code"] == "bad-action", "\(reject)")
            try fine.send(["type": "dispatch", "id": .string(String(repeating: "i", count: 128)), "action": ["type": "set", "path": "/a", "value": 1]])
            #expect(try fine.receive()["seq"] == 1)

            // A name cannot forge a line of the hub's log.
            let forger = try RawClient(path: fixture.socket)
            defer { forger.close() }
            try forger.send(hello(name: "x\nhubd: stopped at seq 0; socket removed\u{1B}[2J"))
            #expect(try forger.receive()["type"] == "welcome")
            try await waitUntil("the attach to be logged") { hub.errorLines.contains { $0.contains(#"x\nhubd: stopped"#) } }
            #expect(!hub.errorLines.contains { $0.hasPrefix("hubd: stopped") })
            #expect(!hub.errorLines.joined().contains("\u{1B}"))
        }

        @Test("a client pipelining sync frames cannot grow the hub: unhandled input is bounded (RSS under rest + 64 MiB)")
        func inputFlood() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let hub = try await fixture.startHub()
            let rest = try #require(residentBytes(of: hub.pid))
            let flooder = try RawClient(path: fixture.socket)
            defer { flooder.close() }
            let frames = try (0..<4096).flatMap { _ in try Frame.encode(["type": "sync"]) }
            // A writer thread floods while this one drains the replies, as the reported client did.
            let stop = Atomic<Bool>(false)
            let fd = flooder.fd
            let writer = Thread {
                while !stop.load(ordering: .relaxed) {
                    let result = frames.withUnsafeBytes { UnixSocket.write(fd, $0) }
                    if case .failed = result { return }
                }
            }
            writer.start()
            var replies = 0
            var peak = rest
            while replies < 300_000 {
                guard try flooder.receive()["type"] == "synced" else { break }
                replies += 1
                if replies % 20_000 == 0, let now = residentBytes(of: hub.pid) { peak = max(peak, now) }
            }
            stop.store(true, ordering: .relaxed)
            flooder.shutdownWrite()
            #expect(replies == 300_000)
            #expect(peak < rest + (64 << 20) + sanitizerAllowance, "the hub grew from \(rest >> 20) MiB to \(peak >> 20) MiB")
        }

        /// A json hub holding a state of about `megabytes` MiB.
        static func bigState(_ fixture: Fixture, megabytes: Int, extra: [String]) async throws -> ChildProcess {
            let hub = try await fixture.startHub(extra: extra)
            let writer = try fixture.attachedRawClient(name: "writer")
            defer { writer.close() }
            let chunk = String(repeating: "x", count: 1_000_000)
            for n in 0..<megabytes {
                try writer.send(["type": "dispatch", "id": JSON(n), "action": ["type": "set", "path": .string("/k\(n)"), "value": .string(chunk)]])
                // A timed checkpoint may follow an action when this runs slowly (a sanitizer).
                var answer = try writer.receive()
                while answer["type"] == "checkpoint" { answer = try writer.receive() }
                #expect(answer["type"] == "action")
            }
            return hub
        }

        @Test("50 joiners that never read share one copy of the state (RSS under rest + 2 × state + 32 MiB), then leave at --welcome-timeout")
        func welcomesShareTheState() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let hub = try await Self.bigState(fixture, megabytes: 10, extra: ["--welcome-timeout", "3"])
            let rest = try #require(residentBytes(of: hub.pid))
            var joiners: [RawClient] = []
            defer { joiners.forEach { $0.close() } }
            for _ in 0..<50 {
                let client = try RawClient(path: fixture.socket)
                try client.send(["type": "hello", "protocol": 1, "app": "json", "name": "sleepy"])
                joiners.append(client)
            }
            try await waitUntil("the 50 joiners to attach") {
                (try? HubStatusProbe.status(fixture.socket))?.replicas.filter { $0.name == "sleepy" }.count == 50
            }
            let loaded = try #require(residentBytes(of: hub.pid))
            #expect(loaded < rest + 2 * (10 << 20) + (32 << 20) + sanitizerAllowance, "rest \(rest >> 20) MiB, with 50 joiners \(loaded >> 20) MiB")
            // Not one of them read its welcome: each is dropped with slow-consumer when the timeout passes.
            try await waitUntil("the joiners to be dropped", timeout: .seconds(60)) {
                (try? HubStatusProbe.status(fixture.socket))?.replicas.isEmpty == true
            }
            try await waitUntil("the drops to be logged; \(hub.errorLines.suffix(5))") {
                hub.errorLines.contains { $0.contains("slow-consumer") && $0.contains("--welcome-timeout") }
            }
        }

        @Test("a state larger than --max-queue-bytes hydrates a replica that reads late: the welcome's state is not counted")
        func largeWelcomeIsNotASlowConsumer() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            _ = try await Self.bigState(fixture, megabytes: 4, extra: ["--max-queue-bytes", "1048576"])
            let late = try RawClient(path: fixture.socket)
            defer { late.close() }
            try late.send(["type": "hello", "protocol": 1, "app": "json", "name": "late"])
            // Actions follow the welcome while it is still unread.
            let writer = try fixture.attachedRawClient(name: "writer2")
            defer { writer.close() }
            for n in 0..<20 {
                try writer.send(["type": "dispatch", "id": JSON(100 + n), "action": ["type": "set", "path": "/small", "value": JSON(n)]])
                _ = try writer.receive()
            }
            let welcome = try late.receive()
            #expect(welcome["type"] == "welcome" && welcome["state"]?["k3"]?.stringValue?.count == 1_000_000)
            var seqs: [Int] = []
            while seqs.count < 20 {
                let message = try late.receive()
                // A timed checkpoint may come between actions on a slow run (a sanitizer).
                if message["type"] == "checkpoint" { continue }
                #expect(message["type"] == "action", "\(message)")
                seqs.append(message["seq"]?.intValue ?? -1)
            }
            #expect(seqs == Array(5...24))
        }

        @Test("with 64 descriptors and a data directory, a crowd of clients never wedges the hub; nothing refused is served")
        func descriptorWedge() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            let hubd = try Executables.url("hubd").path
            let hub = try fixture.spawn("/bin/sh", ["-c", "ulimit -n 64 && exec \"$0\" --socket \"$1\" --app json --data-dir \"$2\" --snapshot-every 5",
                                                     hubd, fixture.socket, data])
            try await waitUntil("hubd to listen; \(hub.errorLines)") { (try? HubStatusProbe.status(fixture.socket)) != nil }
            var crowd: [RawClient] = []
            defer { crowd.forEach { $0.close() } }
            var refused = 0
            for _ in 0..<60 {
                let client = try RawClient(path: fixture.socket)
                // A refused client may find the connection closed before its hello is written;
                // the refusal is still there to read.
                try? client.send(["type": "hello", "protocol": 1, "app": "json"])
                let answer = try client.receive()
                if answer["type"] == "welcome" { crowd.append(client) } else {
                    #expect(answer["error"]?["code"] == "too-many-clients", "\(answer)")
                    refused += 1
                    client.close()
                }
            }
            #expect(refused > 0 && crowd.count > 0, "served \(crowd.count), refused \(refused)")
            // Every dispatch through a served client is applied (snapshots and segments keep rolling).
            let writer = try #require(crowd.first)
            for n in 1...20 {
                try writer.send(["type": "dispatch", "id": JSON(n), "action": ["type": "set", "path": "/a", "value": JSON(n)]])
                var answer = try writer.receive()
                while answer["type"] == "action", answer["id"] != JSON(n) { answer = try writer.receive() }
                #expect(answer["type"] == "action" && answer["id"] == JSON(n), "\(answer)")
            }
            crowd.forEach { $0.close() }
            crowd.removeAll()
            try await waitUntil("the hub to serve the state") { (try? HubStatusProbe.status(fixture.socket))?.seq == 20 }
            let state = try await fixture.runCLI(["state"])
            #expect(state.out == [#"{"a":20}"#], "\(state)")
            #expect(hub.isRunning)
        }

        @Test("private replies do not force a commit: a client alternating dispatch and status shares group commits")
        func repliesDoNotCommit() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            try await fixture.startHub(extra: ["--data-dir", fixture.directory + "/data", "--fsync", "batch"])
            let client = try fixture.attachedRawClient()
            defer { client.close() }
            let before = try HubStatusProbe.status(fixture.socket).storage?["commits"]?.intValue ?? -1
            var burst: [UInt8] = []
            for n in 1...200 {
                burst += try Frame.encode(["type": "dispatch", "id": JSON(n), "action": ["type": "set", "path": "/a", "value": JSON(n)]])
                burst += try Frame.encode(n % 2 == 0 ? ["type": "status"] : ["type": "sync", "id": JSON(n)])
            }
            try client.sendBytes(burst)
            var statuses = 0, syncs = 0, actions = 0
            while statuses + syncs < 200 {
                let message = try client.receive()
                switch message["type"] {
                case "action": actions += 1
                case "status":
                    statuses += 1
                    // A status names the state right after the dispatch before it.
                    #expect(message["seq"]?.intValue == actions, "\(message["seq"] ?? .null) after \(actions) actions")
                case "synced":
                    syncs += 1
                    #expect(message["seq"]?.intValue == actions)
                default: Issue.record("unexpected \(message)")
                }
            }
            let after = try HubStatusProbe.status(fixture.socket).storage?["commits"]?.intValue ?? -1
            #expect(before >= 0 && after - before < 100, "\(after - before) group commits for 200 dispatches")
        }
    }
}
