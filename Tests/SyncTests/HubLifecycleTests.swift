import Foundation
import SyncProtocol
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension MultiProcessTests {
    @Suite("hubd lifecycle and replica-cli errors")
    struct Lifecycle {
        @Test("hubd refuses to start over a live hub, which keeps serving")
        func refusesLiveHub() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let first = try await fixture.startHub()
            let second = try fixture.spawn("hubd", ["--socket", fixture.socket])
            #expect(try await second.waitForExit() == 1)
            #expect(second.errorLines.contains { $0.contains("already listening on \(fixture.socket)") })
            #expect(first.isRunning)
            #expect(try HubStatusProbe.status(fixture.socket).app == "json")
        }

        @Test("hubd replaces the stale socket a killed hub left behind")
        func replacesStaleSocket() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let dead = try await fixture.startHub()
            dead.signal(SIGKILL)
            try await dead.waitForExit()
            #expect(FileManager.default.fileExists(atPath: fixture.socket), "SIGKILL leaves the socket file")
            try await fixture.startHub(app: "counter")
            #expect(try HubStatusProbe.status(fixture.socket).app == "counter")
        }

        @Test("SIGTERM and SIGINT stop hubd cleanly: exit 0, socket removed", arguments: [SIGTERM, SIGINT])
        func signalStops(signal: Int32) async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let hub = try await fixture.startHub()
            // --no-reconnect: without it both would ride through the hub's absence (tested elsewhere).
            let watcher = try fixture.cli(["--no-reconnect", "watch"])
            let attached = try fixture.cli(["--no-reconnect", "attach"])
            try await waitUntil("both to attach") { try HubStatusProbe.status(fixture.socket).replicas.count == 2 }
            let seq = try await fixture.runCLI(["dispatch", "set /a 1"])
            #expect(seq.out == ["1"])
            try await watcher.waitForLine("the action") { $0.contains(#""seq":1"#) }
            hub.signal(signal)
            #expect(try await hub.waitForExit() == 0)
            #expect(!FileManager.default.fileExists(atPath: fixture.socket))
            #expect(try await watcher.waitForExit() == 1, "the watcher ends when the hub goes")
            #expect(try await attached.waitForExit() == 1)
            #expect(attached.errorLines.count == 1, "attach reports the end once: \(attached.errorLines)")
            #expect(watcher.errorLines == ["replica-cli: the hub closed the connection: shutting-down: the hub is shutting down at seq 1; reconnect (with resume) once it is back"])
        }

        @Test("on built-in defaults each app's hub gets its own socket (APP.sock); clients find theirs, or say which to choose")
        func defaultSocketPerApp() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let runtime = fixture.directory + "/runtime"
            try FileManager.default.createDirectory(atPath: runtime, withIntermediateDirectories: false,
                                                    attributes: [.posixPermissions: 0o700])
            // No --socket and no $STORESYNC_SOCKET: only $XDG_RUNTIME_DIR says where.
            let environment = ["XDG_RUNTIME_DIR": runtime, "STORESYNC_SOCKET": ""]
            let counterSocket = runtime + "/storesync/counter.sock", todosSocket = runtime + "/storesync/todos.sock"
            let counter = try fixture.spawn("hubd", [], environment: environment)
            try await waitUntil("the counter hub on \(counterSocket): \(counter.errorLines)") {
                guard counter.isRunning else { throw HarnessError("hubd exited: \(counter.errorLines)") }
                return (try? HubStatusProbe.status(counterSocket)) != nil
            }
            func cli(_ arguments: [String]) async throws -> (exitStatus: Int32, lines: [String], errorLines: [String]) {
                let child = try fixture.spawn("replica-cli", arguments, environment: environment)
                child.closeInput()
                let status = try await child.waitForExit()
                return (status, child.lines, child.errorLines)
            }
            // One hub: a client with no --app finds it.
            let alone = try await cli(["state", "--json"])
            #expect(alone.exitStatus == 0, "\(alone.errorLines)")
            let todos = try fixture.spawn("hubd", ["--app", "todos"], environment: environment)
            try await waitUntil("the todos hub on \(todosSocket): \(todos.errorLines)") {
                guard todos.isRunning else { throw HarnessError("hubd exited: \(todos.errorLines)") }
                return (try? HubStatusProbe.status(todosSocket)) != nil
            }
            #expect(try HubStatusProbe.status(counterSocket).app == "counter")
            #expect(try HubStatusProbe.status(todosSocket).app == "todos")
            // Each --app reaches its own hub.
            let counterStatus = try await cli(["--app", "counter", "status", "--json"])
            #expect(counterStatus.exitStatus == 0 && counterStatus.lines.joined().contains(#""app":"counter""#), "\(counterStatus.lines) \(counterStatus.errorLines)")
            let todosStatus = try await cli(["--app", "todos", "status", "--json"])
            #expect(todosStatus.exitStatus == 0 && todosStatus.lines.joined().contains(#""app":"todos""#), "\(todosStatus.lines) \(todosStatus.errorLines)")
            // Two hubs and no --app: the client names both and how to choose.
            let ambiguous = try await cli(["status"])
            #expect(ambiguous.exitStatus == 1)
            let message = ambiguous.errorLines.joined(separator: "\n")
            #expect(message.contains("counter.sock") && message.contains("todos.sock") && message.contains("--app") && message.contains("--socket"), "\(message)")
            // A hub killed leaves its socket behind: the live one is still found.
            todos.signal(SIGKILL)
            _ = try await todos.waitForExit()
            let found = try await cli(["status", "--json"])
            #expect(found.exitStatus == 0 && found.lines.joined().contains(#""app":"counter""#), "\(found.lines) \(found.errorLines)")
            // A client of an app whose hub is not running names the socket it tried and --socket.
            let missing = try await cli(["--app", "json", "state"])
            #expect(missing.exitStatus == 1)
            #expect(missing.errorLines.joined().contains(runtime + "/storesync/json.sock") && missing.errorLines.joined().contains("--socket"),
                    "\(missing.errorLines)")
            counter.signal(SIGTERM)
            #expect(try await counter.waitForExit() == 0)
        }

        @Test("the socket directory is created 0700 and the socket is 0600")
        func permissions() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let nested = fixture.directory + "/run/storesync/hub.sock"
            let hub = try fixture.spawn("hubd", ["--socket", nested])
            try await waitUntil("hubd to listen") { (try? HubStatusProbe.status(nested)) != nil }
            let socketMode = try FileManager.default.attributesOfItem(atPath: nested)[.posixPermissions] as? Int
            let directoryMode = try FileManager.default.attributesOfItem(atPath: fixture.directory + "/run/storesync")[.posixPermissions] as? Int
            #expect(socketMode == 0o600)
            #expect(directoryMode == 0o700)
            hub.signal(SIGTERM)
            #expect(try await hub.waitForExit() == 0)
        }

        @Test("hubd refuses a path that is not a socket, and leaves the file alone")
        func refusesRegularFile() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            try Data("precious".utf8).write(to: URL(fileURLWithPath: fixture.socket))
            let data = fixture.directory + "/data"
            let hub = try fixture.spawn("hubd", ["--socket", fixture.socket, "--data-dir", data])
            #expect(try await hub.waitForExit() == 1)
            #expect(hub.errorLines.contains { $0.contains("is not a socket") })
            #expect(try String(contentsOfFile: fixture.socket, encoding: .utf8) == "precious")
            // Refused before anything was prepared: no data directory, no lock file beside it.
            #expect(!FileManager.default.fileExists(atPath: data))
            #expect(!FileManager.default.fileExists(atPath: fixture.socket + ".lock"))
            let cli = try await fixture.runCLI(["status"])
            #expect(cli.status == 1)
            #expect(cli.err.count == 1)
            #expect(cli.err.first?.contains("is not a socket") == true)
        }

        @Test("a socket path too long for sun_path gets a clear error from both executables")
        func pathTooLong() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let long = fixture.directory + "/" + String(repeating: "x", count: 120) + ".sock"
            let hub = try fixture.spawn("hubd", ["--socket", long])
            #expect(try await hub.waitForExit() == 1)
            #expect(hub.errorLines.contains { $0.contains("longer than the") && $0.contains("--socket") })
            let cli = try fixture.spawn("replica-cli", ["--socket", long, "status"])
            #expect(try await cli.waitForExit() == 1)
            #expect(cli.errorLines.count == 1)
            #expect(cli.errorLines.first?.contains("longer than the") == true)
        }

        @Test("no hub at the socket: one line naming the path and how to start hubd, exit 1", arguments: [
            ["status"], ["state"], ["dispatch", "increment"], ["watch"], ["attach"],
        ])
        func missingHub(arguments: [String]) async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let result = try await fixture.runCLI(arguments)
            #expect(result.status == 1)
            #expect(result.err.count == 1)
            #expect(result.err.first?.contains(fixture.socket) == true)
            #expect(result.err.first?.contains("swift run hubd") == true)
            #expect(result.out.isEmpty)
        }

        @Test("usage errors exit 2 with a hint; --help exits 0 and documents every flag")
        func usage() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let help = try fixture.spawn("hubd", ["--help"])
            #expect(try await help.waitForExit() == 0)
            let hubHelp = help.lines.joined(separator: "\n")
            for flag in ["--app", "--socket", "--max-frame-bytes", "--max-queue-bytes", "--list-apps", "--help"] {
                #expect(hubHelp.contains(flag), "hubd --help lacks \(flag)")
            }
            let cliHelp = try fixture.spawn("replica-cli", ["--help"])
            #expect(try await cliHelp.waitForExit() == 0)
            let cliText = cliHelp.lines.joined(separator: "\n")
            for word in ["attach", "dispatch", "state", "watch", "status", "--socket", "--app", "--json", "--pointer", "--name"] {
                #expect(cliText.contains(word), "replica-cli --help lacks \(word)")
            }
            let badApp = try fixture.spawn("hubd", ["--socket", fixture.socket, "--app", "nope"])
            #expect(try await badApp.waitForExit() == 2)
            #expect(badApp.errorLines.first?.contains("counter, todos, json") == true)
            let noCommand = try await fixture.runCLI([])
            #expect(noCommand.status == 2)
            // With --app, usage errors are found before connecting: exit 2 even with no hub.
            #expect(try await fixture.runCLI(["--app", "counter", "dispatch", "step"]).status == 2)
            #expect(try await fixture.runCLI(["--app", "nope", "state"]).status == 2)
            #expect(try await fixture.runCLI(["--app", "counter", "dispatch", "increment"]).status == 1)
            let list = try fixture.spawn("hubd", ["--list-apps"])
            #expect(try await list.waitForExit() == 0)
            #expect(list.lines.map { $0.split(separator: " ").first.map(String.init) } == ["counter", "todos", "todos", "json"])
        }
    }
}

