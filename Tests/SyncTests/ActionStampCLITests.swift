import Foundation
import SyncCore
import SyncPOSIX
import Testing

extension MultiProcessTests {
    /// When each action was sequenced and who dispatched it, as a user sees them: `history`,
    /// `watch`, and attach's `:history` and `:diff` (PROTOCOL.md §4's `time` and `origin_name`).
    @Suite("Action stamps through the CLI")
    struct ActionStampCLI {
        private static let setA = #"{"type":"set","path":"/a","value":1}"#
        private static let setB = #"{"type":"set","path":"/b","value":2}"#

        @Test("history shows each action's sequencing time and its origin's name, the same after the replica left and the hub restarted from its journal; --origin takes names")
        func historyKeepsStamps() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let data = fixture.directory + "/data"
            let before = LogTimestamp.format(milliseconds: LogTimestamp.milliseconds())
            var hub = try await fixture.startHub(extra: ["--data-dir", data])
            let named = try await fixture.runCLI(["--name", "alice", "dispatch", Self.setA])
            #expect(named.status == 0, "\(named.err)")
            let anonymous = try await fixture.runCLI(["dispatch", Self.setB])
            #expect(anonymous.status == 0, "\(anonymous.err)")
            let after = LogTimestamp.format(milliseconds: LogTimestamp.milliseconds())

            let first = try await fixture.runCLI(["history", "--from", "1"])
            #expect(first.status == 0, "\(first.err)")
            let lines = try first.out.map { try JSON(parsing: Array($0.utf8)) }
            try #require(lines.count == 2, "\(first.out)")
            #expect(lines[0]["origin_name"] == "alice", "the name of a replica that has gone")
            #expect(lines[1]["origin_name"] == nil, "no name given, none shown")
            for line in lines {
                // RFC 3339 in UTC with milliseconds compares as text.
                let time = try #require(line["time"]?.stringValue, "\(line)")
                #expect(time.count == 24 && time.hasSuffix("Z") && time >= before && time <= after, "\(time) not in \(before)…\(after)")
            }

            // A crash: the restarted hub replays its journal, which kept the stamps.
            hub.signal(SIGKILL)
            _ = try await hub.waitForExit()
            hub = try await fixture.startHub(extra: ["--data-dir", data])
            let again = try await fixture.runCLI(["history", "--from", "1"])
            #expect(again.out == first.out, "the same stamps after a restart")

            let alice = try await fixture.runCLI(["history", "--from", "1", "--origin", "alice"])
            #expect(alice.out == [first.out[0]], "\(alice.out)")
            let both = try await fixture.runCLI(["history", "--from", "1", "--origin", "alice,\(lines[1]["origin"]?.intValue ?? -1)"])
            #expect(both.out == first.out, "ids and names together")
            let bad = try await fixture.runCLI(["history", "--from", "1", "--origin", "3,"])
            #expect(bad.status == 2 && bad.err.contains { $0.contains("--origin needs replica ids or names") }, "\(bad.err)")
        }

        @Test("attach --json prints the stamp with each action; :history lists what it saw with times and names, :diff the patch an action made")
        func attachHistoryAndDiff() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            try await fixture.startHub()
            let attach = try fixture.cli(["--name", "bob", "attach"])
            try await attach.waitForLine("the attach line") { $0.hasPrefix("attached to hub") }
            attach.write("set /a 1\n")
            try await attach.waitForLine("#1") { $0.hasPrefix("#1 from replica ") && $0.contains("(bob, you): ") }
            attach.write("set /a 2\n")
            try await attach.waitForLine("#2") { $0.hasPrefix("#2 from replica ") }
            attach.write(":history\n")
            try await attach.waitForLine(":history's first line") {
                $0.hasPrefix("#1 at 20") && $0.hasSuffix(#"Z from replica 1 (bob, you): {"path":"/a","type":"set","value":1}"#)
            }
            attach.write(":diff 1\n")
            try await attach.waitForLine("the patch of #1") { $0 == #"patch: [{"op":"add","path":"/a","value":1}]"# }
            attach.write(":diff\n")
            try await attach.waitForLine("the patch of #2") { $0 == #"patch: [{"op":"replace","path":"/a","value":2}]"# }
            attach.write(":diff 9\n")
            try await attach.waitForLine("an unknown seq") { $0.hasPrefix("error: seq 9 is not among the actions seen here") }
            attach.write(":history many\n")
            try await attach.waitForLine("a bad count") { $0 == #"error: :history takes a count (a whole number from 1), not "many""# }
            attach.closeInput()
            #expect(try await attach.waitForExit() == 0)

            let json = try fixture.cli(["--name", "carol", "--json", "attach"])
            try await json.waitForLine("attached") { $0.contains(#""type":"attached""#) }
            json.write("set /c 3\n:history 1\n:diff\n")
            let action = try await json.waitForLine("the action") { line in
                guard let parsed = try? JSON(parsing: Array(line.utf8)) else { return false }
                return parsed["type"] == nil && parsed["seq"] == 3
            }
            let parsed = try JSON(parsing: Array(action.utf8))
            #expect(parsed["origin_name"] == "carol" && parsed["time"]?.stringValue?.hasSuffix("Z") == true, "\(action)")
            let history = try await json.waitForLine("history") { $0.contains(#""type":"history""#) }
            #expect(try JSON(parsing: Array(history.utf8))["actions"] == [parsed])
            let diff = try await json.waitForLine("diff") { $0.contains(#""type":"diff""#) }
            #expect(diff == #"{"patch":[{"op":"add","path":"/c","value":3}],"seq":3,"type":"diff"}"#)
            json.closeInput()
            #expect(try await json.waitForExit() == 0)
        }
    }
}
