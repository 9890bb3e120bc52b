import Foundation
import SyncProtocol
import Testing

extension MultiProcessTests {
    @Suite("Protocol faults")
    struct ProtocolFaults {
        /// Connects a raw client, optionally attaches, sends `bytes`, and returns the error code before EOF.
        static func errorCode(_ socket: String, hello: Bool, send bytes: [UInt8]) throws -> String? {
            let client = try RawClient(path: socket)
            defer { client.close() }
            if hello {
                try client.send(["type": "hello", "protocol": 1, "app": "json"])
                guard try client.receive()["type"] == "welcome" else { return nil }
            }
            try client.sendBytes(bytes)
            var code: String?
            while let message = try client.receiveOrEOF() {
                if message["type"] == "error" { code = message["error"]?["code"]?.stringValue }
            }
            return code
        }

        static func frame(_ text: String) throws -> [UInt8] {
            var bytes: [UInt8] = []
            try Frame.append(payload: Array(text.utf8), to: &bytes)
            return bytes
        }

        @Test("each kind of bad input gets its error code and a close, and the hub serves on")
        func faults() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let hub = try await fixture.startHub(extra: ["--max-frame-bytes", "1000"])
            let watcher = try fixture.cli(["watch"])
            try await waitUntil("the watcher to attach") { try HubStatusProbe.status(fixture.socket).replicas.count == 1 }

