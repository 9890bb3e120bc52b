import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NATSClient
import StoreHub
import SyncProtocol
import Testing

extension MultiProcessTests {
    /// What another client of the same NATS server can do to the hubs of a stream, when it can
    /// publish to the stream's subjects but does not hold the key: nothing it publishes is
    /// applied, no hub stops, and every hub skips the same messages.
    @Suite("Shared log: records no outsider can forge", .enabled(if: natsServerPath != nil, Comment(rawValue: natsMissing)))
    struct ForgedRecords {
        @Test("garbage, a forged record, a copy under another seq, a message on the genesis subject and a stored status are skipped alike by two hubs; the victim's real dispatch is applied")
        func outsidersCannotWrite() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let nats = try NATSServer(fixture: fixture)
            try await nats.start()
            let hubs = SharedHubs(fixture: fixture, nats: [nats])
            async let first = hubs.start(0)
            async let second = hubs.start(1)
            let (hub0, hub1) = try await (first, second)

            let (victim, welcome) = try hubs.attach(0, session: "victim-session")
            defer { victim.close() }
            let replica = try #require(welcome["replica"]?.intValue)
            try victim.send(["type": "dispatch", "id": "victim-1", "action": setAction("/a", 1)])
            let applied = try next(victim, "the action of victim-1") { $0["type"] == "action" }
            #expect(applied["seq"] == 1)

            // An outsider: a plain NATS client that may publish to the stream's subjects.
            let outsider = try NATSConnection.connect(servers: [nats.address], name: "outsider")
            defer { outsider.close() }
            let actions = "storesync.\(hubs.stream).actions"
            let forged: JSON = ["action": setAction("/owned", 1), "id": "victim-next", "origin": JSON(replica), "seq": 2,
                                "session": "victim-session"]
            _ = try outsider.request(actions, payload: Array("oops".utf8))
            _ = try outsider.request(actions, payload: forged.canonicalBytes)
            _ = try outsider.request(actions, payload: forged.canonicalBytes,
                                     headers: NATSHeaders([("StoreSync-Auth", "hmac-sha256:00000000:" + String(repeating: "ab", count: 32))]))
            _ = try outsider.request("storesync.\(hubs.stream).genesis", payload: Array("{}".utf8))
            _ = try outsider.request(actions, payload: [],
                                     headers: NATSHeaders([("Nats-Consumer-Stalled", "$JS.API.STREAM.PURGE.\(hubs.stream)")], status: 100))

            // The victim's real dispatch with the id the forgery used: applied, never "duplicate".
            try victim.send(["type": "dispatch", "id": "victim-next", "action": setAction("/b", 2)])
            let real = try next(victim, "the action of victim-next") { $0["type"] == "action" || $0["type"] == "duplicate" }
            #expect(real["type"] == "action" && real["seq"] == 2, "\(real)")

            let statuses = try await hubs.settled([0, 1], at: 2)
            #expect(Set(statuses.map(\.digest)).count == 1)
            #expect(statuses.allSatisfy { $0.seq == 2 })
            for status in statuses {
                #expect(status.log?["skipped"] == 5, "\(String(describing: status.log))")
                #expect(status.log?["authenticated"] == true)
            }
            let state = try #require(try hubs.attach(1).1["state"])
            #expect(state == ["a": 1, "b": 2], "\(state)")
            // The stream was not purged, and no hub stopped.
            #expect(hub0.isRunning && hub1.isRunning)
            let info = try outsider.jetStream("STREAM.INFO." + hubs.stream, nil)
            #expect(info["state"]?["messages"] == 8, "\(String(describing: info["state"]))")
            #expect(hub0.errorLines.contains { $0.contains("skipped stream seq 3 of \(hubs.stream)") && $0.contains("no StoreSync-Auth tag") }, "\(hub0.errorLines)")
        }

        @Test("a hub on a shared log without a key refuses to start and says how to make one")
        func keyRequired() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let hub = try fixture.spawn("hubd", ["--socket", fixture.socket, "--log", "nats://127.0.0.1:1/S"])
            #expect(try await hub.waitForExit() == 2)
            #expect(hub.errorLines.contains { $0.contains("head -c 32 /dev/urandom | base64") && $0.contains("--log-key-file") })
        }
    }
}

extension MultiProcessTests {
    @Suite("Shared log: replicas hear when the hub cannot write its log", .enabled(if: natsServerPath != nil, Comment(rawValue: natsMissing)))
    struct LogNotices {
        @Test("nats-server killed: attached replicas get log available false with the reason, then true once it is back; the link stays up")
        func replicasAreTold() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let nats = try NATSServer(fixture: fixture)
            try await nats.start()
            let hubs = SharedHubs(fixture: fixture, nats: [nats])
            try await hubs.start(0)
            let (client, _) = try hubs.attach(0)
            defer { client.close() }
            try client.send(["type": "dispatch", "id": 1, "action": setAction("/a", 1)])
            _ = try next(client, "the action") { $0["type"] == "action" }
            try await nats.kill()
            let down = try next(client, "log available false") { $0["type"] == "log" }
            #expect(down["available"] == false, "\(down)")
            #expect(down["reason"]?.stringValue?.contains("cannot reach its log") == true, "\(down)")
            #expect(down["seq"] == 1)
            try await nats.start()
            let back = try next(client, "log available true") { $0["type"] == "log" }
            #expect(back["available"] == true, "\(back)")
            try client.send(["type": "dispatch", "id": 2, "action": setAction("/a", 2)])
            let applied = try next(client, "the action after the outage") { $0["type"] == "action" || $0["type"] == "reject" }
            #expect(applied["type"] == "action" && applied["seq"] == 2, "\(applied)")
        }
    }
}
