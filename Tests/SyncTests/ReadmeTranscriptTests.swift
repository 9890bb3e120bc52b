import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SyncLocks
import SyncPOSIX
import Synchronization

// The transcripts of README.md and docs/OPERATIONS.md §20 are real output. Each one is either
// run by a test here and compared line by line (the line before its block says
// `<!-- checked: NAME -->`), or marked `<!-- excerpt -->` (or `<!-- excerpt: WHY -->`): a
// capture that needs what a test does not have (a NATS cluster, systemd, a minute of waiting).
// Compared, a line's volatile parts are masked on both sides: times, pids, uids and the hub's
// user, hub and history ids, dispatch ids, durations (`in N ms`), the open-files limit and the
// clients it allows; the run's temporary paths are put back as the page writes them.

/// The blocks the tests of this file and OperationsTranscriptTests.swift run, by page.
let checkedTranscripts: [String: Set<String>] = [
    "README.md": [
        "walkthrough-hub", "walkthrough-left", "walkthrough-right", "walkthrough-increment-left",
        "walkthrough-increment-right", "walkthrough-step", "walkthrough-step-left", "walkthrough-digest",
        "walkthrough-bad-lines", "walkthrough-one-shot", "walkthrough-dispatched", "walkthrough-watch",
        "walkthrough-hub-log", "walkthrough-dropped", "walkthrough-no-hub",
        "json-hub", "json-dispatch", "json-attach", "crash-demo",
        "upgrade-hub-old", "upgrade-left", "upgrade-left-add", "upgrade-right", "upgrade-hub-new", "upgrade-left-back", "upgrade-new",
        "upgrade-run", "upgrade-left-told", "upgrade-new-attached", "upgrade-state",
    ],
    "docs/OPERATIONS.md": [
        "nats-no-key", "nats-fsync", "nats-waiting", "nats-old-server",
    ],
]

/// Every transcript is checked or marked an excerpt, and every `checked` marker names a block a
/// test runs.
@Test("every transcript in README.md and docs/OPERATIONS.md §20 is run by a test or marked an excerpt")
func transcriptsAreCheckedOrExcerpts() throws {
    // Blocks of these kinds are commands or files, not output.
    let notOutput: Set<String> = ["sh", "ini", "conf", "text", "swift"]
    for (page, scope) in [("README.md", nil), ("docs/OPERATIONS.md", "## 20. ")] as [(String, String?)] {
        let text = try transcriptPage(page)
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        var offset = 0
        if let scope {
            let start = try #require(lines.firstIndex { $0.hasPrefix(scope) }, "\(page) has no \(scope)")
            let end = lines[(start + 1)...].firstIndex { $0.hasPrefix("## ") } ?? lines.count
            lines = Array(lines[start..<end])
            offset = start
        }
        var checked: Set<String> = []
        var blocks = 0
        var index = 0
        while index < lines.count {
            let line = lines[index].drop { $0 == " " }
            guard line.hasPrefix("```") else { index += 1; continue }
            let info = line.dropFirst(3).trimmingCharacters(in: .whitespaces)
            let marker = index > 0 ? lines[index - 1].trimmingCharacters(in: .whitespaces) : ""
            if !notOutput.contains(info) {
                blocks += 1
                if let name = checkedMarkerName(marker) {
                    #expect(!checked.contains(name), "\(page):\(offset + index): the marker checked: \(name) is there twice")
                    checked.insert(name)
                } else {
                    #expect(marker == "<!-- excerpt -->" || (marker.hasPrefix("<!-- excerpt: ") && marker.hasSuffix(" -->")),
                            "\(page):\(offset + index + 1): this block of output is neither run by a test (<!-- checked: NAME --> on the line before) nor marked <!-- excerpt -->")
                }
            }
            // Skip to the closing fence.
            index += 1
            while index < lines.count, !lines[index].drop(while: { $0 == " " }).hasPrefix("```") { index += 1 }
            index += 1
        }
        #expect(blocks > 5, "only \(blocks) blocks of output found in \(page)")
        #expect(checked == checkedTranscripts[page] ?? [],
                "\(page): the blocks marked checked (\(checked.sorted())) are not those the tests run (\((checkedTranscripts[page] ?? []).sorted()))")
    }
}