            let cases: [(String, Bool, [UInt8], String)] = [
                ("zero length", true, [0, 0, 0, 0], "bad-frame"),
                ("oversized length", true, [0, 0, 0x03, 0xE9], "frame-too-large"),
                ("huge length", false, [0xFF, 0xFF, 0xFF, 0xFF], "frame-too-large"),
                ("not JSON", true, try Self.frame("{nope"), "bad-json"),
                ("invalid UTF-8", true, [0, 0, 0, 3, 0x22, 0xC3, 0x22], "bad-json"),
                ("not an object", true, try Self.frame("[1,2]"), "bad-json"),
                ("no type", true, try Self.frame(#"{"id":1}"#), "bad-json"),
                ("unknown type", true, try Self.frame(#"{"type":"teleport"}"#), "unknown-type"),
                ("dispatch before hello", false, try Self.frame(#"{"type":"dispatch","id":1,"action":{"type":"set","path":"/a","value":1}}"#), "not-attached"),
                ("dispatch without id", true, try Self.frame(#"{"type":"dispatch","action":{}}"#), "bad-frame"),
                ("protocol 2", false, try Self.frame(#"{"type":"hello","protocol":2,"app":"json"}"#), "protocol-mismatch"),
                ("other app", false, try Self.frame(#"{"type":"hello","protocol":1,"app":"counter"}"#), "app-mismatch"),
                ("other fingerprint", false, try Self.frame(#"{"type":"hello","protocol":1,"app":"json","fingerprint":"json@0"}"#), "app-mismatch"),
                ("second hello", true, try Self.frame(#"{"type":"hello","protocol":1,"app":"json"}"#), "already-attached"),
            ]
            for (name, hello, bytes, expected) in cases {
                #expect(try Self.errorCode(fixture.socket, hello: hello, send: bytes) == expected, "\(name)")
            }
            // Unknown members are ignored (forward compatibility); the watcher never noticed anything.
            let client = try RawClient(path: fixture.socket)
            defer { client.close() }
            try client.send(["type": "hello", "protocol": 1, "app": "json", "future": ["x": 1]])
            #expect(try client.receive()["type"] == "welcome")
            try client.send(["type": "dispatch", "id": "a", "action": ["type": "set", "path": "/ok", "value": true], "extra": 1])
            let ack = try client.receive()
            #expect(ack["type"] == "action")
            #expect(ack["seq"] == 1)
            #expect(ack["id"] == "a")
            try await watcher.waitForLine("the one action") { $0.contains(#""seq":1"#) }
            #expect(watcher.isRunning)
            #expect(hub.isRunning)
            #expect(watcher.events.filter(\.isAction).count == 1)
        }

        @Test("a rejected action reaches no replica and leaves every state unchanged")
        func rejectedReachesNoReplica() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            try await fixture.startHub()
            let watcher = try fixture.cli(["watch"])
            let other = try fixture.cli(["attach", "--json"])
            _ = try await other.attachedLine()
            try await waitUntil("both to attach") { try HubStatusProbe.status(fixture.socket).replicas.count == 2 }
            #expect(try await fixture.runCLI(["dispatch", "set /a 1"]).out == ["1"])
            let before = try HubStatusProbe.status(fixture.socket)

            let rejected = try await fixture.runCLI(["dispatch", #"{"type":"increment","path":"/a/b"}"#])
            #expect(rejected.status == 1)
            #expect(rejected.err == ["replica-cli: rejected: cannot descend into /a: it is a number, not an object or array"] || rejected.err.first?.hasPrefix("replica-cli: rejected: ") == true)
            let undecodable = try await fixture.runCLI(["dispatch", #"{"type":"set","value":1}"#])
            #expect(undecodable.status == 1)
            #expect(undecodable.err.first?.hasPrefix("replica-cli: bad-action: ") == true)

            let after = try HubStatusProbe.status(fixture.socket)
            #expect(after.seq == before.seq)
            #expect(after.digest == before.digest)
            #expect(try await fixture.runCLI(["dispatch", "set /b 2"]).out == ["2"])
            try await watcher.waitForLine("seq 2") { $0.contains(#""seq":2"#) }
            other.write(":digest\n")
            let digest = try await other.waitForLine("its digest") { $0.contains(#""type":"digest""#) }
            #expect(digest.contains(try HubStatusProbe.status(fixture.socket).digest))
            let seen = watcher.events.filter(\.isAction)
            #expect(seen.map(\.seq) == [1, 2])
            #expect(seen.allSatisfy { $0.json["action"]?["type"] == "set" })
            #expect(other.events.filter(\.isAction).map(\.seq) == [1, 2])
        }

        @Test("state --pointer and --json, status --json, and the app taken from the hub")
        func cliOutputs() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            try await fixture.startHub(app: "todos")
            let add = try await fixture.runCLI(["dispatch", #"{"type":"add","id":"t1","title":"Buy milk","createdAt":1700000000000}"#, "toggle t1"])
            #expect(add.out == ["1", "2"])
            let title = try await fixture.runCLI(["state", "--pointer", "/todos/0/title"])
            #expect(title.out == [#""Buy milk""#])
            let state = try await fixture.runCLI(["state", "--json"])
            let json = try JSON(parsing: try #require(state.out.first))
            let status = try await fixture.runCLI(["status", "--json"])
            let statusJSON = try JSON(parsing: try #require(status.out.first))
            #expect(json["digest"] == statusJSON["digest"])
            #expect(json["seq"] == 2)
            #expect(json["state"]?["todos"]?.arrayValue?.first?["completed"] == true)
            #expect(statusJSON["app"] == "todos")
            #expect(statusJSON["fingerprint"] == "todos@2")
            let mismatch = try await fixture.runCLI(["--app", "counter", "state"])
            #expect(mismatch.status == 1)
            #expect(mismatch.err.first?.contains("app-mismatch") == true)
        }
    
        @Test("a replica that does not read is dropped with slow-consumer; the others carry on")
        func slowConsumer() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            try await fixture.startHub(extra: ["--max-queue-bytes", "65536"])
            let sleeper = try fixture.attachedRawClient(name: "sleeper")   // and then never reads
            defer { sleeper.close() }
            let writer = try fixture.cli(["attach", "--json", "--name", "writer"])
            _ = try await writer.attachedLine()
            // Large values fill the sleeper's socket buffer and then the hub's queue for it.
            let big = String(repeating: "x", count: 4000)
            writer.feed((0..<400).map { "set /v/\($0 % 10) \(big)" }.joined(separator: "\n") + "\n:digest\n")
            try await writer.waitForLine("its digest", where: { $0.contains(#""type":"digest""#) })
            try await waitUntil("the hub to drop the sleeper") {
                try !HubStatusProbe.status(fixture.socket).replicas.contains { $0.name == "sleeper" }
            }
            var lastError: JSON?
            while let message = try sleeper.receiveOrEOF() {
                if message["type"] == "error" { lastError = message }
            }
            #expect(lastError?["error"]?["code"] == "slow-consumer")
            #expect(writer.events.filter(\.isAction).count == 400)
            #expect(try HubStatusProbe.status(fixture.socket).seq == 400)
        }

        @Test("a client that half-closes after dispatching still gets its acknowledgement")
        func halfClose() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            try await fixture.startHub()
            let client = try RawClient(path: fixture.socket)
            defer { client.close() }
            try client.send(["type": "hello", "protocol": 1, "app": "json"])
            try client.send(["type": "dispatch", "id": 7, "action": ["type": "append", "path": "/l", "value": 1]])
            client.shutdownWrite()
            var messages: [JSON] = []
            while let message = try client.receiveOrEOF() { messages.append(message) }
            #expect(messages.map { $0["type"] } == ["welcome", "action"])
            #expect(messages.last?["id"] == 7)
            #expect(messages.last?["seq"] == 1)
        }
    
        @Test("a client that half-closes after a thousand pipelined dispatches and a sync gets every answer before the close")
        func halfCloseAfterBurst() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            try await fixture.startHub()
            let client = try RawClient(path: fixture.socket)
            defer { client.close() }
            var burst = try Frame.encode(["type": "hello", "protocol": 1, "app": "json"])
            for index in 1...1_000 {
                burst.append(contentsOf: try Frame.encode(["type": "dispatch", "id": JSON(index),
                                                       "action": ["type": "increment", "path": "/n"]]))
            }
            burst.append(contentsOf: try Frame.encode(["type": "sync", "id": "last"]))
            try client.sendBytes(burst)
            client.shutdownWrite()
            var messages: [JSON] = []
            while let message = try client.receiveOrEOF() { messages.append(message) }
            #expect(messages.first?["type"] == "welcome")
            #expect(messages.filter { $0["type"] == "action" }.count == 1_000)
            #expect(messages.last?["type"] == "synced")
            #expect(messages.last?["seq"] == 1_000)
            #expect(messages.last?["id"] == "last")
        }

        @Test("a bad frame after good ones: the good ones are answered (own actions included) before the error")
        func errorAfterGoodFrames() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            try await fixture.startHub()
            let client = try RawClient(path: fixture.socket)
            defer { client.close() }
            var bytes = try Frame.encode(["type": "hello", "protocol": 1, "app": "json"])
            bytes.append(contentsOf: try Frame.encode(["type": "dispatch", "id": 1, "action": ["type": "set", "path": "/a", "value": 1]]))
            bytes.append(contentsOf: try Frame.encode(["type": "status"]))
            bytes.append(contentsOf: try Self.frame("{not json"))
            try client.sendBytes(bytes)
            var messages: [JSON] = []
            while let message = try client.receiveOrEOF() { messages.append(message) }
            #expect(messages.map { $0["type"] } == ["welcome", "action", "status", "error"])
            guard messages.count == 4 else { return }
            #expect(messages[1]["id"] == 1)
            #expect(messages[2]["seq"] == 1)
            #expect(messages.last?["error"]?["code"] == "bad-json")
            // The action was sequenced once, and the hub serves on.
            #expect(try HubStatusProbe.status(fixture.socket).seq == 1)
        }

        @Test("thousands of frames pipelined in one write are all handled, in order, across loop passes, and another client is served meanwhile")
        func pipelinedBurst() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            try await fixture.startHub()
            let client = try fixture.attachedRawClient()
            defer { client.close() }
            let other = try fixture.attachedRawClient(name: "other")
            defer { other.close() }
            var burst: [UInt8] = []
            for index in 1...3_000 {
                burst.append(contentsOf: try Frame.encode(["type": "dispatch", "id": JSON(index),
                                                       "action": ["type": "increment", "path": "/n"]]))
            }
            burst.append(contentsOf: try Frame.encode(["type": "status"]))
            try client.sendBytes(burst)
            // Sent right after the burst: with a per-connection budget per loop pass, the hub
            // handles it long before it reaches the end of the burst (without one, it would
            // be sequenced 3,001st).
            try other.send(["type": "dispatch", "id": "other", "action": ["type": "increment", "path": "/n"]])
            var ids: [Int] = []
            var otherSeq: Int?
            while true {
                let message = try client.receive()
                if message["type"] == "status" {
                    #expect(message["seq"] == 3_001)
                    break
                }
                #expect(message["seq"]?.intValue == ids.count + 1 + (otherSeq == nil ? 0 : 1))
                if message["id"] == "other" {
                    otherSeq = message["seq"]?.intValue
                } else {
                    ids.append(message["id"]?.intValue ?? -1)
                }
            }
            #expect(ids == Array(1...3_000))
            let seq = try #require(otherSeq, "the other client's action never reached this replica")
            #expect(seq < 3_001, "the other client waited for the whole burst: no fairness across loop passes")
        }
    }
}
