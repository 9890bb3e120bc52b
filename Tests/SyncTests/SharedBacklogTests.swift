import BuiltinApps
import Foundation
@testable import StoreHub
import SyncCore
import SyncPOSIX
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `n` frames of `size` bytes each whose bytes all equal their seq (mod 256), back to back.
private func frames(seqs: ClosedRange<UInt64>, size: Int) -> (bytes: [UInt8], starts: [Int]) {
    var bytes: [UInt8] = []
    var starts: [Int] = []
    for seq in seqs {
        starts.append(bytes.count)
        bytes.append(contentsOf: repeatElement(UInt8(truncatingIfNeeded: seq), count: size))
    }
    return (bytes, starts)
}

/// Writes what a connection is owed in pieces of at most `step` bytes (as a socket taking a
/// little at a time would) and returns the bytes in the order they would reach the client.
private func drain(_ connection: inout ConnectionOutput, _ backlog: Backlog, step: Int) -> [UInt8] {
    var written: [UInt8] = []
    while connection.pending(end: backlog.end) > 0 {
        let taken: [UInt8] = connection.withOutput(backlog: backlog, maxPieces: 3) { vectors in
            var bytes: [UInt8] = []
            for vector in vectors where bytes.count < step {
                let piece = UnsafeRawBufferPointer(start: vector.iov_base, count: vector.iov_len)
                bytes.append(contentsOf: piece.prefix(step - bytes.count))
            }
            return bytes
        }
        guard !taken.isEmpty else { break }
        connection.consume(taken.count)
        written.append(contentsOf: taken)
    }
    return written
}

@Suite("The shared backlog: one copy of every frame, a position per replica")
struct SharedBacklogTests {
    @Test("positions, seqs and frame ends; the resume window follows the budget; compaction keeps what readers need")
    func backlogPositions() {
        // Blocks of 25 bytes: two 10-byte frames each (a frame never straddles two blocks).
        let backlog = Backlog(minimumActions: 2, maximumBytes: 30, blockBytes: 25)
        let first = frames(seqs: 1...5, size: 10)
        backlog.append(first.bytes, starts: first.starts, first: 1)
        // 50 bytes appended; the budget keeps 3 frames (30 bytes, more than the minimum of 2).
        #expect(backlog.end == 50 && backlog.lastSeq == 5 && backlog.heldStart == 20 && backlog.count == 3)
        #expect(backlog.position(after: 2) == 20 && backlog.position(after: 5) == 50 && backlog.position(after: 1) == nil)
        #expect(backlog.seq(before: 20) == 2 && backlog.seq(before: 25) == 2 && backlog.seq(before: 30) == 3)
        #expect(backlog.seq(before: 50) == 5 && backlog.seq(before: 5) == 0)
        #expect(backlog.frameEnd(containing: 25) == 30 && backlog.frameEnd(containing: 30) == 30)
        #expect(backlog.residentBytes == 75)
        // A reader at 5 keeps frame 1's block in memory; without it, whole blocks before the window go.
        backlog.compact(keepingFrom: 5)
        #expect(backlog.inMemory(5) && backlog.residentBytes == 75)
        backlog.compact(keepingFrom: 50)
        #expect(!backlog.inMemory(5) && !backlog.inMemory(19) && backlog.inMemory(20) && backlog.residentBytes == 50)
        #expect(backlog.copy(from: 20, to: 30) == Array(repeating: 3, count: 10))
        // A range across blocks is gathered as one buffer per block.
        var vectors: [iovec] = []
        #expect(backlog.gather(from: 25, to: 50, into: &vectors, limit: 8) == 50 && vectors.count == 2)
        #expect(backlog.copy(from: 25, to: 45) == Array(repeating: 3, count: 5) + Array(repeating: 4, count: 10) + Array(repeating: 5, count: 5))
        // Many frames later, memory stays at the window plus one block.
        for seq in stride(from: UInt64(6), through: 1_000, by: 1) {
            let one = frames(seqs: seq...seq, size: 10)
            backlog.append(one.bytes, starts: one.starts, first: seq)
            backlog.compact(keepingFrom: backlog.end)
        }
        #expect(backlog.lastSeq == 1_000 && backlog.residentBytes <= 30 + 2 * 25)
        #expect(backlog.position(after: 997) == backlog.end - 30 && backlog.seq(before: backlog.end - 15) == 998)
        // Positions keep growing across a reset.
        let end = backlog.end
        backlog.reset(after: 1_009)
        #expect(backlog.end == end && backlog.lastSeq == 1_009 && backlog.count == 0)
    }

