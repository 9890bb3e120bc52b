import BuiltinApps
import Foundation
@testable import StoreHub
import SyncCore
import Testing

/// Which connection keeps a session when two say `hello` with it: the one the hub accepted
/// last, whatever order their hellos are handled in (docs/PROTOCOL.md §12, "One connection per
/// session").
@Suite("Sessions: the newest connection keeps its session")
struct SessionSupersedeTests {
    @Test("an abandoned hello on an older connection, handled after the newer connection's, is refused superseded; the newer stays attached")
    func abandonedHelloLoses() async throws {
        let hub = try InProcessHub(JSONApp())
        defer { Task { try? await hub.stop() } }
        // A client's first connection, whose hello it gave up on, then its reconnection. They
        // connect in this order, so the hub accepts them in this order (one listen queue).
        let older = try RawClient(path: hub.fixture.socket)
        defer { older.close() }
        let newer = try RawClient(path: hub.fixture.socket)
        defer { newer.close() }
        try newer.send(Self.hello(session: "s-abandoned"))
        let welcome = try newer.receive()
        #expect(welcome["type"] == "welcome", "\(welcome)")

        // The abandoned hello is handled only now, after the newer connection attached.
        try older.send(Self.hello(session: "s-abandoned"))
        let refusal = try older.receive()
        #expect(refusal["type"] == "error" && refusal["error"]?["code"] == "superseded", "\(refusal)")
        #expect(try older.receiveOrEOF() == nil, "the older connection is closed")

        // The newer connection was told nothing: its next message answers its own sync (an
        // error queued for it would come first), and it still dispatches on the session.
        try newer.send(["type": "sync", "id": "after"])
        let synced = try Self.receiveSkippingCheckpoints(newer)
        #expect(synced == ["type": "synced", "id": "after", "seq": 0], "\(synced)")
        try newer.send(["type": "dispatch", "id": 1, "action": ["type": "set", "path": "/a", "value": 1]])
        let action = try Self.receiveSkippingCheckpoints(newer)
        #expect(action["type"] == "action" && action["seq"] == 1 && action["origin"] == welcome["replica"], "\(action)")
        try newer.send(["type": "status"])
        let status = try Self.receiveSkippingCheckpoints(newer)
        #expect(status["type"] == "status", "\(status)")
        let attachedReplicas = status["replicas"]?.arrayValue?.compactMap { $0["replica"] } ?? []
        #expect(attachedReplicas == [welcome["replica"] ?? .null], "only the newer connection is attached: \(status)")

        // A connection made after both takes the session over, as always: the newest wins.
        let newest = try RawClient(path: hub.fixture.socket)
        defer { newest.close() }
        try newest.send(Self.hello(session: "s-abandoned"))
        #expect(try newest.receive()["type"] == "welcome")
        let superseded = try Self.receiveSkippingCheckpoints(newer)
        #expect(superseded["type"] == "error" && superseded["error"]?["code"] == "superseded", "\(superseded)")
        #expect(try newer.receiveOrEOF() == nil, "the newer connection is closed once the newest attached")
        // The session's ids carried over: the newest connection's re-send is a duplicate.
        try newest.send(["type": "dispatch", "id": 1, "action": ["type": "set", "path": "/a", "value": 2]])
        #expect(try Self.receiveSkippingCheckpoints(newest) == ["type": "duplicate", "id": 1, "seq": 1])
    }

    /// A `hello` for the json app with a session.
    ///
    /// - Parameter session: The session.
    /// - Returns: The message.
    private static func hello(session: String) -> JSON {
        ["type": "hello", "protocol": 1, "app": "json", "session": .string(session)]
    }

    /// The next message that is not a timed `checkpoint` (one may follow any action).
    ///
    /// - Parameter client: The connection to read.
    /// - Returns: The message.
    private static func receiveSkippingCheckpoints(_ client: RawClient) throws -> JSON {
        while true {
            let message = try client.receive()
            if message["type"] != "checkpoint" { return message }
        }
    }
}
