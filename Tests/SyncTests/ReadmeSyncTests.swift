import Foundation
import Testing

// The pages' code examples, links and command references stay in step with the code here; their
// transcripts (README.md's walkthroughs, docs/OPERATIONS.md §20's outputs) are run and compared
// by ReadmeTranscriptTests.swift and OperationsTranscriptTests.swift.

/// The page that shows the code examples the tests and `Examples/Tally` compile.
private let examplesPage = "docs/YOUR-APP.md"

/// docs/YOUR-APP.md's code examples are compiled by tests; this keeps the page's copies identical.
@Test("docs/YOUR-APP.md shows exactly the example code the tests and Examples/Tally compile", arguments: [
    ("Tests/StoreCoreTests/ReadmeExampleTests.swift", "StoreCore"),
    ("Tests/SyncTests/ReadmeReplicaExampleTests.swift", "replica"),
    ("Tests/BuiltinAppsTests/CodableAppTests.swift", "codable app"),
    ("Tests/BuiltinAppsTests/CodableAppTests.swift", "tagged cases"),
    ("Examples/Tally/Sources/TallyApp/Tally+Cases.swift", "tally cases"),
    ("Examples/Tally/Sources/TallyApp/Tally+Commands.swift", "tally commands"),
    ("Examples/Tally/Sources/TallyApp/Tally.swift", "tally app"),
    ("Examples/Tally/Sources/tally-hub/main.swift", "tally hub"),
    ("Examples/Tally/Sources/tally-cli/main.swift", "tally cli"),
    ("Examples/Tally/Tests/TallyTests/TallyTests.swift", "tally convergence"),
    ("Examples/Tally/Tests/TallyTests/TallyTests.swift", "tally model"),
])
func docExamplesMatchTests(file: String, marker: String) throws {
    let root = repositoryRoot()
    let page = try String(contentsOf: root.appendingPathComponent(examplesPage), encoding: .utf8)
    let source = try String(contentsOf: root.appendingPathComponent(file), encoding: .utf8)
    let begin = try #require(source.range(of: "// BEGIN \(examplesPage) \(marker) example\n"))
    let end = try #require(source.range(of: "// END \(examplesPage) \(marker) example"))
    // Compared without the block's common indentation (a part of a function body reads
    // flush-left on the page).
    let lines = source[begin.upperBound..<end.lowerBound].split(separator: "\n", omittingEmptySubsequences: false)
    let indent = lines.filter { !$0.allSatisfy(\.isWhitespace) }.map { $0.prefix { $0 == " " }.count }.min() ?? 0
    let example = lines.map { $0.dropFirst(min(indent, $0.prefix { $0 == " " }.count)) }.joined(separator: "\n")
        .trimmingCharacters(in: .whitespacesAndNewlines)
    #expect(page.contains(example), "\(examplesPage)'s \(marker) example differs from \(file)")
}

/// Pages link to each other and into the repository; a moved page or a renamed heading must not
/// leave a link behind that leads nowhere.
@Test("every relative link in README.md and docs/*.md names a file that exists, and a heading of it")
func docLinksResolve() throws {
    let root = repositoryRoot()
    let docs = try FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent("docs").path)
        .filter { $0.hasSuffix(".md") }.sorted().map { "docs/" + $0 }
    #expect(docs.contains(examplesPage) && docs.contains("docs/CLI.md"), "docs/ holds \(docs)")
    var checked = 0
    for page in ["README.md"] + docs {
        let pageURL = root.appendingPathComponent(page)
        let text = try String(contentsOf: pageURL, encoding: .utf8)
        for target in markdownLinkTargets(text) where !target.contains("://") && !target.hasPrefix("mailto:") {
            checked += 1
            let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)
            let path = parts.first.map(String.init) ?? ""
            // Relative to the page's directory (`../Examples/Tally` from docs/).
            let linked = path.isEmpty
                ? pageURL
                : URL(fileURLWithPath: pageURL.deletingLastPathComponent().path + "/" + (path.removingPercentEncoding ?? path))
            let exists = FileManager.default.fileExists(atPath: linked.path)
            #expect(exists, "\(page): the link (\(target)) names \(path), which does not exist")
            guard exists, parts.count == 2 else { continue }
            let anchor = String(parts[1])
            let linkedText = try String(contentsOf: linked, encoding: .utf8)
            let anchors = markdownHeadingAnchors(linkedText)
            #expect(anchors.contains(anchor), "\(page): the link (\(target)) names #\(anchor), which is no heading of \(path.isEmpty ? page : path)")
        }
    }
    #expect(checked > 20, "only \(checked) relative links found: the pages were not read as Markdown")
}

