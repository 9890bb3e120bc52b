import Foundation
import SyncProtocol
import StoreSyncTesting
import Testing

// docs/PROTOCOL.md lists "A complete Python 3 client". These tests read that listing out of the
// document at run time, so the document and the tests cannot drift apart: the whole listing is
// run against a live `hubd`, and its JCS and FNV-1a functions are checked against the Swift
// library's `JSON.canonicalBytes` and `Digest`.
//
// They need `python3` on PATH; without it they are skipped (see the suite's `.enabled(if:)`).

extension MultiProcessTests {
    @Suite(
        "docs/PROTOCOL.md's Python 3 client",
        // The listing is Python: without an interpreter there is nothing to run, so skip rather than fail.
        .enabled(if: ProtocolPythonListing.python3 != nil, "python3 is not on PATH; docs/PROTOCOL.md's Python listing cannot be run")
    )
    struct PythonConformance {
        @Test("the listing, run against a live counter hub, verifies its welcome, gets its ack at welcome seq + 1 and a bad-action reject")
        func clientAgainstLiveHub() async throws {
            let python = try #require(ProtocolPythonListing.python3)
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let script = fixture.directory + "/minimal_client.py"
            try Data(ProtocolPythonListing.client().utf8).write(to: URL(fileURLWithPath: script))
            try await fixture.startHub(app: "counter")
            let fresh = try HubStatusProbe.status(fixture.socket)
            #expect(fresh.seq == 0)

            let first = try await runClient(python: python, script: script, fixture: fixture)
            #expect(first.replica == 1)
            #expect(first.seq == 0)
            #expect(first.state["count"]?.intValue == 0)
            #expect(Digest.of(first.state) == fresh.digest, "the welcome state the listing printed is not the hub's")

            // The hub's own account: the good action was sequenced, the bad one was not.
            let afterFirst = try HubStatusProbe.status(fixture.socket)
            #expect(afterFirst.seq == 1)
            #expect(afterFirst.hub == fresh.hub)
            #expect(afterFirst.digest != fresh.digest)

            // A second run hydrates from the state the first one left.
            let second = try await runClient(python: python, script: script, fixture: fixture)
            #expect(second.replica == first.replica + 1)
            #expect(second.seq == 1)
            #expect(second.state["count"]?.intValue == 1)
            #expect(Digest.of(second.state) == afterFirst.digest)
            #expect(try HubStatusProbe.status(fixture.socket).seq == 2)
        }

        @Test("the listing's canon and digest agree with JSON.canonicalBytes and Digest on 400 seeded random values")
        func randomValuesAgree() async throws {
            let seed: UInt64 = 0x5EED_0000_2025_8785
            let seedText = "0x" + String(seed, radix: 16)   // in every failure message, to replay it
            let count = 400
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            var texts = SeededJSONTexts(seed: seed)
            var values: [(source: String, canonical: [UInt8], digest: String)] = []
            for index in 0..<count {
                let source = texts.next()
                do {
                    let value = try JSON(parsing: source)
                    let canonical = value.canonicalBytes
                    let reparsed = try? JSON(parsing: canonical)
                    #expect(reparsed?.canonicalBytes == canonical,
                            "seed \(seedText), value #\(index): the canonical form is not a fixed point: \(Self.show(canonical))")
                    values.append((source, canonical, Digest.of(value)))
                } catch {
                    Issue.record("seed \(seedText), value #\(index): Swift refuses the generated text \(source.debugDescription): \(error)")
                }
            }
            #expect(values.count == count, "seed \(seedText): only \(values.count) of \(count) generated texts parsed")

