import Foundation
import Testing

/// The README's code examples are compiled by tests; this keeps the README's copies identical.
@Test("the README shows exactly the example code the tests compile", arguments: [
    ("Tests/StoreCoreTests/ReadmeExampleTests.swift", "StoreCore"),
    ("Tests/SyncTests/ReadmeReplicaExampleTests.swift", "replica"),
    ("Tests/BuiltinAppsTests/CodableAppTests.swift", "codable app"),
    ("Tests/BuiltinAppsTests/CodableAppTests.swift", "tagged cases"),
    ("Examples/Tally/Sources/TallyApp/Tally+Cases.swift", "tally cases"),
    ("Examples/Tally/Sources/TallyApp/Tally.swift", "tally app"),
    ("Examples/Tally/Sources/tally-hub/main.swift", "tally hub"),
    ("Examples/Tally/Sources/tally-cli/main.swift", "tally cli"),
    ("Examples/Tally/Tests/TallyTests/TallyTests.swift", "tally convergence"),
    ("Examples/Tally/Tests/TallyTests/TallyTests.swift", "tally model"),
])
func readmeExamplesMatchTests(file: String, marker: String) throws {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
    let source = try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8)
    let begin = try #require(source.range(of: "// BEGIN README \(marker) example\n"))
    let end = try #require(source.range(of: "// END README \(marker) example"))
    // Compared without the block's common indentation (a part of a function body reads
    // flush-left in the README).
    let lines = source[begin.upperBound..<end.lowerBound].split(separator: "\n", omittingEmptySubsequences: false)
    let indent = lines.filter { !$0.allSatisfy(\.isWhitespace) }.map { $0.prefix { $0 == " " }.count }.min() ?? 0
    let example = lines.map { $0.dropFirst(min(indent, $0.prefix { $0 == " " }.count)) }.joined(separator: "\n")
        .trimmingCharacters(in: .whitespacesAndNewlines)
    #expect(readme.contains(example), "README.md's \(marker) example differs from \(file)")
}