/// The repository's root (this file is `Tests/SyncTests/ReadmeSyncTests.swift`).
private func repositoryRoot() -> URL {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
}

/// The lines of a Markdown text outside its fenced code blocks (```` ``` ```` or `~~~`).
private func markdownProseLines(_ text: String) -> [Substring] {
    var prose: [Substring] = []
    var fence: Substring?
    for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
        let trimmed = line.drop { $0 == " " }
        if let open = fence {
            if trimmed.hasPrefix(open) { fence = nil }
            continue
        }
        if trimmed.hasPrefix("```") || trimmed.hasPrefix("~~~") {
            let mark = trimmed.first
            fence = trimmed.prefix { $0 == mark }
            continue
        }
        prose.append(line)
    }
    return prose
}

/// The targets of the inline links, `[text](target)`, outside code blocks.
private func markdownLinkTargets(_ text: String) -> [String] {
    var targets: [String] = []
    for line in markdownProseLines(text) {
        var rest = line
        while let open = rest.range(of: "](") {
            let after = rest[open.upperBound...]
            guard let close = after.firstIndex(of: ")") else { break }
            // A title after the target (`(path "title")`) is not part of it.
            targets.append(String(after[..<close].prefix { $0 != " " }))
            rest = after[close...]
        }
    }
    return targets
}

/// The anchors GitHub gives the headings (`#` to `######`) of a Markdown text: the second
/// heading with the same anchor gets `-1`, the third `-2`, and so on.
private func markdownHeadingAnchors(_ text: String) -> Set<String> {
    var anchors: Set<String> = []
    var seen: [String: Int] = [:]
    for line in markdownProseLines(text) {
        let level = line.prefix { $0 == "#" }.count
        guard (1...6).contains(level), line.dropFirst(level).first == " " else { continue }
        let anchor = githubAnchor(line.dropFirst(level).trimmingCharacters(in: .whitespaces))
        let count = seen[anchor, default: 0]
        seen[anchor] = count + 1
        anchors.insert(count == 0 ? anchor : "\(anchor)-\(count)")
    }
    return anchors
}

/// GitHub's anchor for a heading's text: lowercased; letters, marks, digits, `_` and `-` kept;
/// each space becomes `-`; every other character (punctuation, symbols, backticks) dropped.
private func githubAnchor(_ heading: String) -> String {
    var anchor = String.UnicodeScalarView()
    for scalar in heading.lowercased().unicodeScalars {
        switch scalar.properties.generalCategory {
        case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter,
             .nonspacingMark, .spacingMark, .enclosingMark,
             .decimalNumber, .letterNumber, .otherNumber, .connectorPunctuation:
            anchor.append(scalar)
        default:
            if scalar == " " || scalar == "-" { anchor.append("-") }
        }
    }
    return String(anchor)
}

/// The command reference pages stay in step with the programs: every option `--help` prints is
/// documented, and `hubd --list-apps` prints what docs/CLI.md shows.
@Test("docs/CLI.md documents every replica-cli option, docs/OPERATIONS.md every hubd flag, and --list-apps prints what CLI.md shows")
func commandReferenceMatchesHelp() async throws {
    let root = repositoryRoot()
    let cli = try String(contentsOf: root.appendingPathComponent("docs/CLI.md"), encoding: .utf8)
    let operations = try String(contentsOf: root.appendingPathComponent("docs/OPERATIONS.md"), encoding: .utf8)
    func output(_ program: String, _ arguments: [String]) async throws -> [String] {
        let child = try ChildProcess(program, arguments)
        child.closeInput()
        #expect(try await child.waitForExit() == 0, "\(program) \(arguments): \(child.errorLines)")
        return child.lines
    }
    func flags(_ lines: [String]) -> Set<String> {
        var found: Set<String> = []
        for line in lines {
            var rest = Substring(line)
            while let range = rest.range(of: "--") {
                let name = rest[range.upperBound...].prefix { $0.isLetter || $0 == "-" }
                if let first = name.first, first.isLetter { found.insert("--" + name) }
                rest = rest[range.upperBound...]
            }
        }
        return found
    }
    for flag in flags(try await output("replica-cli", ["--help"])).sorted() {
        #expect(cli.contains("`\(flag)") || cli.contains("\(flag) "), "docs/CLI.md does not mention replica-cli's \(flag)")
    }
    for flag in flags(try await output("hubd", ["--help"])).sorted() {
        #expect(operations.contains("`\(flag)"), "docs/OPERATIONS.md does not document hubd's \(flag)")
    }
    let apps = try await output("hubd", ["--list-apps"]).joined(separator: "\n")
    #expect(cli.contains("$ hubd --list-apps\n" + apps + "\n"), "docs/CLI.md's --list-apps block differs from the program's")
}
