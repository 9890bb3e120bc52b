import Foundation
import Testing

/// The README's code examples are compiled by tests; this keeps the README's copies identical.
@Test("the README shows exactly the example code the tests compile", arguments: [
    ("Tests/StoreCoreTests/ReadmeExampleTests.swift", "StoreCore"),
    ("Tests/SyncTests/ReadmeReplicaExampleTests.swift", "replica"),
])
func readmeExamplesMatchTests(file: String, marker: String) throws {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    let readme = try String(contentsOf: root.appendingPathComponent("README.md"), encoding: .utf8)
    let source = try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8)
    let begin = try #require(source.range(of: "// BEGIN README \(marker) example\n"))
    let end = try #require(source.range(of: "// END README \(marker) example"))
    let example = source[begin.upperBound..<end.lowerBound].trimmingCharacters(in: .whitespacesAndNewlines)
    #expect(readme.contains(example), "README.md's \(marker) example differs from \(file)")
}