/// The name in `<!-- checked: NAME -->`, or `nil`.
private func checkedMarkerName(_ line: String) -> String? {
    guard line.hasPrefix("<!-- checked: "), line.hasSuffix(" -->") else { return nil }
    return String(line.dropFirst("<!-- checked: ".count).dropLast(" -->".count))
}

// MARK: - The walkthrough

/// README's walkthrough, as its four terminals: the hub, `left` and `right` (in pseudo-terminals,
/// so hubd stamps its lines and `attach` shows its prompt, as in a terminal), and the one-shot
/// commands; then the json app.
@Test("README.md's walkthrough prints what the page shows", .timeLimit(.minutes(1)))
func readmeWalkthrough() async throws {
    let fixture = try Fixture()
    let run = TranscriptRun(fixture: fixture, page: "README.md")
    defer { run.shutdown() }
    let runtime = fixture.directory + "/run"
    #expect(mkdir(runtime, 0o700) == 0)
    run.paths = [("/run/user/1000", runtime), ("/tmp/storesync-json.sock", fixture.directory + "/json.sock")]
    run.environment = ["XDG_RUNTIME_DIR": runtime, "XDG_STATE_HOME": fixture.directory + "/state"]

    // Terminal 1.
    let hub = try run.terminal("hubd", [], raiseOpenFiles: true)
    try await hub.waitForLines(2)
    try run.compare("walkthrough-hub", ["$ swift run hubd"] + hub.lines(0..<2))

    // Terminals 2 and 3.
    let left = try run.terminal("replica-cli", ["attach", "--name", "left"])
    try await left.waitForLines(1)
    try run.compare("walkthrough-left", ["$ swift run replica-cli attach --name left"] + left.lines(0..<1))
    let right = try run.terminal("replica-cli", ["attach", "--name", "right"])
    try await right.waitForLines(1)
    try run.compare("walkthrough-right", ["$ swift run replica-cli attach --name right"] + right.lines(0..<1))
    try await hub.waitForLines(4)

    var leftMark = try await run.play("walkthrough-increment-left", on: left, from: 1)
    var rightMark = try await run.expect("walkthrough-increment-right", on: right, from: 1)
    rightMark = try await run.play("walkthrough-step", on: right, from: rightMark)
    leftMark = try await run.expect("walkthrough-step-left", on: left, from: leftMark)
    leftMark = try await run.play("walkthrough-digest", on: left, from: leftMark)
    rightMark = try await run.play("walkthrough-digest", on: right, from: rightMark)
    leftMark = try await run.play("walkthrough-bad-lines", on: left, from: leftMark)

    // Terminal 4.
    let shell = try run.shell(directory: transcriptRepositoryRoot().path)
    try await run.compare("walkthrough-one-shot", shell.play(run.block("walkthrough-one-shot")))
    leftMark = try await run.expect("walkthrough-dispatched", on: left, from: leftMark)
    rightMark = try await run.expect("walkthrough-dispatched", on: right, from: rightMark)

    // The watch, while left types `down` and `step` and right `up` and `increment`.
    let watch = try run.terminal("replica-cli", ["watch"])
    try await hub.waitForLine { $0.contains("replica 8 attached") }
    // Each line typed prints itself and its action where it was typed, the action in the other
    // terminal and in the watch; each waits for the one before it to be applied everywhere
    // (`step` decides from the state `down` made).
    for (index, (terminal, line)) in [(left, "down"), (left, "step"), (right, "up"), (right, "increment")].enumerated() {
        try await terminal.type(line)
        leftMark += terminal === left ? 2 : 1
        rightMark += terminal === right ? 2 : 1
        try await watch.waitForLines(index + 1)
        try await left.waitForLines(leftMark)
        try await right.waitForLines(rightMark)
    }
    watch.interrupt()
    _ = try await watch.waitForExit()
    try await run.compare("walkthrough-watch", ["$ replica-cli watch"] + watch.finalLines + shell.run("replica-cli status"))

    // Ctrl-C in terminal 1.
    try await hub.waitForLine { $0.contains("replica 8 disconnected") }
    hub.interrupt()
    let hubStatus = try await hub.waitForExit()
    try run.compare("walkthrough-hub-log", ["$ swift run hubd"] + hub.finalLines + ["$ echo \"exit $?\"", "exit \(hubStatus)"])
    leftMark = try await run.expect("walkthrough-dropped", on: left, from: leftMark)
    rightMark = try await run.expect("walkthrough-dropped", on: right, from: rightMark)
    for terminal in [left, right] {
        try await terminal.type(":quit")
        #expect(try await terminal.waitForExit() == 0, "\(terminal.name) did not end with status 0 on :quit")
    }
    try await run.compare("walkthrough-no-hub", shell.play(run.block("walkthrough-no-hub")))

    // The json app on a socket of its own.
    let json = try run.terminal("hubd", ["--app", "json", "--socket", fixture.directory + "/json.sock"], raiseOpenFiles: true)
    try await json.waitForLines(2)
    try run.compare("json-hub", ["$ swift run hubd --app json --socket /tmp/storesync-json.sock"] + json.lines(0..<2))
    try await run.compare("json-dispatch", shell.play(run.block("json-dispatch")))
    try await run.compare("json-attach", shell.play(run.block("json-attach")))
}

