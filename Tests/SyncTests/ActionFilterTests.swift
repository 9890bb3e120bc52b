@testable import StoreSyncCommands
import SyncCore
import Testing

/// `watch --type GLOB --origin N`: which lines are printed.
@Suite("watch and history filters")
struct ActionFilterTests {
    @Test("globs: * for any run, ? for one character, the rest by Unicode scalars", arguments: [
        ("set", "set", true), ("set", "s*", true), ("setLimitText", "set*", true), ("reset", "set*", false),
        ("increment", "*crement", true), ("decrement", "?ecrement", true), ("increment", "?ecrement", false),
        ("a", "*", true), ("", "*", true), ("", "?", false), ("café", "caf?", true), ("cafe\u{301}", "caf?", false),
        ("abcbd", "a*b?", true), ("abc", "a*c*", true), ("ab", "a**b", true), ("x*y", "x*y", true),
    ])
    func globs(text: String, glob: String, expected: Bool) {
        #expect(ActionFilter.matches(text, glob: glob) == expected)
    }

    @Test("an action passes when it matches every filter set")
    func passes() {
        let set: JSON = ["type": "set", "path": "/a", "value": 1]
        #expect(ActionFilter().passes(set, origin: 9))
        #expect(ActionFilter(typeGlob: "se?").passes(set, origin: 9))
        #expect(!ActionFilter(typeGlob: "remove").passes(set, origin: 9))
        #expect(ActionFilter(origins: [9, 3]).passes(set, origin: 9))
        #expect(!ActionFilter(typeGlob: "set", origins: [3]).passes(set, origin: 9))
        #expect(!ActionFilter(typeGlob: "*").passes(["no-type": true], origin: 9), "an action without a string type matches no glob")
    }
}

extension MultiProcessTests {
    @Suite("replica-cli history --type and --origin")
    struct HistoryFilters {
        @Test("history prints only the actions whose type matches and whose origin is listed")
        func filtersHistory() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            try await fixture.startHub()
            let first = try await fixture.runCLI(["dispatch", #"{"type":"set","path":"/a","value":1}"#, #"{"type":"remove","path":"/a"}"#])
            #expect(first.status == 0, "\(first.err)")
            let second = try await fixture.runCLI(["dispatch", #"{"type":"set","path":"/b","value":2}"#])
            #expect(second.status == 0, "\(second.err)")
            let sets = try await fixture.runCLI(["history", "--from", "1", "--type", "se?"])
            #expect(sets.status == 0, "\(sets.err)")
            #expect(sets.out.map { $0.contains(#""type":"set""#) } == [true, true], "\(sets.out)")
            let all = try await fixture.runCLI(["history", "--from", "1"])
            let origins = all.out.compactMap { try? JSON(parsing: Array($0.utf8))["origin"]?.intValue }
            #expect(origins.count == 3)
            let secondOrigin = try #require(origins.last)
            let mine = try await fixture.runCLI(["history", "--from", "1", "--origin", String(secondOrigin)])
            #expect(mine.out.count == 1 && mine.out.first?.contains(#""path":"/b""#) == true, "\(mine.out)")
            let bad = try await fixture.runCLI(["history", "--from", "1", "--origin", "3,,4"])
            #expect(bad.status == 2)
            let nobody = try await fixture.runCLI(["history", "--from", "1", "--origin", "x"])
            #expect(nobody.status == 0 && nobody.out.isEmpty, "a name no replica gave matches nothing: \(nobody.out)")
        }
    }
}
