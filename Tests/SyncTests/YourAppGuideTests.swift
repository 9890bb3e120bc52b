import Foundation
import Testing

/// docs/YOUR-APP.md's Swift blocks are real code: each one is a run of lines of a file that is
/// compiled, so a block cannot drift from the code it shows.
///
/// The rule, for every ```` ```swift ```` block of the page:
///
/// - By default, the block must be a contiguous run of lines of some `.swift` file under
///   `Examples/Tally` (which CI builds with zero warnings and tests).
/// - A block preceded (within the 3 non-blank lines before its fence) by the marker
///   `<!-- from: PATH -->` must be a contiguous run of lines of the file at `PATH`, relative to
///   the repository's root: for the examples the main package's own tests compile.
/// - A block preceded the same way by `<!-- excerpt -->` is not checked. It is for fragments
///   that cannot be a region of a real file (a `Package.swift` of the reader's own, a sketch
///   with placeholder names); the prose right before it must say it is an excerpt or a sketch.
///
/// "A run of lines" means line for line, ignoring trailing whitespace and one indentation
/// common to the whole block (a function inside a type, or statements inside a test, read
/// flush-left on the page). The markers are HTML comments, so GitHub shows nothing for them.
@Suite("docs/YOUR-APP.md: every Swift block is compiled code")
struct YourAppGuideTests {
    /// The page under test.
    private static let page = "docs/YOUR-APP.md"
    /// The directory whose files a block without a marker must come from.
    private static let examples = "Examples/Tally"
    /// Marks a block the test leaves alone.
    private static let excerptMarker = "<!-- excerpt -->"
    /// Starts a marker naming the one file a block must come from (`<!-- from: PATH -->`).
    private static let fromMarkerPrefix = "<!-- from: "

    /// The repository's root (this file is `Tests/SyncTests/YourAppGuideTests.swift`).
    private static var root: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    @Test("every ```swift block of docs/YOUR-APP.md is a run of lines of Examples/Tally (or of the file its marker names)")
    func blocksAreCompiledCode() throws {
        let text = try String(contentsOf: Self.root.appendingPathComponent(Self.page), encoding: .utf8)
        let blocks = Self.swiftBlocks(in: text)
        let tallyFiles = try Self.swiftFiles(under: Self.examples)
        #expect(tallyFiles.count >= 6, "only \(tallyFiles.map(\.path)) found under \(Self.examples)")
        var checked = 0
        var excerpts = 0
        for block in blocks {
            let candidates: [SourceFile]
            switch block.marker {
            case .excerpt:
                excerpts += 1
                continue
            case .from(let path):
                let url = Self.root.appendingPathComponent(path)
                guard let contents = try? String(contentsOf: url, encoding: .utf8) else {
                    Issue.record("\(Self.page):\(block.line): the marker names \(path), which cannot be read")
                    continue
                }
                candidates = [SourceFile(path: path, lines: Self.lines(of: contents))]
            case nil:
                candidates = tallyFiles
            }
            checked += 1
            if candidates.contains(where: { Self.firstMatch(of: block.lines, in: $0.lines) != nil }) { continue }
            let place = candidates.count == 1 ? candidates[0].path : "any .swift file under \(Self.examples)"
            Issue.record("""
                \(Self.page):\(block.line): this swift block is not a run of lines of \(place).
                \(Self.closest(block.lines, in: candidates))
                Copy the code from the file again, or, for a fragment that cannot be a file's region, say so \
                in the prose and put \(Self.excerptMarker) before the block.
                """)
        }
        // The page shows the Tally app, its hook, daemon, CLI and tests: a parser that found
        // few blocks is broken, not lenient.
        #expect(checked >= 12, "only \(checked) checked blocks found in \(Self.page) (and \(excerpts) excerpts)")
    }

    @Test("the check finds a block that drifted by one character, and accepts one that is indented as a whole")
    func matcherCatchesDrift() {
        let file = ["import SyncCore", "", "extension Tally {", "    func f() {", "        g()", "    }", "}"]
        #expect(Self.firstMatch(of: ["func f() {", "    g()", "}"], in: file) == 3)
        #expect(Self.firstMatch(of: ["import SyncCore", "", "extension Tally {"], in: file) == 0)
        #expect(Self.firstMatch(of: ["func f() {", "    h()", "}"], in: file) == nil)
        #expect(Self.firstMatch(of: ["func f() {", "  g()", "}"], in: file) == nil)
        #expect(Self.firstMatch(of: ["import SyncCore", "extension Tally {"], in: file) == nil)
        let page = """
            Text.

            <!-- excerpt -->
            ```swift
            let a = 1
            ```

            ```sh
            echo no
            ```

            <!-- from: Sources/X.swift -->

            ```swift
            let b = 2   \("")
            ```
              ```swift
              let c = 3
              ```
            """
        let blocks = Self.swiftBlocks(in: page)
        #expect(blocks.map(\.lines) == [["let a = 1"], ["let b = 2"], ["let c = 3"]])
        #expect(blocks.map(\.marker) == [.excerpt, .from("Sources/X.swift"), nil])
        #expect(blocks.map(\.line) == [4, 14, 17])
    }

    // MARK: - The page's blocks

    /// What a marker before a block asks for.
    private enum Marker: Equatable {
        /// Not checked.
        case excerpt
        /// Checked against this file only (relative to the repository's root).
        case from(String)
    }

    /// One ```` ```swift ```` block of the page.
    private struct Block {
        /// The line of its opening fence (1-based).
        let line: Int
        /// Its lines, without the fence's indentation and without trailing whitespace.
        let lines: [String]
        /// The marker among the 3 non-blank lines before the fence, if any.
        let marker: Marker?
    }