/// README's "Your app's next version": todos@1 with two terminals, today's hub, a todos@2
/// terminal waiting, the upgrade, the old terminals told, the new one attached.
@Test("README.md's upgrade walkthrough prints what the page shows", .timeLimit(.minutes(1)))
func readmeUpgrade() async throws {
    let fixture = try Fixture()
    let run = TranscriptRun(fixture: fixture, page: "README.md")
    defer { run.shutdown() }
    run.paths = [("/tmp/storesync-todos.sock", fixture.directory + "/todos.sock"), ("/tmp/storesync-todos", fixture.directory + "/todos")]
    run.environment = ["XDG_STATE_HOME": fixture.directory + "/state"]
    let socket = fixture.directory + "/todos.sock", data = fixture.directory + "/todos"

    let old = try run.terminal("hubd", ["--app", "todos@1", "--data-dir", data, "--socket", socket], raiseOpenFiles: true)
    try await old.waitForLines(3)
    try run.compare("upgrade-hub-old", [run.output("$ swift run hubd --app todos@1 --data-dir \(data) --socket \(socket)")] + old.lines(0..<3))
    let left = try run.terminal("replica-cli", ["--socket", socket, "attach", "--name", "left"])
    try await left.waitForLines(1)
    try run.compare("upgrade-left", [run.output("$ swift run replica-cli --socket \(socket) attach --name left")] + left.lines(0..<1))
    var leftMark = try await run.play("upgrade-left-add", on: left, from: 1)
    let right = try run.terminal("replica-cli", ["--socket", socket, "attach", "--name", "right"])
    try await right.waitForLines(1)
    try run.compare("upgrade-right", [run.output("$ swift run replica-cli --socket \(socket) attach --name right")] + right.lines(0..<1))
    try await old.waitForLine { $0.contains("replica 2 (right) attached") }

    // Ctrl-C, and today's hub.
    old.interrupt()
    _ = try await old.waitForExit()
    let hub = try run.terminal("hubd", ["--app", "todos", "--data-dir", data, "--socket", socket], raiseOpenFiles: true)
    try await hub.waitForLines(4)
    try run.compare("upgrade-hub-new", [run.output("$ swift run hubd --app todos --data-dir \(data) --socket \(socket)")] + hub.lines(0..<4))
    leftMark = try await run.expect("upgrade-left-back", on: left, from: leftMark)
    try await right.waitForLine { $0.contains("link back") }

    let new = try run.terminal("replica-cli", ["--socket", socket, "--app", "todos@2", "attach", "--name", "new"])
    try await new.waitForLines(1)
    try run.compare("upgrade-new", [run.output("$ swift run replica-cli --socket \(socket) --app todos@2 attach --name new")] + new.lines(0..<1))
    try await hub.waitForLine { $0.contains("holding the hello") }

    let shell = try run.shell(directory: fixture.directory)
    try await run.compare("upgrade-run", shell.play(run.block("upgrade-run")))
    leftMark = try await run.expect("upgrade-left-told", on: left, from: leftMark)
    #expect(try await left.waitForExit() == 1)
    #expect(try await right.waitForExit() == 1)
    _ = try await run.play("upgrade-new-attached", on: new, from: 1)
    try await run.compare("upgrade-state", shell.play(run.block("upgrade-state")))
    try await new.type(":quit")
    #expect(try await new.waitForExit() == 0)
    hub.interrupt()
    #expect(try await hub.waitForExit() == 0)
}