            // Python gets exactly the bytes the Swift canonical writer produced.
            let answers = try await ProtocolPythonListing.answers(for: values.map(\.canonical), in: fixture)
            var mismatches: [String] = []
            for (index, (value, answer)) in zip(values, answers).enumerated() {
                switch answer {
                case .canonical(let bytes, let digest):
                    if bytes != value.canonical || digest != value.digest {
                        mismatches.append("#\(index): Swift \(Self.show(value.canonical)) \(value.digest), Python \(Self.show(bytes)) \(digest) (generated as \(value.source.debugDescription))")
                    }
                case .failed(let message):
                    mismatches.append("#\(index): Python failed on \(Self.show(value.canonical)): \(message)")
                }
            }
            #expect(answers.count == values.count)
            #expect(mismatches.isEmpty,
                    "seed \(seedText): \(mismatches.count) of \(values.count) values differ; first: \(mismatches.prefix(5).joined(separator: "; "))")
        }

        @Test("the listing and Swift canonicalise the same raw JSON texts alike: number spellings, escapes, member order")
        func rawTextsAgree() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            try await check([
                RawCase(
                    "number spellings",
                    #"[0,-0,-0.0,0.0,1.0,1E0,10e-1,0.5e-6,1e21,1E+21,1000000000000000000000,999999999999999900000,1e-7,0.0000001,5e-324,4.9e-324,9007199254740992,9007199254740993,-9007199254740992,123456789012345678901234567890,1.7976931348623157e308,2.2250738585072014e-308,1e-400,1e-6,0.000001,1e20]"#,
                    #"[0,0,0,0,1,1,1,5e-7,1e+21,1e+21,1e+21,999999999999999900000,1e-7,1e-7,5e-324,5e-324,9007199254740992,9007199254740992,-9007199254740992,1.2345678901234568e+29,1.7976931348623157e+308,2.2250738585072014e-308,0,0.000001,0.000001,100000000000000000000]"#
                ),
                RawCase(
                    "members sorted by UTF-16 code units (§6's example)",
                    #"{"b":1,"a":2,"B":3,"\uE000":4,"\ud83d\ude00":5,"aa":6,"":7}"#,
                    #"{"":7,"B":3,"a":2,"aa":6,"b":1,"\#u{1F600}":5,"\#u{E000}":4}"#
                ),
                RawCase(
                    "escapes: only quote, backslash and C0 controls are escaped",
                    #"["\u0000\u001f\u007f\b\f\n\r\t\"\\\/","\u2028\u2029\uFEFF\uFFFF\uD7FF\uE000","\uDBFF\uDFFF","\ud83d\ude00"]"#,
                    #"["\u0000\u001f\#u{7F}\b\f\n\r\t\"\\/","\#u{2028}\#u{2029}\#u{FEFF}\#u{FFFF}\#u{D7FF}\#u{E000}","\#u{10FFFF}","\#u{1F600}"]"#
                ),
                RawCase(
                    "the counter app's initial state (§6 worked example 1)",
                    #"{"limitText":"","isIncrementing":true,"count":0}"#,
                    #"{"count":0,"isIncrementing":true,"limitText":""}"#,
                    digest: "92ac997240da79b5"
                ),
                RawCase(
                    "string values that differ only by normalization stay as written",
                    #"["\u00e9","e\u0301","\u212B","\u00C5","A\u030A"]"#,
                    #"["\#u{E9}","e\#u{301}","\#u{212B}","\#u{C5}","A\#u{30A}"]"#
                ),
            ], fixture: fixture)
        }

        /// JSON member names are equal only when their Unicode scalars are (RFC 8259 §8.3, RFC 8785
        /// §3.2.3); Swift's `String ==` is canonical equivalence, so "é" (U+00E9) and "e\u{301}"
        /// must not collapse into one member, or be refused as duplicates. Python's `json.loads`
        /// keeps them apart, as every other client does. This test fails until the Swift side
        /// keys objects by scalars.
        @Test("member names that differ only by Unicode normalization are two members, as in Python")
        func normalizationTwinKeys() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            try await check([
                RawCase(
                    "é (U+00E9) and e + U+0301 as escapes",
                    #"{"\u00e9":1,"e\u0301":2}"#,
                    #"{"e\#u{301}":2,"\#u{E9}":1}"#
                ),
                RawCase(
                    "é (U+00E9) and e + U+0301 as raw UTF-8",
                    #"{"\#u{E9}":1,"e\#u{301}":2}"#,
                    #"{"e\#u{301}":2,"\#u{E9}":1}"#
                ),
                RawCase(
                    "Å three ways: U+00C5, A + U+030A, U+212B ANGSTROM SIGN",
                    #"{"\u00C5":1,"A\u030A":2,"\u212B":3}"#,
                    #"{"A\#u{30A}":2,"\#u{C5}":1,"\#u{212B}":3}"#
                ),
                RawCase(
                    "Hangul 한 precomposed and as conjoining jamo",
                    #"{"\uD55C":1,"\u1112\u1161\u11AB":2}"#,
                    #"{"\#u{1112}\#u{1161}\#u{11AB}":2,"\#u{D55C}":1}"#
                ),
                RawCase(
                    "twins nested in a state",
                    #"{"user":{"\u00e9":"precomposed","e\u0301":"decomposed"}}"#,
                    #"{"user":{"e\#u{301}":"decomposed","\#u{E9}":"precomposed"}}"#
                ),
            ], fixture: fixture)
        }

        // MARK: Helpers

        /// What one run of the listing printed, once checked.
        struct ClientRun {
            let replica: Int
            let seq: UInt64
            let state: JSON
        }

        /// Runs the whole listing once against the fixture's hub and checks everything it prints.
        func runClient(python: String, script: String, fixture: Fixture) async throws -> ClientRun {
            let client = try fixture.spawn(python, [script, fixture.socket], name: "python3 minimal_client.py")
            client.closeInput()
            let status = try await client.waitForExit(timeout: .seconds(60))
            let lines = client.lines
            let context = "stdout: \(lines), stderr: \(client.errorLines)"
            #expect(status == 0, "the listing exited \(status); \(context)")

            let statusIndex = try #require(lines.firstIndex(where: { $0.hasPrefix("status: ") }), "no status line; \(context)")
            let welcomeIndex = try #require(lines.firstIndex(where: { $0.hasPrefix("welcome: ") }), "no welcome line; \(context)")
            let ackIndex = try #require(lines.firstIndex(where: { $0.hasPrefix("ack: ") }), "no ack line; \(context)")
            let rejectIndex = try #require(lines.firstIndex(where: { $0.hasPrefix("reject: ") }), "no reject line; \(context)")
            let syncedIndex = try #require(lines.firstIndex(where: { $0.hasPrefix("synced: ") }), "no synced line; \(context)")
            #expect(lines.count == 5, "expected exactly status, welcome, ack, reject, synced; \(context)")
            #expect(statusIndex < welcomeIndex && welcomeIndex < ackIndex && ackIndex < rejectIndex
                    && rejectIndex < syncedIndex, "out of order; \(context)")
            #expect(lines[statusIndex].contains("'app': 'counter'"), "\(lines[statusIndex])")

            // welcome: replica R seq S state <the listing's canon(state)>
            let fields = lines[welcomeIndex].split(separator: " ", maxSplits: 6, omittingEmptySubsequences: false)
            guard fields.count == 7, fields[1] == "replica", let replica = Int(fields[2]),
                  fields[3] == "seq", let seq = UInt64(fields[4]), fields[5] == "state" else {
                throw HarnessError("unexpected welcome line \(lines[welcomeIndex].debugDescription)")
            }
            let stateText = String(fields[6])
            let state: JSON
            do {
                state = try JSON(parsing: stateText)
            } catch {
                throw HarnessError("the welcome line's state is not JSON: \(stateText.debugDescription): \(error)")
            }
            #expect(Array(stateText.utf8) == state.canonicalBytes,
                    "the listing's canon(state) is not Swift's canonical form \(state.canonicalString)")

            #expect(lines[ackIndex] == "ack: seq \(seq + 1) origin \(replica) id 1 action {'type': 'increment'}")
            #expect(lines[rejectIndex].hasPrefix("reject: bad bad-action "), "\(lines[rejectIndex])")
            #expect(lines[rejectIndex].contains("no-such-action"), "\(lines[rejectIndex])")
            // The barrier: nobody else dispatches, so it answers at the seq of the ack.
            #expect(lines[syncedIndex] == "synced: seq \(seq + 1)", "\(lines[syncedIndex])")
            return ClientRun(replica: replica, seq: seq, state: state)
        }

        /// A raw JSON text, one line, and the canonical text both sides must make of it.
        struct RawCase {
            let label: String
            let text: String
            let canonical: String
            let digest: String?

            init(_ label: String, _ text: String, _ canonical: String, digest: String? = nil) {
                self.label = label
                self.text = text
                self.canonical = canonical
                self.digest = digest
            }
        }

        /// Parses each case with Swift and with the listing's Python (`json.loads`), and expects
        /// both canonical forms to be `canonical` and both digests to be its FNV-1a.
        func check(_ cases: [RawCase], fixture: Fixture) async throws {
            let answers = try await ProtocolPythonListing.answers(for: cases.map { Array($0.text.utf8) }, in: fixture)
            #expect(answers.count == cases.count)
            for (rawCase, answer) in zip(cases, answers) {
                let expected = Array(rawCase.canonical.utf8)
                let expectedDigest = Digest.hex(Digest.fnv1a64(expected))
                if let digest = rawCase.digest {
                    #expect(expectedDigest == digest, "\(rawCase.label): the expected canonical text does not have the documented digest")
                }
                switch answer {
                case .canonical(let bytes, let digest):
                    #expect(bytes == expected, "\(rawCase.label): Python's canon gives \(Self.show(bytes)), expected \(Self.show(expected))")
                    #expect(digest == expectedDigest, "\(rawCase.label): Python's digest")
                case .failed(let message):
                    Issue.record("\(rawCase.label): Python failed on \(rawCase.text.debugDescription): \(message)")
                }
                let value: JSON
                do {
                    value = try JSON(parsing: rawCase.text)
                } catch {
                    Issue.record("\(rawCase.label): Swift refuses \(rawCase.text.debugDescription): \(error)")
                    continue
                }
                #expect(value.canonicalBytes == expected,
                        "\(rawCase.label): Swift's canonical form is \(Self.show(value.canonicalBytes)), expected \(Self.show(expected))")
                #expect(Digest.of(value) == expectedDigest, "\(rawCase.label): Swift's digest")
            }
        }

        /// Canonical bytes as a quoted, escaped string for failure messages.
        static func show(_ bytes: [UInt8]) -> String {
            String(decoding: bytes, as: UTF8.self).debugDescription
        }
    }
}