extension MultiProcessTests {
    @Suite("Resource exhaustion")
    struct ResourceExhaustion {
        @Test("with few descriptors, hubd serves up to its client limit, refuses more with too-many-clients, and keeps serving")
        func outOfDescriptors() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            // A low open-files limit (soft and hard): 32 of it are kept for the hub's own files.
            let hub = try fixture.spawn("/bin/sh", ["-c", "ulimit -n 48 && exec \"$0\" --socket \"$1\" --app json --data-dir \"$2\"",
                                                     try Executables.url("hubd").path, fixture.socket, fixture.directory + "/data"])
            try await waitUntil("hubd to listen") { (try? HubStatusProbe.status(fixture.socket)) != nil }
            #expect(hub.errorLines.contains { $0.contains("open-files limit 48") }, "\(hub.errorLines)")
            #expect(hub.errorLines.contains { $0.contains("at most 24 clients") }, "\(hub.errorLines)")
            let first: RawClient
            do { first = try fixture.attachedRawClient(name: "first") } catch {
                throw HarnessError("attaching: \(error); hub: \(hub.errorLines.suffix(6))")
            }
            defer { first.close() }
            var extra: [RawClient] = []
            defer { extra.forEach { $0.close() } }
            var refused = 0
            for index in 0..<30 {
                let client = try RawClient(path: fixture.socket)
                // A refused connection may already be closed by the hub (too-many-clients is
                // sent at once, before the client says anything): the send can then fail.
                try? client.send(["type": "status"])
                let answer: JSON
                do { answer = try client.receive() } catch {
                    throw HarnessError("client \(index) (served \(extra.count), refused \(refused)): \(error); hub: \(hub.errorLines.suffix(5))")
                }
                if answer["type"] == "error" {
                    #expect(answer["error"]?["code"] == "too-many-clients", "\(answer)")
                    #expect(try client.receiveOrEOF() == nil)
                    refused += 1
                    client.close()
                } else {
                    #expect(answer["type"] == "status")
                    extra.append(client)
                }
            }
            #expect(extra.count == 23 && refused == 7, "served \(extra.count), refused \(refused)")
            try await waitUntil("the refusals to be logged") { hub.errorLines.contains { $0.contains("--max-clients 24") } }
            // The attached client is still served.
            try first.send(["type": "dispatch", "id": 1, "action": ["type": "set", "path": "/a", "value": 1]])
            do { #expect(try first.receive()["seq"] == 1) } catch {
                throw HarnessError("the attached client: \(error); hub: \(hub.errorLines.suffix(6))")
            }
            // Free some: new connections are served again.
            extra.forEach { $0.close() }
            extra.removeAll()
            try await waitUntil("the hub to serve again") { (try? HubStatusProbe.status(fixture.socket))?.seq == 1 }
            #expect(hub.isRunning)
        }

        @Test("--max-clients: the next connection gets too-many-clients, and one more is served once one leaves")
        func maxClients() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let hub = try await fixture.startHub(app: "json", extra: ["--max-clients", "2"])
            let a = try fixture.attachedRawClient(name: "a")
            defer { a.close() }
            let b = try RawClient(path: fixture.socket)
            try b.send(["type": "status"])
            #expect(try b.receive()["type"] == "status")
            let c = try RawClient(path: fixture.socket)
            defer { c.close() }
            let refusal = try c.receive()
            #expect(refusal["type"] == "error" && refusal["error"]?["code"] == "too-many-clients", "\(refusal)")
            b.close()
            try await waitUntil("a slot to free up") { (try? HubStatusProbe.status(fixture.socket)) != nil }
            #expect(hub.isRunning)
        }
    }
}