/// README's "Surviving crashes": the block's commands, run in one bash as the page runs them,
/// except that each `sleep` waits for what it stands for (and two more waits stand for the
/// typing between commands, where the page's run had time to log a disconnect).
@Test("README.md's crash demo prints what the page shows", .timeLimit(.minutes(1)))
func readmeCrashDemo() async throws {
    let fixture = try Fixture()
    let run = TranscriptRun(fixture: fixture, page: "README.md")
    defer { run.shutdown() }
    let demo = fixture.directory + "/demo"
    run.paths = [("/tmp/storesync-demo", demo)]
    let shell = try run.shell(directory: fixture.directory)
    let log = demo + "/hub.log"
    func contains(_ file: String, _ text: String) -> Bool {
        ((try? String(contentsOfFile: file, encoding: .utf8)) ?? "").contains(text)
    }
    func gone(_ job: Int) -> Bool {
        let pids = shell.backgroundPIDs
        return job <= pids.count && !transcriptProcessIsAlive(pids[job - 1])
    }
    // What each `sleep` of the page waits for, in order.
    var sleeps: [(String, () -> Bool)] = [
        ("the hub to listen", { (try? HubStatusProbe.status(demo + "/hub.sock")) != nil }),
        ("the watch to attach", { contains(log, "replica 1 attached") }),
        ("the killed hub to be gone", { gone(1) }),
        ("the watch to resume", { contains(demo + "/watch.err", "link back") }),
        ("the watch's third action and the dispatch's disconnect", {
            contains(log, "replica 1026 disconnected")
                && ((try? String(contentsOfFile: demo + "/watch.ndjson", encoding: .utf8)) ?? "").split(separator: "\n").count == 3
        }),
        ("the watch to end, and the hub to log it", { gone(2) && contains(log, "replica 1025 disconnected") }),
        ("the hub to end", { gone(3) }),
    ]
    // Where a person typing had time for the hub to log a disconnect.
    let before: [String: (String, () -> Bool)] = [
        "kill -9 %1": ("the dispatch's disconnect", { contains(log, "replica 2 disconnected") }),
        "kill %2": ("the state call's disconnect", { contains(log, "replica 1027 disconnected") }),
    ]
    var transcript: [String] = []
    for line in try run.block("crash-demo") where line.hasPrefix("$ ") {
        let command = String(line.dropFirst(2))
        if let wait = before[command] {
            try await waitUntil(wait.0, timeout: .seconds(10), wait.1)
        }
        if command.hasPrefix("sleep ") {
            #expect(!sleeps.isEmpty, "the crash demo has more sleeps than this test knows")
            guard !sleeps.isEmpty else { break }
            let (what, condition) = sleeps.removeFirst()
            try await waitUntil(what, timeout: .seconds(10), condition)
            transcript.append(line)
            continue
        }
        transcript += try await shell.run(command)
    }
    #expect(sleeps.isEmpty, "the crash demo has fewer sleeps than this test knows")
    try run.compare("crash-demo", transcript)
}

// MARK: - Pages, blocks and masks

/// The repository's root (this file is `Tests/SyncTests/ReadmeTranscriptTests.swift`).
func transcriptRepositoryRoot() -> URL {
    URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
}

/// A page of the repository.
func transcriptPage(_ page: String) throws -> String {
    try String(contentsOf: transcriptRepositoryRoot().appendingPathComponent(page), encoding: .utf8)
}

/// The lines of the fenced block on the line after `<!-- checked: NAME -->`, without its
/// indentation.
func checkedBlock(_ name: String, in page: String) throws -> [String] {
    let lines = try transcriptPage(page).split(separator: "\n", omittingEmptySubsequences: false)
    guard let marker = lines.firstIndex(where: { $0.trimmingCharacters(in: .whitespaces) == "<!-- checked: \(name) -->" }),
          marker + 1 < lines.count else {
        throw HarnessError("\(page) has no <!-- checked: \(name) --> marker")
    }
    let fence = lines[marker + 1]
    let indent = fence.prefix { $0 == " " }.count
    guard fence.dropFirst(indent).hasPrefix("```") else {
        throw HarnessError("\(page): the line after <!-- checked: \(name) --> opens no fenced block")
    }
    var block: [String] = []
    for line in lines[(marker + 2)...] {
        if line.drop(while: { $0 == " " }).hasPrefix("```") { return block }
        block.append(String(line.dropFirst(min(indent, line.prefix { $0 == " " }.count))))
    }
    throw HarnessError("\(page): the block after <!-- checked: \(name) --> is not closed")
}

