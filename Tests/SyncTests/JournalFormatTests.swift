import BuiltinApps
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
@testable import StoreHub
import StoreReplica
import SyncCore
import SyncPOSIX
import SyncLocks
import Synchronization
import Testing

/// A journal record of the json app setting `/l/-`… as `append`, for hand-made segments.
private func record(_ seq: UInt64) -> LogRecord {
    LogRecord(seq: seq, origin: 1, id: .number(Int(seq)), action: ["type": "append", "path": "/l", "value": JSON(seq)])
}

extension MultiProcessTests {
    @Suite("Journal: commit marks, formats, and what recovery keeps")
    struct JournalFormatTests {
        static func state(_ socket: String) throws -> JSON {
            let client = try RawClient(path: socket)
            defer { client.close() }
            try client.send(["type": "hello", "protocol": 1, "app": "json"])
            return try #require(try client.receive()["state"])
        }

        /// The newest segment of a data directory.
        static func newestSegment(_ data: String) throws -> String {
            let segments = try FileSystem.list(data).filter { $0.hasPrefix("journal-") && $0.hasSuffix(".log") }.sorted()
            return data + "/" + (try #require(segments.last))
        }

        /// Runs a json hub on `data`, appends `count` values to `/l`, and kills it.
        static func journal(_ count: Int, fixture: Fixture, data: String) async throws {
            let hub = try await fixture.startHub(extra: ["--data-dir", data])
            let client = try fixture.attachedRawClient()
            defer { client.close() }
            for n in 1...count {
                try client.send(["type": "dispatch", "id": JSON(n), "action": ["type": "append", "path": "/l", "value": JSON(n)]])
                _ = try client.receive()
            }
            hub.signal(SIGKILL)
            _ = try await hub.waitForExit()
        }

        static func append(_ bytes: [UInt8], to path: String) throws {
            let fd = try FileSystem.open(path, O_WRONLY | O_APPEND)
            defer { FileSystem.close(fd) }
            try FileSystem.writeAll(fd, bytes, path: path)
        }

        @Test("a group that reached the disk out of order (its commit mark whole, a record damaged) was never acknowledged: truncated, not refused")
        func outOfOrderGroup() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            try await Self.journal(3, fixture: fixture, data: data)
            let segment = try Self.newestSegment(data)
            let size = try #require(FileSystem.size(segment))
            // Records 4 and 5 and their mark, as one batch commit would write them; then the
            // first page of it "lost" (a byte of record 4 flipped), the mark reaching the disk.
            var group: [UInt8] = []
            JournalFormat.appendRecord(record(4), to: &group)
            JournalFormat.appendRecord(record(5), to: &group)
            JournalFormat.appendCommit(seq: 5, groupStart: 0, to: &group)
            group[20] ^= 0x40
            try Self.append(group, to: segment)
            let hub = try await fixture.startHub(extra: ["--data-dir", data])
            #expect(try Self.state(fixture.socket) == ["l": [1, 2, 3]])
            try await waitUntil("the truncation to be logged") {
                hub.errorLines.contains { $0.contains("torn tail at offset \(size)") && $0.contains("never acknowledged") && $0.contains("truncated") }
            }
            #expect(FileSystem.size(segment) == size)
            hub.signal(SIGTERM)
            #expect(try await hub.waitForExit() == 0)
        }

