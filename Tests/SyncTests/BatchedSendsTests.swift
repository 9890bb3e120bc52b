#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import BuiltinApps
@testable import StoreReplica
import SyncCore
import SyncPOSIX
import Testing

/// An `Upstream` over one end of a socket pair, and the other end to read what it wrote.
private final class Pair {
    let upstream: Upstream
    let peer: Int32

    init() throws {
        let (end, other) = try UnixSocket.makeSocketPair()
        upstream = Upstream(fd: end, maxPayloadBytes: 1 << 20)
        peer = other
    }

    deinit {
        upstream.closeDescriptor(reason: "test over")
        UnixSocket.close(peer)
    }

    /// Whether the peer can read something now.
    var peerHasData: Bool { UnixSocket.waitUntil(peer, timeoutMilliseconds: 0) }

    /// Reads frames until `count` have arrived (or a deadline passes), returning their ids.
    func readIDs(_ count: Int) -> [Int] {
        var decoder = FrameDecoder()
        var ids: [Int] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        let deadline = ContinuousClock.now + scaled(.seconds(10))
        while ids.count < count, ContinuousClock.now < deadline {
            guard UnixSocket.waitUntil(peer, timeoutMilliseconds: 100) else { continue }
            let result = buffer.withUnsafeMutableBytes { UnixSocket.read(peer, into: $0) }
            guard case .bytes(let n) = result else { break }
            buffer.withUnsafeBytes { decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
            while let payload = try? decoder.nextFrame(), !payload.isEmpty {
                if case .dispatch(.number(let id), _)? = try? ClientMessage(json: JSON(parsing: payload)) { ids.append(id) }
            }
        }
        return ids
    }
}

private let action = WireAction(["type": "increment"])

@Suite("withBatchedSends: dispatches held until the batch ends, then written together")
struct BatchedSendsTests {
    @Test("inside a batch nothing is written; its end writes every frame, in order")
    func heldThenWritten() throws {
        let pair = try Pair()
        pair.upstream.beginBatch()
        for id in 1...10 { #expect(pair.upstream.sendDispatch(id: .number(id), action: action) == .sent) }
        #expect(!pair.peerHasData, "a batch holds its frames")
        // Nested: only the outermost end writes.
        pair.upstream.beginBatch()
        #expect(pair.upstream.sendDispatch(id: .number(11), action: action) == .sent)
        pair.upstream.endBatch()
        #expect(!pair.peerHasData)
        pair.upstream.endBatch()
        #expect(pair.readIDs(11) == Array(1...11))
        // After the batch, a send is written at once again.
        #expect(pair.upstream.sendDispatch(id: .number(12), action: action) == .sent)
        #expect(pair.readIDs(1) == [12])
    }

    @Test("a batch holds at most 64 KiB: past it, frames go out before the end, still in order")
    func boundedHold() throws {
        let pair = try Pair()
        let big = WireAction(["type": "set", "path": "/a", "value": .string(String(repeating: "x", count: 10_000))])
        pair.upstream.beginBatch()
        for id in 1...20 { #expect(pair.upstream.sendDispatch(id: .number(id), action: big) == .sent) }
        // 20 frames of 10 KB are over the bound: some were written while the batch is open.
        var readable = false
        let deadline = ContinuousClock.now + scaled(.seconds(10))
        while !readable, ContinuousClock.now < deadline { readable = UnixSocket.waitUntil(pair.peer, timeoutMilliseconds: 50) }
        #expect(readable, "past the bound, frames must not wait for the batch's end")
        pair.upstream.endBatch()
        #expect(pair.readIDs(20) == Array(1...20))
    }

    @Test("through a replica: every dispatch of a batch is sequenced once and applied, in order")
    func throughReplica() async throws {
        let hub = try InProcessHub(JSONApp())
        let replica = try hub.attach()
        defer { replica.close() }
        let path = try JSONPointer("/log")
        try await replica.dispatch(.set(path, []))
        let sent = replica.withBatchedSends { () -> Int in
            for index in 0..<500 { replica.store.dispatch(.append(path, .number(Double(index)))) }
            return 500
        }
        #expect(sent == 500)
        try await replica.sync()
        #expect(replica.store.state["log"]?.arrayValue?.compactMap(\.intValue) == Array(0..<500))
        // A throwing body still sends what it dispatched.
        struct Stop: Error {}
        #expect(throws: Stop.self) {
            try replica.withBatchedSends { () throws(Stop) in
                replica.store.dispatch(.append(path, 500))
                throw Stop()
            }
        }
        try await replica.sync()
        #expect(replica.store.state["log"]?.arrayValue?.count == 501)
        try await hub.stop()
    }
}
