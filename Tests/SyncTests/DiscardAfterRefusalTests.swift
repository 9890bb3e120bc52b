import BuiltinApps
import Foundation
@testable import StoreHub
import SyncCore
import SyncProtocol
import Testing

/// PROTOCOL.md §4: after a frame the hub refuses (and closes the connection for), the frames
/// that came behind it in the same read are discarded, never acted on.
@Suite("Frames behind a refused frame are discarded")
struct DiscardAfterRefusalTests {
    @Test("a dispatch written in the same read as an unknown message type is not sequenced")
    func dispatchBehindRefusalIsDiscarded() async throws {
        let hub = try InProcessHub(JSONApp())
        defer { Task { try? await hub.stop() } }
        let client = try RawClient(path: hub.fixture.socket)
        defer { client.close() }
        try client.send(["type": "hello", "protocol": 1, "app": "json"])
        #expect(try client.receive()["type"] == "welcome")
        var bytes = try Frame.encode(["type": "no-such-type"])
        bytes += try Frame.encode(["type": "dispatch", "id": 1, "action": ["type": "set", "path": "/a", "value": 1]])
        try client.sendBytes(bytes)
        var answers: [JSON] = []
        while let answer = try client.receiveOrEOF() { answers.append(answer) }
        #expect(answers.contains { $0["type"] == "error" }, "\(answers)")
        #expect(!answers.contains { $0["type"] == "action" }, "\(answers)")
        let status = try HubStatusProbe.status(hub.fixture.socket)
        #expect(status.seq == 0)
    }
}