        @Test("damage before a complete commit is corruption; a seq that goes backwards is refused, naming file and offset")
        func damageAndBackwards() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            try await Self.journal(3, fixture: fixture, data: data)
            let segment = try Self.newestSegment(data)
            let size = try #require(FileSystem.size(segment))
            // A whole, committed group whose record goes back to seq 2.
            var group: [UInt8] = []
            JournalFormat.appendRecord(record(2), to: &group)
            JournalFormat.appendCommit(seq: 2, groupStart: 0, to: &group)
            try Self.append(group, to: segment)
            let backwards = try fixture.spawn("hubd", ["--socket", fixture.socket, "--app", "json", "--data-dir", data])
            #expect(try await backwards.waitForExit() == 4)
            #expect(backwards.errorLines.contains { $0.contains(segment) && $0.contains("offset \(size)") && $0.contains("backwards") },
                    "\(backwards.errorLines)")
            try FileSystem.truncate(segment, to: size)
            // A flipped byte in the first group, with later groups complete: corruption.
            var bytes = try FileSystem.read(segment)
            bytes[90] ^= 0x01
            try FileSystem.writeAtomically(segment, bytes)
            let corrupt = try fixture.spawn("hubd", ["--socket", fixture.socket, "--app", "json", "--data-dir", data])
            #expect(try await corrupt.waitForExit() == 4)
            #expect(corrupt.errorLines.contains { $0.contains(segment) && $0.contains("corrupt at offset") && $0.contains("complete commits follow") },
                    "\(corrupt.errorLines)")
        }

        @Test("a data directory of format 1 (no segment headers, no marks) still reads, and goes on in format 2")
        func formatOne() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            try FileSystem.makeDirectory(data)
            try FileSystem.writeAtomically(data + "/storesync.json",
                                           JSON.object(["app": "json@1", "format": 1, "history": "00000000000000ab"]).canonicalBytes)
            var legacy: [UInt8] = []
            for seq in UInt64(1)...4 { JournalFormat.appendRecord(record(seq), to: &legacy) }
            try FileSystem.writeAtomically(data + "/" + FileLog.segmentName(1), legacy)
            let check = try fixture.spawn("hubd", ["--check-data", data])
            #expect(try await check.waitForExit() == 0)
            #expect(check.lines.contains { $0.contains("format 1") && $0.contains("00000000000000ab") }, "\(check.lines)")
            let hub = try await fixture.startHub(extra: ["--data-dir", data])
            let client = try fixture.attachedRawClient()
            try client.send(["type": "dispatch", "id": 5, "action": ["type": "append", "path": "/l", "value": 5]])
            #expect(try client.receive()["seq"] == 5)
            client.close()
            hub.signal(SIGKILL)
            _ = try await hub.waitForExit()
            let meta = try JSON(parsing: try FileSystem.read(data + "/storesync.json"))
            #expect(meta["format"] == 2 && meta["history"] == "00000000000000ab")
            let again = try await fixture.startHub(extra: ["--data-dir", data])
            #expect(try Self.state(fixture.socket) == ["l": [1, 2, 3, 4, 5]])
            again.signal(SIGTERM)
            #expect(try await again.waitForExit() == 0)
        }

        @Test("a failed write that cannot be undone stops the hub (HubError logBroken, hubd exit 3); a restart keeps what was committed")
        func undoFails() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            var configuration = HubConfiguration(socketPath: fixture.socket)
            configuration.dataDirectory = fixture.directory + "/data"
            let hub = try Hub(app: JSONApp(), configuration: configuration)
            let outcome = Locked<HubError?>(nil)
            let finished = Atomic<Bool>(false)
            Thread.detachNewThread {
                do throws(HubError) { try hub.run() } catch { outcome.withLock { $0 = error } }
                finished.store(true, ordering: .releasing)
            }
            defer {
                StorageFaults.writeFailure.withLock { $0 = nil }
                StorageFaults.truncateFailure.withLock { $0 = nil }
            }
            let client = try fixture.attachedRawClient()
            defer { client.close() }
            try client.send(["type": "dispatch", "id": 1, "action": ["type": "set", "path": "/a", "value": 1]])
            #expect(try client.receive()["seq"] == 1)
            StorageFaults.writeFailure.withLock { $0 = EIO }
            StorageFaults.truncateFailure.withLock { $0 = EIO }
            try client.send(["type": "dispatch", "id": 2, "action": ["type": "set", "path": "/b", "value": 2]])
            // The hub stops: the client is told it is shutting down, and never sees action 2.
            var messages: [JSON] = []
            while let message = try client.receiveOrEOF() { messages.append(message) }
            #expect(messages.contains { $0["error"]?["code"] == "shutting-down" }, "\(messages)")
            #expect(!messages.contains { $0["type"] == "action" })
            try await waitUntil("the hub to stop") { finished.load(ordering: .acquiring) }
            #expect(outcome.withLock { $0 }?.kind == .logBroken, "\(String(describing: outcome.withLock { $0 }))")
            StorageFaults.writeFailure.withLock { $0 = nil }
            StorageFaults.truncateFailure.withLock { $0 = nil }
            let again = try Hub(app: JSONApp(), configuration: configuration)
            let running = HubThread(again)
            #expect(try Self.state(fixture.socket)["a"] == 1)
            try await running.stop()
        }

        @Test("temporary files are created afresh and never followed: a link planted at replica-ids.json.tmp is not written through")
        func temporaryFilesAreNotFollowed() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            try FileSystem.makeDirectory(data)
            let victim = fixture.directory + "/victim"
            try FileSystem.writeAtomically(victim, Array("precious".utf8))
            _ = symlink(victim, data + "/replica-ids.json.tmp")
            let hub = try await fixture.startHub(extra: ["--data-dir", data])
            let client = try fixture.attachedRawClient()
            client.close()
            #expect(try FileSystem.read(victim) == Array("precious".utf8))
            let lease = try JSON(parsing: try FileSystem.read(data + "/replica-ids.json"))
            #expect(lease["below"]?.intValue ?? 0 > 1)
            hub.signal(SIGTERM)
            #expect(try await hub.waitForExit() == 0)
        }
    }
}