    /// A file's lines, without trailing whitespace.
    private struct SourceFile {
        /// Relative to the repository's root.
        let path: String
        /// The lines.
        let lines: [String]
    }

    /// The ```` ```swift ```` blocks of a Markdown text (fenced with backticks, the fence
    /// indented by at most 3 spaces, or inside a list item).
    private static func swiftBlocks(in text: String) -> [Block] {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        var blocks: [Block] = []
        var index = 0
        while index < lines.count {
            let line = lines[index]
            let indent = line.prefix { $0 == " " }.count
            let trimmed = line.dropFirst(indent)
            let ticks = trimmed.prefix { $0 == "`" }.count
            guard ticks >= 3 else {
                index += 1
                continue
            }
            let info = trimmed.dropFirst(ticks).trimmingCharacters(in: .whitespaces)
            var body: [String] = []
            var end = index + 1
            while end < lines.count {
                let candidate = lines[end].drop { $0 == " " }
                if candidate.prefix(while: { $0 == "`" }).count >= ticks,
                   candidate.drop(while: { $0 == "`" }).allSatisfy(\.isWhitespace) {
                    break
                }
                // The fence's indentation is not part of the code (CommonMark removes it).
                let content = lines[end]
                let removable = min(indent, content.prefix { $0 == " " }.count)
                body.append(Self.trimmedTrailing(String(content.dropFirst(removable))))
                end += 1
            }
            if info.split(separator: " ").first == "swift" {
                blocks.append(Block(line: index + 1, lines: body, marker: Self.marker(before: index, in: lines)))
            }
            index = end + 1
        }
        return blocks
    }

    /// The marker among the 3 non-blank lines before line `index`, if any.
    private static func marker(before index: Int, in lines: [String]) -> Marker? {
        var seen = 0
        var previous = index - 1
        while previous >= 0, seen < 3 {
            let line = lines[previous].trimmingCharacters(in: .whitespaces)
            previous -= 1
            guard !line.isEmpty else { continue }
            seen += 1
            if line == Self.excerptMarker { return .excerpt }
            if line.hasPrefix(Self.fromMarkerPrefix), line.hasSuffix("-->") {
                let path = line.dropFirst(Self.fromMarkerPrefix.count).dropLast(3).trimmingCharacters(in: .whitespaces)
                return .from(path)
            }
        }
        return nil
    }

    // MARK: - Matching

    /// Where `block` starts in `file` as a run of lines (ignoring trailing whitespace and one
    /// indentation common to the whole block), or `nil`.
    private static func firstMatch(of block: [String], in file: [String]) -> Int? {
        guard !block.isEmpty, block.count <= file.count else { return nil }
        for start in 0...(file.count - block.count) where matches(block, file, at: start) {
            return start
        }
        return nil
    }

    /// Whether `block` is the run of `file`'s lines at `start`, with one common indentation.
    private static func matches(_ block: [String], _ file: [String], at start: Int) -> Bool {
        var indent: String?
        for (offset, line) in block.enumerated() {
            let fileLine = file[start + offset]
            if line.isEmpty {
                guard fileLine.isEmpty else { return false }
                continue
            }
            if let indent {
                guard fileLine == indent + line else { return false }
            } else {
                guard fileLine.hasSuffix(line) else { return false }
                let prefix = fileLine.dropLast(line.count)
                guard prefix.allSatisfy({ $0 == " " }) else { return false }
                indent = String(prefix)
            }
        }
        return true
    }

    /// The place where the longest leading part of `block` matches, and the first line that
    /// differs there: what a reader needs to mend a block that drifted.
    private static func closest(_ block: [String], in files: [SourceFile]) -> String {
        var best: (file: SourceFile, start: Int, length: Int)?
        for file in files {
            for start in file.lines.indices {
                var length = 0
                while length < block.count, start + length < file.lines.count,
                      matches(Array(block[...length]), file.lines, at: start) {
                    length += 1
                }
                if length > 0, length > best?.length ?? 0 { best = (file, start, length) }
            }
        }
        guard let best else { return "Its first line, \(block.first.map { "`\($0)`" } ?? "(none)"), is in none of them." }
        let differing = best.length < block.count ? "`\(block[best.length])`" : "(the block's end)"
        let there = best.start + best.length < best.file.lines.count ? "`\(best.file.lines[best.start + best.length])`" : "(the file's end)"
        return "Closest: \(best.file.path):\(best.start + 1), which agrees for \(best.length) lines; "
            + "then the block has \(differing) where the file has \(there)."
    }

    // MARK: - Files

    /// The `.swift` files under a directory of the repository, build products and other
    /// hidden directories left out.
    private static func swiftFiles(under directory: String) throws -> [SourceFile] {
        let base = root.appendingPathComponent(directory)
        let paths = FileManager.default.subpaths(atPath: base.path) ?? []
        var files: [SourceFile] = []
        for path in paths.sorted() where path.hasSuffix(".swift") {
            guard !path.split(separator: "/").contains(where: { $0.hasPrefix(".") }) else { continue }
            let contents = try String(contentsOf: base.appendingPathComponent(path), encoding: .utf8)
            files.append(SourceFile(path: directory + "/" + path, lines: lines(of: contents)))
        }
        return files
    }

    /// A text's lines, without trailing whitespace.
    private static func lines(of text: String) -> [String] {
        text.split(separator: "\n", omittingEmptySubsequences: false).map { trimmedTrailing(String($0)) }
    }

    /// A line without its trailing whitespace.
    private static func trimmedTrailing(_ line: String) -> String {
        String(line.reversed().drop(while: \.isWhitespace).reversed())
    }
}