    @Test("a window of no frames (minimum 0, budget 0) still keeps what a reader needs, and seqs stay contiguous")
    func emptyWindowKeepsReaders() {
        let backlog = Backlog(minimumActions: 0, maximumBytes: 0, blockBytes: 16)
        var connection = ConnectionOutput()
        connection.cursor = backlog.end
        connection.follows = true
        for seq in UInt64(1)...4 {
            let one = frames(seqs: seq...seq, size: 8)
            backlog.append(one.bytes, starts: one.starts, first: seq)
            #expect(backlog.count == 0 && backlog.lastSeq == seq)
            backlog.compact(keepingFrom: connection.cursor ?? backlog.end)
        }
        // Nothing is held for resuming, but the reader still gets every frame, in order.
        #expect(backlog.position(after: 0) == nil && backlog.position(after: 4) == backlog.end)
        #expect(drain(&connection, backlog, step: 5) == (1...4).flatMap { Array(repeating: UInt8($0), count: 8) })
    }

    @Test("private messages go out exactly between the shared frames they were queued after, however the socket splits writes")
    func privateMessagesInterleave() {
        for step in [1, 3, 7, 10, 64, 1000] {
            let backlog = Backlog(minimumActions: 100, maximumBytes: 1 << 20)
            var connection = ConnectionOutput()
            connection.queue([200, 200], after: 0)          // a status reply before attaching
            let batch1 = frames(seqs: 1...2, size: 4)
            backlog.append(batch1.bytes, starts: batch1.starts, first: 1)
            connection.cursor = backlog.end                 // attached after seq 2
            connection.follows = true
            connection.queue([201], after: backlog.end)     // its welcome
            let batch2 = frames(seqs: 3...4, size: 4)
            backlog.append(batch2.bytes, starts: batch2.starts, first: 3)
            connection.queue([202, 202, 202], after: backlog.end) // a synced after seq 4
            let batch3 = frames(seqs: 5...5, size: 4)
            backlog.append(batch3.bytes, starts: batch3.starts, first: 5)
            let expected: [UInt8] = [200, 200, 201] + batch2.bytes + [202, 202, 202] + batch3.bytes
            #expect(connection.pending(end: backlog.end) == expected.count)
            #expect(drain(&connection, backlog, step: step) == expected, "step \(step)")
            #expect(connection.cursor == backlog.end)
        }
    }

    @Test("a replica leaving the stream half-way through a frame gets the rest of it, then only what was due before")
    func leaveMidFrame() {
        let backlog = Backlog(minimumActions: 100, maximumBytes: 1 << 20)
        var connection = ConnectionOutput()
        connection.cursor = backlog.end
        connection.follows = true
        let batch = frames(seqs: 1...3, size: 6)
        backlog.append(batch.bytes, starts: batch.starts, first: 1)
        connection.queue([99], after: backlog.end) // promised after seq 3: never sent
        // The socket took frame 1 and half of frame 2.
        connection.consume(9)
        #expect(connection.cursor == 9)
        let cursor = connection.cursor ?? 0
        let rest = backlog.copy(from: cursor, to: backlog.frameEnd(containing: cursor))
        connection.leaveStream(carry: rest)
        connection.queue([77], after: 0) // the error
        #expect(drain(&connection, backlog, step: 4) == Array(repeating: 2, count: 3) + [77])
        #expect(connection.cursor == nil)
    }

    @Test("stalled replicas share one backlog: each is dropped past --max-queue-bytes with a whole stream, the reader keeps going")
    func stalledReplicasShareOneCopy() async throws {
        let hub = try InProcessHub(JSONApp()) { configuration in
            configuration.maxQueuedBytesPerReplica = 256 << 10
            configuration.backlogBytes = 64 << 10
            configuration.retainedActions = 100
        }
        defer { Task { try? await hub.stop() } }
        let stalled = try (0..<6).map { _ in try hub.fixture.attachedRawClient(name: "stalled") }
        defer { stalled.forEach { $0.close() } }
        let writer = try hub.fixture.attachedRawClient(name: "writer")
        defer { writer.close() }
        let count = 12_000
        let payload = String(repeating: "x", count: 60)
        var acked = 0
        for n in 1...count {
            try writer.send(["type": "dispatch", "id": JSON(n), "action": ["type": "set", "path": "/v", "value": .string("\(payload)\(n)")]])
            if n % 200 == 0 {
                // Keep the writer itself from falling behind: read its acks as it goes.
                while acked < n - 100 {
                    if try writer.receive()["type"] == "action" { acked += 1 }
                }
            }
        }
        while acked < count {
            if try writer.receive()["type"] == "action" { acked += 1 }
        }
        // Each stalled replica gets consecutive actions from seq 1, whole, then slow-consumer.
        for client in stalled {
            var next: UInt64 = 1
            var ended: JSON?
            while let message = try client.receiveOrEOF() {
                if message["type"] == "action" {
                    #expect(message["seq"]?.intValue == Int(next))
                    next += 1
                } else if message["type"] == "error" {
                    ended = message
                }
            }
            #expect(ended?["error"]?["code"] == "slow-consumer", "\(String(describing: ended))")
            #expect(next > 1 && next < UInt64(count))
        }
        // Nothing is held for them any more: the backlog's memory is its window.
        let status = try HubStatusProbe.status(hub.fixture.socket)
        #expect(status.seq == UInt64(count))
        #expect(status.replicas.map { $0.name } == ["writer"])
    }
}