/// Masks what differs from run to run in the lines of a transcript, the page's or a run's:
/// hub and history ids are numbered in the order they first appear, so that the same id must
/// still be the same id.
func maskedTranscript(_ lines: [String]) -> [String] {
    var ids: [String: String] = [:]
    return lines.map { line in
        var line = line
        for (pattern, template) in transcriptMasks {
            line = transcriptReplace(pattern, in: line) { _ in template }
        }
        return transcriptReplace(#"\b(hub|history)( +|":")([0-9a-f]{16})\b"#, in: line) { groups in
            let key = groups[1] + " " + groups[3]
            let known = ids[key] ?? "<\(groups[1]) \(ids.keys.filter { $0.hasPrefix(groups[1] + " ") }.count + 1)>"
            ids[key] = known
            return groups[1] + groups[2] + known
        }
    }
}

/// Regular expressions for what differs from run to run, and what stands for it.
private let transcriptMasks: [(String, String)] = [
    (#"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"#, "<time>"),
    (#"open-files limit (raised from \d+ to )?\d+ \(the hard limit is \d+\)"#, "open-files limit <limit>"),
    (#"at most \d+ clients"#, "at most <n> clients"),
    (#"uid \d+ \([^()]*, the hub's user\)"#, "uid <uid> (<user>, the hub's user)"),
    (#"\buid \d+"#, "uid <uid>"),
    (#"\bpid \d+"#, "pid <pid>"),
    (#""id":\d+"#, #""id":<id>"#),
    (#"\brejected \d+:"#, "rejected <id>:"),
    (#"\bin \d+ ms\b"#, "in <n> ms"),
]

/// `text` with every match of `pattern` replaced by what `replacement` makes of its groups
/// (0 the whole match).
func transcriptReplace(_ pattern: String, in text: String, _ replacement: ([String]) -> String) -> String {
    guard let expression = try? NSRegularExpression(pattern: pattern) else { return text }
    let source = text as NSString
    var result = ""
    var last = 0
    for match in expression.matches(in: text, range: NSRange(location: 0, length: source.length)) {
        result += source.substring(with: NSRange(location: last, length: match.range.location - last))
        let groups = (0..<match.numberOfRanges).map { index -> String in
            let range = match.range(at: index)
            return range.location == NSNotFound ? "" : source.substring(with: range)
        }
        result += replacement(groups)
        last = match.range.location + match.range.length
    }
    return result + source.substring(from: last)
}

/// Whether `pid` is a process that has not exited (a zombie has).
func transcriptProcessIsAlive(_ pid: Int32) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = stat.lastIndex(of: ")") else { return false }
    let state = stat[stat.index(after: close)...].drop { $0 == " " }.first
    return state != "Z" && state != "X"
}

// MARK: - A run

/// One test's run of a page's transcripts: the terminals and the shell it started (killed by
/// PID in ``shutdown()``), the paths it uses in place of the page's, and the comparison.
final class TranscriptRun: @unchecked Sendable {
    let fixture: Fixture
    let page: String
    /// (the page's path, this run's path), put in the page's commands and back in the output.
    var paths: [(page: String, run: String)] = []
    /// Set in every process started, over the test's own (`STORESYNC_*` removed).
    var environment: [String: String] = [:]
    private var terminals: [TranscriptTerminal] = []
    private var shells: [TranscriptShell] = []

    init(fixture: Fixture, page: String) {
        self.fixture = fixture
        self.page = page
    }

    /// The environment of a process of this run: the test's, without `STORESYNC_*`, with the
    /// built executables first on `PATH`, and ``environment``.
    var processEnvironment: [String: String] {
        var result = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("STORESYNC_") }
        let built = (try? Executables.url("hubd").deletingLastPathComponent().path) ?? ""
        result["PATH"] = built + ":" + (result["PATH"] ?? "/usr/bin:/bin")
        return result.merging(environment) { $1 }
    }

    /// The page's block `name`.
    func block(_ name: String) throws -> [String] { try checkedBlock(name, in: page) }

    /// A page's command with this run's paths.
    func command(_ text: String) -> String {
        paths.reduce(text) { $0.replacingOccurrences(of: $1.page, with: $1.run) }
    }

    /// A line of output with the page's paths.
    func output(_ text: String) -> String {
        paths.sorted { $0.run.count > $1.run.count }.reduce(text) { $0.replacingOccurrences(of: $1.run, with: $1.page) }
    }

    /// Starts a built executable in a pseudo-terminal.
    ///
    /// - Parameter raiseOpenFiles: Start it with a soft open-files limit of 1024, as a login
    ///   session has, so hubd raises it as it does there.
    func terminal(_ executable: String, _ arguments: [String], raiseOpenFiles: Bool = false) throws -> TranscriptTerminal {
        let path = try Executables.url(executable).path
        let terminal = raiseOpenFiles
            ? try TranscriptTerminal(name: executable, "/bin/sh", ["-c", "ulimit -Sn 1024 2>/dev/null; exec \"$0\" \"$@\"", path] + arguments,
                                     environment: processEnvironment)
            : try TranscriptTerminal(name: executable, path, arguments, environment: processEnvironment)
        terminals.append(terminal)
        return terminal
    }

    /// Starts a bash in `directory`.
    func shell(directory: String) throws -> TranscriptShell {
        let shell = try TranscriptShell(run: self, directory: directory)
        shells.append(shell)
        return shell
    }

    /// Waits for `terminal` to print the block's lines after `mark`, compares them, and returns
    /// the mark after them.
    func expect(_ name: String, on terminal: TranscriptTerminal, from mark: Int) async throws -> Int {
        let lines = try block(name)
        try await terminal.waitForLines(mark + lines.count)
        try compare(name, terminal.lines(mark..<(mark + lines.count)), in: terminal.name)
        return mark + lines.count
    }

    /// Types the block's `> ` lines into `terminal` (each once everything before it is printed),
    /// compares what it printed after `mark`, and returns the mark after it.
    func play(_ name: String, on terminal: TranscriptTerminal, from mark: Int) async throws -> Int {
        let lines = try block(name)
        for (index, line) in lines.enumerated() where line.hasPrefix("> ") {
            try await terminal.waitForLines(mark + index)
            try await terminal.type(String(line.dropFirst(2)))
        }
        try await terminal.waitForLines(mark + lines.count)
        try compare(name, terminal.lines(mark..<(mark + lines.count)), in: terminal.name)
        return mark + lines.count
    }

    /// Compares a run's lines with the page's block, masked.
    func compare(_ name: String, _ run: [String], in place: String? = nil,
                 sourceLocation: SourceLocation = #_sourceLocation) throws {
        let expected = try block(name)
        let actual = run.map(output)
        let (pageMasked, runMasked) = (maskedTranscript(expected), maskedTranscript(actual))
        guard pageMasked != runMasked else { return }
        let first = zip(pageMasked, runMasked).enumerated().first { $0.element.0 != $0.element.1 }
        let at = first.map { "line \($0.offset + 1) differs:\n  page: \($0.element.0)\n  run:  \($0.element.1)" }
            ?? "the page has \(expected.count) lines, the run \(actual.count)"
        Issue.record("\(page)'s block <!-- checked: \(name) -->\(place.map { " (in \($0))" } ?? "") differs from the run: \(at)\n--- the run's lines, to put in the page:\n\(actual.joined(separator: "\n"))\n---",
                     sourceLocation: sourceLocation)
    }

    /// Kills every process the run started, by PID, and removes the fixture's directory.
    func shutdown() {
        for shell in shells { shell.shutdown() }
        for terminal in terminals { terminal.forceKill() }
        let deadline = ContinuousClock.now + .seconds(10)
        while terminals.contains(where: \.isRunning), ContinuousClock.now < deadline { usleep(1_000) }
        fixture.shutdown()
    }
}

// MARK: - A program in a pseudo-terminal

/// A program whose standard input, output and error are a pseudo-terminal, and the lines its
/// screen shows (carriage returns, erased lines and the line editor's redraws applied).
final class TranscriptTerminal: Sendable {
    let name: String
    let pid: Int32
    private let process: Process
    private let master: Int32
    private let screen = Locked(TerminalScreen())
    private let typed = Atomic<Int>(0)
    private let finished = Atomic<Bool>(false)

    init(name: String, _ executable: String, _ arguments: [String], environment: [String: String]) throws {
        let (master, slave) = try openPseudoTerminal()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment
        let handle = FileHandle(fileDescriptor: slave, closeOnDealloc: false)
        process.standardInput = handle
        process.standardOutput = handle
        process.standardError = handle
        do {
            try process.run()
        } catch {
            close(slave)
            close(master)
            throw error
        }
        close(slave)
        self.name = name + (arguments.last.map { " " + $0 } ?? "")
        self.process = process
        self.pid = process.processIdentifier
        self.master = master
        // Reads until the last holder of the terminal's other side has closed it (EIO).
        Thread.detachNewThread { [self] in
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(master, $0.baseAddress, $0.count) }
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { break }
                screen.withLock { $0.feed(buffer[0..<n]) }
            }
            close(master)
            finished.store(true, ordering: .releasing)
        }
    }

    var isRunning: Bool { process.isRunning }
    var lineCount: Int { screen.withLock { $0.lines.count } }
    func lines(_ range: Range<Int>) -> [String] { screen.withLock { Array($0.lines[range]) } }

    /// The lines, with the last one too when the screen ends without a newline (after exit).
    var finalLines: [String] {
        screen.withLock { $0.lines + ($0.current.isEmpty ? [] : [String(String.UnicodeScalarView($0.current))]) }
    }

    func waitForLines(_ count: Int, timeout: Duration = .seconds(15)) async throws {
        try await waitUntil("\(name) to show \(count) lines; it shows \(finalLines.suffix(6))", timeout: timeout) {
            lineCount >= count
        }
    }

    func waitForLine(timeout: Duration = .seconds(15), where match: @escaping (String) -> Bool) async throws {
        try await waitUntil("\(name) to show a line; it shows \(finalLines.suffix(6))", timeout: timeout) {
            screen.withLock { $0.lines.contains(where: match) }
        }
    }

    /// Types `line` and Enter at `attach`'s prompt, once the line editor reads (its prompt
    /// drawn after the previous line typed): typed earlier, the terminal would echo it.
    func type(_ line: String) async throws {
        let before = typed.load(ordering: .relaxed)
        try await waitUntil("\(name) to show its prompt; it shows \(finalLines.suffix(6))", timeout: .seconds(15)) {
            screen.withLock { $0.echoes == before && $0.promptDrawn }
        }
        typed.store(before + 1, ordering: .relaxed)
        let bytes = Array((line + "\r").utf8)
        _ = bytes.withUnsafeBytes { write(master, $0.baseAddress, $0.count) }
    }

    /// Ctrl-C: the terminal echoes `^C` and sends SIGINT.
    func interrupt() {
        screen.withLock { $0.feed(Array("^C".utf8)[...]) }
        if process.isRunning { kill(pid, SIGINT) }
    }

    /// SIGKILL, by PID.
    func forceKill() {
        if process.isRunning { kill(pid, SIGKILL) }
    }

    /// Waits for the exit and the end of the output; returns the status (128+N for signal N).
    func waitForExit(timeout: Duration = .seconds(15)) async throws -> Int32 {
        try await waitUntil("\(name) to exit", timeout: timeout) { !process.isRunning }
        try await waitUntil("\(name)'s terminal to close", timeout: .seconds(10)) { finished.load(ordering: .acquiring) }
        return process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
    }
}

/// What a terminal shows, line by line: enough of a terminal for hubd's log and `attach`'s
/// line editor (carriage return, `ESC [ K`, cursor left and right, UTF-8).
struct TerminalScreen {
    var lines: [String] = []
    var current: [Unicode.Scalar] = []
    var cursor = 0
    /// Lines ended that begin with the prompt: typed lines.
    var echoes = 0
    /// Whether the line editor has drawn an empty prompt since the last typed line ended.
    var promptDrawn = false
    private var pending: [UInt8] = []

    mutating func feed(_ bytes: ArraySlice<UInt8>) {
        pending += bytes
        var index = 0
        parsing: while index < pending.count {
            let byte = pending[index]
            switch byte {
            case 0x0D:
                cursor = 0
                index += 1
            case 0x0A:
                let line = String(String.UnicodeScalarView(current))
                lines.append(line)
                if line.hasPrefix("> ") {
                    echoes += 1
                    promptDrawn = false
                }
                current = []
                cursor = 0
                index += 1
            case 0x08:
                cursor = max(0, cursor - 1)
                index += 1
            case 0x1B:
                // ESC [ parameters final
                guard index + 1 < pending.count else { break parsing }
                guard pending[index + 1] == UInt8(ascii: "[") else { index += 2; continue }
                var end = index + 2
                while end < pending.count, !(0x40...0x7E).contains(pending[end]) { end += 1 }
                guard end < pending.count else { break parsing }
                let count = Int(String(decoding: pending[(index + 2)..<end], as: UTF8.self)) ?? 1
                switch pending[end] {
                case UInt8(ascii: "K"):
                    current.removeSubrange(min(cursor, current.count)...)
                    if String(String.UnicodeScalarView(current)) == "> " { promptDrawn = true }
                case UInt8(ascii: "D"): cursor = max(0, cursor - count)
                case UInt8(ascii: "C"): cursor += count
                default: break
                }
                index = end + 1
            case 0..<0x20, 0x7F:
                index += 1
            default:
                let length = byte < 0x80 ? 1 : byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1
                guard index + length <= pending.count else { break parsing }
                for scalar in String(decoding: pending[index..<(index + length)], as: UTF8.self).unicodeScalars {
                    while current.count < cursor { current.append(" ") }
                    if cursor < current.count { current[cursor] = scalar } else { current.append(scalar) }
                    cursor += 1
                }
                index += length
            }
        }
        pending.removeFirst(index)
    }
}

// MARK: - A shell

/// A bash that runs a page's command lines one at a time, as typed in one terminal: its
/// standard error joins its output, and each command's output is what it printed until the
/// next command. Background jobs (`… &`) are killed by PID in ``shutdown()``.
final class TranscriptShell: Sendable {
    private let owner: TranscriptRun
    private let bash: ChildProcess
    private let count = Atomic<Int>(0)
    private let pids = Locked<[Int32]>([])

    fileprivate init(run: TranscriptRun, directory: String) throws {
        owner = run
        bash = try run.fixture.spawn("/usr/bin/env", ["-i"] + run.processEnvironment.map { "\($0.key)=\($0.value)" }.sorted()
                                     + ["/bin/bash", "--norc", "--noprofile"], name: "bash")
        // A login session's soft open-files limit, which hubd raises (as the hubs in terminals do).
        bash.write("exec 2>&1; ulimit -Sn 1024 2>/dev/null; cd '\(directory)'\n")
    }

    /// The PIDs of the background jobs, in the order they were started (job 1 first).
    var backgroundPIDs: [Int32] { pids.withLock { $0 } }

    /// Runs one command line and returns `$ COMMAND` and the lines it printed, with the page's
    /// paths (bash's notices of killed jobs left out, as the page leaves them out).
    func run(_ command: String) async throws -> [String] {
        let number = count.add(1, ordering: .relaxed).newValue
        let start = bash.lines.count
        var script = owner.command(command) + "\n__status=$?; "
        if command.hasSuffix("&") { script += "printf '__PID__ %d\\n' $!; " }
        script += "printf '__DONE__ %d\\n' \(number); (exit $__status)\n"
        bash.write(script)
        let done = "__DONE__ \(number)"
        try await waitUntil("bash to run \(command); it printed \(bash.lines.suffix(6))", timeout: .seconds(15)) {
            bash.lines.dropFirst(start).contains { $0.hasSuffix(done) }
        }
        var lines: [String] = []
        for line in bash.lines.dropFirst(start) {
            if line.hasSuffix(done) {
                if line != done { lines.append(String(line.dropLast(done.count))) }
                break
            }
            if line.hasPrefix("__PID__ "), let pid = Int32(line.dropFirst("__PID__ ".count)) {
                pids.withLock { $0.append(pid) }
                continue
            }
            if transcriptReplace(#"^\S*bash: line \d+: +\d+ (Killed|Terminated)\b.*$"#, in: line, { _ in "" }).isEmpty { continue }
            lines.append(owner.output(line))
        }
        return ["$ " + command] + lines
    }

    /// Runs the block's `$ ` lines and returns the transcript.
    func play(_ block: [String]) async throws -> [String] {
        var transcript: [String] = []
        for line in block where line.hasPrefix("$ ") {
            transcript += try await run(String(line.dropFirst(2)))
        }
        return transcript
    }

    /// Kills the background jobs still running (those whose parent is this bash), then bash.
    func shutdown() {
        for pid in backgroundPIDs where transcriptParent(of: pid) == bash.pid {
            kill(pid, SIGKILL)
        }
        bash.signal(SIGKILL)
    }
}

/// The parent of `pid`, from `/proc/PID/stat`, or `nil`.
private func transcriptParent(of pid: Int32) -> Int32? {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = stat.lastIndex(of: ")") else { return nil }
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    return fields.count > 1 ? Int32(fields[1]) : nil
}