/// The Python client in docs/PROTOCOL.md, read from the document, and a python3 to run it.
enum ProtocolPythonListing {
    static let heading = "### A complete Python 3 client"
    /// The first line of the listing that talks to a hub; the lines before it only import and define.
    static let firstSocketLine = "sock = socket.socket"

    /// `python3`, the first one on PATH (absolute directories only), or `nil`.
    static let python3: String? = {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        for directory in path.split(separator: ":") where directory.hasPrefix("/") {
            let candidate = String(directory) + "/python3"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }()

    static var document: URL {
        URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent()   // Tests/SyncTests
            .deletingLastPathComponent()   // Tests
            .deletingLastPathComponent()   // the package root
            .appendingPathComponent("docs/PROTOCOL.md")
    }

    /// The lines of the first ```python block under the heading (before any other heading).
    static func clientLines() throws -> [String] {
        let text = try String(contentsOf: document, encoding: .utf8).replacingOccurrences(of: "\r\n", with: "\n")
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let headings = lines.indices.filter { lines[$0] == heading }
        guard headings.count == 1, let headingIndex = headings.first else {
            throw HarnessError("docs/PROTOCOL.md has \(headings.count) lines \"\(heading)\"; expected exactly one")
        }
        var open = headingIndex + 1
        while open < lines.count && lines[open] != "```python" {
            if lines[open].hasPrefix("#") {
                throw HarnessError("no ```python block under \"\(heading)\" before the next heading \"\(lines[open])\"")
            }
            open += 1
        }
        guard open < lines.count else { throw HarnessError("no ```python block under \"\(heading)\"") }
        guard let close = lines[(open + 1)...].firstIndex(of: "```") else {
            throw HarnessError("the ```python block under \"\(heading)\" is not closed")
        }
        let body = Array(lines[(open + 1)..<close])
        guard body.contains(where: { !$0.trimmingCharacters(in: .whitespaces).isEmpty }) else {
            throw HarnessError("the ```python block under \"\(heading)\" is empty")
        }
        return body
    }

    /// The whole listing, as a file's contents.
    static func client() throws -> String {
        try clientLines().joined(separator: "\n") + "\n"
    }

    /// The listing up to (not including) its first line that opens a socket: its imports and
    /// the definitions of `num`, `canon` and `digest`.
    static func definitions() throws -> String {
        let lines = try clientLines()
        let starts = lines.indices.filter { lines[$0].hasPrefix(firstSocketLine) }
        guard starts.count == 1, let start = starts.first else {
            throw HarnessError("the listing has \(starts.count) lines starting with \"\(firstSocketLine)\"; expected exactly one")
        }
        return lines[..<start].joined(separator: "\n") + "\n"
    }

    /// Loads the listing's definitions (refusing anything but imports and defs) and prints, for
    /// each line of the values file, `ok INDEX HEX(canon(v) as UTF-8) digest(v)` or
    /// `error INDEX NAME MESSAGE`. Output is ASCII whatever the locale.
    static let driver = #"""
        import ast, json, sys

        definitions_path, values_path = sys.argv[1], sys.argv[2]
        with open(definitions_path, encoding="utf-8") as file:
            tree = ast.parse(file.read(), definitions_path)
        for node in tree.body:
            if not isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef)):
                sys.exit("line %d of the listing, before `sock = socket.socket`, is neither an import nor a def" % node.lineno)
        listing = {"__name__": "protocol_listing"}
        exec(compile(tree, definitions_path, "exec"), listing)
        missing = [name for name in ("num", "canon", "digest") if not callable(listing.get(name))]
        if missing:
            sys.exit("the listing defines no %s before `sock = socket.socket`" % ", ".join(missing))
        canon, digest = listing["canon"], listing["digest"]
        with open(values_path, "rb") as file:
            lines = file.read().split(b"\n")
        if lines[-1] != b"":
            sys.exit("the values file does not end with a newline")
        for index, line in enumerate(lines[:-1]):
            try:
                value = json.loads(line.decode("utf-8"))
                print("ok", index, canon(value).encode("utf-8").hex(), digest(value))
            except Exception as error:
                print("error", index, type(error).__name__, ascii(str(error)))
        """#

    /// What the listing's functions made of one JSON text.
    enum Answer {
        case canonical([UInt8], digest: String)
        case failed(String)
    }

    /// Runs the listing's `canon` and `digest` (via `json.loads`) on each JSON text, in order.
    static func answers(for texts: [[UInt8]], in fixture: Fixture) async throws -> [Answer] {
        guard let python = python3 else { throw HarnessError("python3 is not on PATH") }
        guard !texts.isEmpty else { throw HarnessError("no JSON texts to check") }
        var values: [UInt8] = []
        for (index, text) in texts.enumerated() {
            guard !text.isEmpty, !text.contains(0x0A) else { throw HarnessError("JSON text #\(index) is empty or spans lines") }
            values += text
            values.append(0x0A)
        }
        let definitionsPath = fixture.directory + "/listing_definitions.py"
        let driverPath = fixture.directory + "/listing_driver.py"
        let valuesPath = fixture.directory + "/values.jsonl"
        try Data(definitions().utf8).write(to: URL(fileURLWithPath: definitionsPath))
        try Data(driver.utf8).write(to: URL(fileURLWithPath: driverPath))
        try Data(values).write(to: URL(fileURLWithPath: valuesPath))

        let child = try fixture.spawn(python, [driverPath, definitionsPath, valuesPath], name: "python3 listing_driver.py")
        child.closeInput()
        let status = try await child.waitForExit(timeout: .seconds(120))
        guard status == 0 else {
            throw HarnessError("the Python driver exited \(status); stderr: \(child.errorLines.suffix(20))")
        }
        var answers = [Answer?](repeating: nil, count: texts.count)
        for line in child.lines {
            let fields = line.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: false)
            guard fields.count == 4, let index = Int(fields[1]), answers.indices.contains(index), answers[index] == nil else {
                throw HarnessError("unexpected line from the Python driver: \(line.debugDescription)")
            }
            switch fields[0] {
            case "ok":
                guard let canonical = decodeHex(fields[2]) else { throw HarnessError("bad hex from the Python driver: \(line)") }
                answers[index] = .canonical(canonical, digest: String(fields[3]))
            case "error":
                answers[index] = .failed("\(fields[2]): \(fields[3])")
            default:
                throw HarnessError("unexpected line from the Python driver: \(line.debugDescription)")
            }
        }
        let complete = answers.compactMap { $0 }
        guard complete.count == texts.count else {
            throw HarnessError("the Python driver answered \(complete.count) of \(texts.count) texts; stderr: \(child.errorLines.suffix(20))")
        }
        return complete
    }

    /// Bytes from lowercase or uppercase hex digits, or `nil` if `hex` is not hex.
    static func decodeHex(_ hex: Substring) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        func nibble(_ digit: UInt8) -> UInt8? {
            switch digit {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
            default: nil
            }
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var position = 0
        while position < digits.count {
            guard let high = nibble(digits[position]), let low = nibble(digits[position + 1]) else { return nil }
            bytes.append(high << 4 | low)
            position += 2
        }
        return bytes
    }
}

/// SplitMix64: a tiny generator with a fixed algorithm, so a seed replays the same values on
/// any toolchain (the standard library's `random(in:using:)` mapping is not specified). The
/// convergence harness's own generator.
typealias SplitMix64 = SeededGenerator

/// Random JSON texts from a seed: nested values with awkward numbers and strings, members in
/// random order, random escapes (`\uXXXX`, surrogate pairs, `\/`) and whitespace.
///
/// They are texts, not `JSON` values, so they reach the library only through its parser and
/// the test does not depend on how `JSON` stores objects. Within one object no two member
/// names are equal by Swift's `String ==`, which is canonical equivalence: that keeps
/// normalization twins ("é" U+00E9 and "e" U+0301) out, because until JSON keys compare by
/// scalars Swift would take them for duplicates. The twins are tested on their own.
struct SeededJSONTexts {
    private var bits: SplitMix64

    init(seed: UInt64) { bits = SplitMix64(seed: seed) }

    mutating func next() -> String {
        var text = ""
        write(depth: 0, into: &text)
        return text
    }

    private mutating func below(_ bound: Int) -> Int { Int(bits.next() % UInt64(bound)) }
    private mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
    private mutating func pick<Element>(_ choices: [Element]) -> Element { choices[below(choices.count)] }

    private mutating func write(depth: Int, into text: inout String) {
        text += space()
        // Mostly containers at the top, only scalars at the bottom (depth 4 is deep enough).
        let kind = depth == 0 && chance(70) ? 6 + below(4) : below(depth >= 4 ? 6 : 10)
        switch kind {
        case 0:
            text += "null"
        case 1:
            text += chance(50) ? "true" : "false"
        case 2, 3, 4:
            text += number()
        case 5:
            text += quoted(string(maxScalars: 12))
        case 6, 7:
            text += "["
            let count = below(6)
            for index in 0..<count {
                if index > 0 { text += "," }
                write(depth: depth + 1, into: &text)
            }
            text += space() + "]"
        default:
            text += "{"
            var names: [String] = []
            let count = below(6)
            for _ in 0..<count {
                let name = memberName()
                guard !names.contains(name) else { continue }   // canonical equivalence, see above
                if !names.isEmpty { text += "," }
                names.append(name)
                text += space() + quoted(name) + space() + ":"
                write(depth: depth + 1, into: &text)
            }
            text += space() + "}"
        }
        text += space()
    }

    private mutating func space() -> String {
        chance(8) ? pick([" ", "\t", "\n", "\r", "\r\n ", "  "]) : ""
    }

    /// Spellings around the ECMAScript layout boundaries, the double range's ends and 2^53.
    private static let notableNumbers = [
        "0", "-0", "-0.0", "0.0", "1.0", "1E0", "10e-1", "0.5e-6",
        "1e21", "1E+21", "1000000000000000000000", "999999999999999900000", "1e20", "100000000000000000000",
        "1e-7", "0.0000001", "1e-6", "0.000001", "-1e-7", "123e-9",
        "5e-324", "4.9e-324", "-5e-324", "2.2250738585072014e-308", "2.225073858507201e-308",
        "1.7976931348623157e308", "-1.7976931348623157e308", "1e-400",
        "9007199254740992", "-9007199254740992", "9007199254740991", "9007199254740993", "18014398509481984",
        "1152921504606846976", "123456789012345678901234567890", "0.1", "0.3", "1.5", "-7", "4400",
    ]

    private mutating func number() -> String {
        switch below(6) {
        case 0:
            return pick(Self.notableNumbers)
        case 1:
            return String(below(2001) - 1000)
        case 2:   // an integer within ±2^53
            return String(Int64(bits.next() % ((1 << 54) + 1)) - (1 << 53))
        case 3:   // any finite double, from random bits: every exponent, subnormals included
            while true {
                let value = Double(bitPattern: bits.next())
                if value.isFinite { return "\(value)" }
            }
        case 4:   // few digits, any decimal exponent from -30 to 30
            let sign = chance(30) ? "-" : ""
            let digits = 1 + below(99_999)
            let exponent = below(61) - 30
            return "\(sign)\(digits)e\(exponent)"
        default:  // a neighbour of a layout boundary
            let boundary: Double = pick([1e21, 1e-6, 1e-7, 9_007_199_254_740_992, 1e20, 0.1])
            let neighbour = chance(50) ? boundary.nextUp : boundary.nextDown
            return "\(neighbour)"
        }
    }

    private static let notableScalars: [UInt32] = [
        0x7F, 0x80, 0x85, 0x9F, 0xA0, 0x2028, 0x2029, 0xFEFF, 0xFFFD, 0xFFFE, 0xFFFF,
        0xD7FF, 0xE000, 0xF8FF, 0x10000, 0x1D11E, 0x1F600, 0x10FFFF,
    ]
    /// Letters and marks with canonically equivalent spellings (é, Å, 한 and their parts).
    private static let composable: [UInt32] = [0xE9, 0x65, 0x301, 0xC5, 0x41, 0x30A, 0x212B, 0xD55C, 0x1112, 0x1161, 0x11AB, 0x316]

    private mutating func scalar() -> Unicode.Scalar {
        let value: UInt32
        switch below(10) {
        case 0, 1, 2, 3: value = 0x20 + UInt32(below(0x5F))         // printable ASCII
        case 4: value = UInt32(below(0x20))                         // C0 controls
        case 5: value = pick(Self.notableScalars)
        case 6: value = 0x80 + UInt32(below(0xFF80))                // the rest of the BMP
        case 7: value = 0x10000 + UInt32(below(0x10_0000))          // supplementary planes
        case 8: value = pick(Self.composable)
        default: value = pick([0x22, 0x5C, 0x2F])                   // " \ /
        }
        // A surrogate code point is not a scalar: take its nearest neighbour outside the range.
        let neighbour: Unicode.Scalar = value < 0xDC00 ? "\u{D7FF}" : "\u{E000}"
        return Unicode.Scalar(value) ?? neighbour
    }

    private mutating func string(maxScalars: Int) -> String {
        var scalars = String.UnicodeScalarView()
        let count = below(maxScalars + 1)
        for _ in 0..<count { scalars.append(scalar()) }
        return String(scalars)
    }

    private static let notableNames = [
        "", "a", "B", "aa", "b", "type", "\u{E9}", "e\u{301}", "\u{C5}", "A\u{30A}", "\u{212B}",
        "\u{E000}", "\u{1F600}", "\u{10FFFF}", "\u{FFFF}", "\u{7F}", "\u{0}", "\"", "\\", "\u{2028}",
    ]

    private mutating func memberName() -> String {
        chance(40) ? pick(Self.notableNames) : string(maxScalars: 4)
    }

    private static let shortEscapes: [UInt32: String] = [0x08: #"\b"#, 0x09: #"\t"#, 0x0A: #"\n"#, 0x0C: #"\f"#, 0x0D: #"\r"#]

    /// `string` as a JSON string literal, each scalar written raw or escaped at random.
    private mutating func quoted(_ string: String) -> String {
        var text = "\""
        for scalar in string.unicodeScalars {
            if scalar == "\"" {
                text += #"\""#
            } else if scalar == "\\" {
                text += #"\\"#
            } else if let short = Self.shortEscapes[scalar.value], chance(70) {
                text += short
            } else if scalar.value < 0x20 || chance(10) {
                text += escaped(scalar)
            } else if scalar == "/" && chance(30) {
                text += #"\/"#
            } else {
                text.unicodeScalars.append(scalar)
            }
        }
        return text + "\""
    }

    /// `\uXXXX`, or a surrogate pair of them above U+FFFF, in random hex case.
    private mutating func escaped(_ scalar: Unicode.Scalar) -> String {
        guard scalar.value > 0xFFFF else { return unitEscape(scalar.value) }
        let offset = scalar.value - 0x10000
        return unitEscape(0xD800 + (offset >> 10)) + unitEscape(0xDC00 + (offset & 0x3FF))
    }

    private mutating func unitEscape(_ unit: UInt32) -> String {
        let hex = String(unit, radix: 16, uppercase: chance(50))
        return #"\u"# + String(repeating: "0", count: 4 - hex.count) + hex
    }
}
