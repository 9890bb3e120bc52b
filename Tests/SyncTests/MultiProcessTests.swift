import Foundation
import SyncProtocol
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Tests that start the built `hubd` and `replica-cli` as child processes on a temp socket.
/// Serialized: each one already runs several processes on a 2-core machine.
@Suite("Multi-process", .serialized)
struct MultiProcessTests {}

extension MultiProcessTests {
    @Suite("Convergence")
    struct Convergence {
        /// The script one dispatching replica types: increments, appends, and writes to a shared key.
        static func script(_ name: String, count: Int) -> String {
            var lines: [String] = []
            lines.reserveCapacity(count)
            for i in 0..<count {
                if i % 5 == 0 {
                    lines.append(#"append /events {"r":"\#(name)","i":\#(i)}"#)
                } else if i % 7 == 0 {
                    lines.append(#"{"type":"set","path":"/last","value":"\#(name)-\#(i)"}"#)
                } else {
                    lines.append("increment /counters/\(name)")
                }
            }
            return lines.joined(separator: "\n") + "\n"
        }

        @Test("a hub and 4 replicas converge after 10,000 concurrent actions, despite a late joiner, a SIGKILL and garbage")
        func convergence() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            try await fixture.startHub(app: "json")

            let perReplica = 2_500
            let names = ["A", "B", "C", "D"]
            var replicas: [ChildProcess] = []
            var ids: [Int] = []
            for name in names {
                let replica = try fixture.cli(["attach", "--json", "--name", name], name: "replica \(name)")
                replicas.append(replica)
            }
            for replica in replicas {
                let attached = try await replica.attachedLine()
                #expect(attached.seq == 0)
                ids.append(try #require(attached.json["replica"]?.intValue))
            }
            // All four dispatch at once.
            for (replica, name) in zip(replicas, names) { replica.feed(Self.script(name, count: perReplica)) }

            // Mid-stream: a late joiner, a replica killed with SIGKILL, and two clients sending garbage.
            try await replicas[0].waitForLineCount(2_000)
            let late = try fixture.cli(["attach", "--json", "--name", "late"], name: "late joiner")
            let lateAttached = try await late.attachedLine()
            let victim = try fixture.cli(["attach", "--json", "--name", "victim"], name: "victim")
            _ = try await victim.attachedLine()
            victim.feed(Self.script("V", count: 100_000))
            try await victim.waitForLineCount(300)
            victim.signal(SIGKILL)

            let garbage = try fixture.attachedRawClient(name: "garbage")
            defer { garbage.close() }
            var frame: [UInt8] = []
            try Frame.append(payload: Array("{this is not json".utf8), to: &frame)
            try garbage.sendBytes(frame)
            let oversized = try RawClient(path: fixture.socket)
            defer { oversized.close() }
            try oversized.sendBytes([0xFF, 0xFF, 0xFF, 0xFF, 0x7B])
            #expect(try oversized.receive()["error"]?["code"] == "frame-too-large")
            #expect(try oversized.receiveOrEOF() == nil)
            var garbageError: JSON?
            while let message = try garbage.receiveOrEOF() {
                if message["type"] == "error" { garbageError = message }
            }
            #expect(garbageError?["error"]?["code"] == "bad-json")

            // Every dispatcher gets all of its own acknowledgements.
            for (replica, id) in zip(replicas, ids) {
                try await waitUntil("\(replica.name) to see its \(perReplica) acks", timeout: .seconds(120)) {
                    replica.events.filter { $0.isAction && $0.origin == id }.count >= perReplica
                }
            }
            // The killed replica is gone from the hub once its last bytes are read; then seq is final.
            try await waitUntil("the hub to drop the killed replica") {
                try !HubStatusProbe.status(fixture.socket).replicas.contains { $0.name == "victim" }
            }
            let hub = try HubStatusProbe.status(fixture.socket)
            let total = Int(hub.seq)
            #expect(total >= names.count * perReplica)

            for replica in replicas + [late] { replica.write(":digest\n") }
            for (index, replica) in (replicas + [late]).enumerated() {
                let line = try await replica.waitForLine("its digest") { $0.contains(#""type":"digest""#) }
                let digest = try #require(EventLine(line))
                #expect(digest.seq == total, "replica \(index) settled at \(String(describing: digest.seq)), hub at \(total)")
                #expect(digest.json["digest"]?.stringValue == hub.digest)
                // Nothing was sequenced after: :digest compared with the hub's at the same seq.
                #expect(digest.json["hub_digest"]?.stringValue == hub.digest, "\(line)")

                let events = replica.events
                let seqs = events.filter(\.isAction).compactMap(\.seq)
                let start = replica === late ? try #require(lateAttached.seq) : 0
                let contiguous = seqs == Array((start + 1)...total)
                #expect(contiguous, "replica \(index) saw a gap, a repeat or a reordering: \(seqs.count) seqs from \(seqs.first ?? -1) to \(seqs.last ?? -1), expected \(start + 1)...\(total)")
                if index < ids.count {
                    let own = events.filter { $0.isAction && $0.origin == ids[index] }.compactMap(\.id)
                    // Dispatch ids start at a random point per replica and count up by one.
                    let sorted = own.sorted()
                    let exactlyOnce = sorted == Array((sorted.first ?? 0)..<((sorted.first ?? 0) + perReplica))
                    #expect(exactlyOnce, "every accepted dispatch acknowledged exactly once: \(own.count) acks, \(Set(own).count) distinct")
                }
            }
            #expect(lateAttached.seq ?? 0 > 0, "the late joiner attached while actions were flowing")

            // A fresh replica reads the same state, and the state is what the scripts wrote.
            let state = try await fixture.runCLI(["state", "--json"])
            #expect(state.status == 0)
            let snapshot = try JSON(parsing: try #require(state.out.first))
            #expect(snapshot["digest"]?.stringValue == hub.digest)
            for name in names {
                let increments = (0..<perReplica).filter { $0 % 5 != 0 && $0 % 7 != 0 }.count
                #expect(snapshot["state"]?["counters"]?[name]?.intValue == increments)
            }
            for replica in replicas + [late] { replica.closeInput() }
            for replica in replicas + [late] { #expect(try await replica.waitForExit() == 0) }
        }
    }
}
