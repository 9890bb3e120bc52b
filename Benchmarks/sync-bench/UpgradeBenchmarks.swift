import BuiltinApps
import Foundation
import StoreHub
import SyncCore
import SyncPOSIX

/// Frames off one raw connection, each parsed.
private final class FrameReader {
    let fd: Int32
    private var decoder = FrameDecoder(maxPayloadBytes: 1 << 30)
    private var buffer = [UInt8](repeating: 0, count: 1 << 20)
    private var ready: [JSON] = []

    init(socket: String) throws { fd = try UnixSocket.connect(to: socket) }
    deinit { UnixSocket.close(fd) }

    func send(_ json: JSON) throws { try UnixSocket.writeAll(fd, Frame.encode(json)) }

    /// The next message.
    func next() throws -> JSON {
        while ready.isEmpty {
            let n = buffer.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { throw SystemError("the hub closed the benchmark's connection") }
            buffer.withUnsafeBytes { decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            while let frame = try decoder.nextFrame() { ready.append(try JSON(parsing: frame)) }
        }
        return ready.removeFirst()
    }

    /// Reads until a message of `type`.
    func next(_ type: String) throws -> JSON {
        while true {
            let message = try next()
            if message["type"] == .string(type) { return message }
        }
    }
}

/// The pause an upgrade costs at the hub: a todos@1 history of about `stateBytes` (todos of
/// about 1 KiB) in a data directory (`--fsync batch`), a todos@2 replica waiting; from the
/// `upgrade` request to that replica's first dispatch acknowledged under todos@2, its full
/// welcome of the migrated state read on the way.
func upgradePause(stateBytes: Int) throws -> Result {
    var samples: [Double] = []
    let todos = max(1, stateBytes / 1_024)
    let title = String(repeating: "t", count: 960)
    for _ in 0..<3 {
        let hub = try BenchHub(app: TodosV1App(), fsync: .batch) { $0.versions = TodosApp().versions }
        defer { hub.stop() }
        let writer = try FrameReader(socket: hub.socket)
        try writer.send(["type": "hello", "protocol": 1, "app": "todos", "fingerprint": "todos@1"])
        _ = try writer.next("welcome")
        var chunk: [UInt8] = []
        for index in 0..<todos {
            chunk += try Frame.encode(ClientMessage.dispatch(id: .number(index), action: [
                "type": "add", "id": .string("t\(index)"), "title": .string(title), "createdAt": 1_700_000_000_000,
            ]))
        }
        try UnixSocket.writeAll(writer.fd, chunk)
        for _ in 0..<todos { _ = try writer.next("action") }
        let waiting = try FrameReader(socket: hub.socket)
        try waiting.send(["type": "hello", "protocol": 1, "app": "todos", "fingerprint": "todos@2"])
        _ = try waiting.next("waiting")
        let admin = try FrameReader(socket: hub.socket)
        let start = ContinuousClock.now
        try admin.send(["type": "upgrade", "id": "bench", "to": "todos@2"])
        let welcome = try waiting.next("welcome")
        guard welcome["fingerprint"] == "todos@2" else { throw SystemError("the welcome is not of todos@2: \(welcome["fingerprint"] ?? .null)") }
        try waiting.send(["type": "dispatch", "id": 1, "action": ["type": "setDue", "id": "t0", "due": 1_767_225_600_000]])
        _ = try waiting.next("action")
        samples.append(nanoseconds(ContinuousClock.now - start) / 1e6)
        guard try admin.next()["changed"] == true else { throw SystemError("the upgrade was not made") }
    }
    return Result(scenario: "upgrade", params: [("state_bytes", JSON(stateBytes))], metrics: [("ms", median(samples))])
}
