#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import SyncLocks
import Synchronization
#if os(Linux)
import CSyncPOSIX
#endif

/// A small line editor for an interactive terminal (`replica-cli attach`), with no dependency:
/// left/right, Home/End, Ctrl-A/E/B/F, Backspace, Delete, Ctrl-K/U/W, history with Up/Down
/// (kept in a file), and Tab completion of the first word. Lines printed meanwhile
/// (``Console``) appear above the line being typed, which is drawn again below them.
///
/// It works on a terminal only: ``start(prompt:historyPath:completions:)`` returns `nil` when
/// standard input or output is not one, and the caller reads plain lines instead. The terminal
/// leaves canonical mode, echo and signals while a line is read: Ctrl-C clears a half-typed
/// line and, on an empty line, ends input like Ctrl-D (as bash and python do); the terminal is
/// restored at ``close()`` and at process exit, and signals work again between lines. Each Unicode scalar counts as
/// one column.
public final class LineEditor: Sendable {
    private struct State {
        var line: [Unicode.Scalar] = []
        var cursor = 0
        var history: [String] = []
        /// Where Up/Down are in `history` (`history.count`: the line being typed).
        var position = 0
        /// The line being typed, kept while Up/Down show history.
        var draft: [Unicode.Scalar] = []
        /// Whether a line is being read (the prompt is on the screen).
        var reading = false
    }

    private let prompt: [Unicode.Scalar]
    private let historyPath: String?
    private let completions: [String]
    private let state = Locked(State())
    /// The most lines the history file keeps.
    public static let historyLimit = 1_000

    private init(prompt: String, historyPath: String?, completions: [String]) {
        self.prompt = Array(prompt.unicodeScalars)
        self.historyPath = historyPath
        self.completions = completions.sorted()
        if let historyPath, let text = try? FileSystem.read(historyPath) {
            let lines = String(decoding: text, as: UTF8.self).split(separator: "\n").map(String.init)
            state.withLock {
                $0.history = Array(lines.suffix(Self.historyLimit))
                $0.position = $0.history.count
            }
            // Lines are appended one by one; the file is cut back to the last `historyLimit`
            // once it holds twice that, so it never grows without bound.
            if lines.count > 2 * Self.historyLimit {
                let fd = open(historyPath, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC)
                if fd >= 0 {
                    let bytes = Array((lines.suffix(Self.historyLimit).joined(separator: "\n") + "\n").utf8)
                    _ = bytes.withUnsafeBytes { systemWrite(fd, $0.baseAddress, $0.count) }
                    _ = systemClose(fd)
                }
            }
        }
    }

    /// An editor on this process's terminal, or `nil` when standard input or output is not a
    /// terminal (read plain lines then).
    ///
    /// - Parameters:
    ///   - prompt: Shown before the line.
    ///   - historyPath: Where the history is kept (created with mode 0600), or `nil` for none.
    ///   - completions: The words Tab completes at the start of a line.
    /// - Returns: The editor, which now routes ``Console`` output above the line.
    public static func start(prompt: String, historyPath: String?, completions: [String]) -> LineEditor? {
        guard isatty(STDIN_FILENO) == 1, isatty(STDOUT_FILENO) == 1 else { return nil }
        var original = termios()
        guard tcgetattr(STDIN_FILENO, &original) == 0 else { return nil }
        savedTerminal.withLock { saved in
            if saved == nil {
                saved = original
                atexit { restoreTerminal() }
            }
        }
        let editor = LineEditor(prompt: prompt, historyPath: historyPath, completions: completions)
        Console.setInterposer { text in editor.printAbove(text) }
        return editor
    }

    /// The default history file: `$XDG_STATE_HOME/storesync/NAME`, else
    /// `~/.local/state/storesync/NAME`; its directory is created (mode 0700) when missing.
    ///
    /// - Parameter name: The file's name, e.g. `attach-history`.
    /// - Returns: The path, or `nil` when there is no home directory to put it in.
    public static func defaultHistoryPath(name: String) -> String? {
        let base: String
        if let state = getenv("XDG_STATE_HOME").map({ String(cString: $0) }), state.hasPrefix("/") {
            base = state
        } else if let home = getenv("HOME").map({ String(cString: $0) }), home.hasPrefix("/") {
            base = home + "/.local/state"
        } else {
            return nil
        }
        var path = ""
        for component in (base + "/storesync").split(separator: "/") {
            path += "/" + component
            _ = mkdir(path, 0o700)
        }
        return path + "/" + name
    }

    /// Reads one line, editing it in place; `nil` at end of input (Ctrl-D on an empty line).
    ///
    /// - Returns: The line, without its newline.
    public func readLine() -> String? {
        guard var raw = savedTerminal.withLock({ $0 }) else { return nil }
        // ISIG off too: Ctrl-C is read as a key (it clears the line, as in bash and python),
        // not a SIGINT that would end the program with the line half typed.
        raw.c_lflag &= ~tcflag_t(ICANON | ECHO | IEXTEN | ISIG)
        withUnsafeMutablePointer(to: &raw.c_cc) { pointer in
            pointer.withMemoryRebound(to: cc_t.self, capacity: Int(NCCS)) { cc in
                cc[Int(VMIN)] = 1
                cc[Int(VTIME)] = 0
            }
        }
        _ = tcsetattr(STDIN_FILENO, TCSANOW, &raw)
        defer { restoreTerminal() }
        state.withLock { state in
            state.line = []
            state.cursor = 0
            state.position = state.history.count
            state.reading = true
            redraw(state)
        }
        while true {
            guard let byte = readByte() else { return finish(nil) }
            switch byte {
            case 0x0D, 0x0A:  // Enter
                let line = state.withLock { String(String.UnicodeScalarView($0.line)) }
                return finish(line)
            case 0x03:  // Ctrl-C: clear the line; on an empty line, end of input
                if state.withLock({ $0.line.isEmpty }) {
                    write(Array("^C".utf8))
                    return finish(nil)
                }
                write(Array("^C\r\n".utf8))
                edit { state in
                    state.line = []
                    state.cursor = 0
                    state.position = state.history.count
                }
            case 0x1C:  // Ctrl-\: quit as the terminal would (SIGQUIT is off while reading)
                write(Array("\r\n".utf8))
                restoreTerminal()
                _ = raise(SIGQUIT)
            case 0x04:  // Ctrl-D: end of input on an empty line, else delete
                if state.withLock({ $0.line.isEmpty }) { return finish(nil) }
                edit { state in if state.cursor < state.line.count { state.line.remove(at: state.cursor) } }
            case 0x01: edit { $0.cursor = 0 }                                     // Ctrl-A
            case 0x05: edit { $0.cursor = $0.line.count }                        // Ctrl-E
            case 0x02: edit { $0.cursor = max(0, $0.cursor - 1) }                // Ctrl-B
            case 0x06: edit { $0.cursor = min($0.line.count, $0.cursor + 1) }    // Ctrl-F
            case 0x0B: edit { $0.line.removeSubrange($0.cursor...) }             // Ctrl-K
            case 0x15: edit { state in                                           // Ctrl-U
                state.line.removeSubrange(..<state.cursor)
                state.cursor = 0
            }
            case 0x17: edit { state in                                           // Ctrl-W
                var start = state.cursor
                while start > 0, state.line[start - 1] == " " { start -= 1 }
                while start > 0, state.line[start - 1] != " " { start -= 1 }
                state.line.removeSubrange(start..<state.cursor)
                state.cursor = start
            }
            case 0x7F, 0x08: edit { state in                                     // Backspace
                guard state.cursor > 0 else { return }
                state.cursor -= 1
                state.line.remove(at: state.cursor)
            }
            case 0x09: complete()                                                // Tab
            case 0x0C: edit { _ in write(Array("\u{1B}[H\u{1B}[2J".utf8)) }      // Ctrl-L
            case 0x1B: escape()
            default:
                guard byte >= 0x20 else { continue }
                // Gather a whole UTF-8 sequence (its length from the lead byte) before inserting it.
                var bytes = [byte]
                let length = byte < 0x80 ? 1 : byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1
                while bytes.count < length, let next = readByte() { bytes.append(next) }
                let decoded = String(decoding: bytes, as: UTF8.self).unicodeScalars
                for scalar in decoded {
                    edit { state in
                        state.line.insert(scalar, at: state.cursor)
                        state.cursor += 1
                    }
                }
            }
        }
    }

    /// Restores the terminal and stops routing ``Console`` output (idempotent).
    public func close() {
        Console.setInterposer(nil)
        restoreTerminal()
    }

    // MARK: - Keys

    private func escape() {
        guard let first = readByte() else { return }
        guard first == UInt8(ascii: "[") || first == UInt8(ascii: "O") else { return }
        var parameters: [UInt8] = []
        var final: UInt8 = 0
        while let byte = readByte() {
            if byte >= 0x40, byte <= 0x7E { final = byte; break }
            parameters.append(byte)
            if parameters.count > 8 { return }
        }
        switch (final, parameters) {
        case (UInt8(ascii: "D"), _): edit { $0.cursor = max(0, $0.cursor - 1) }
        case (UInt8(ascii: "C"), _): edit { $0.cursor = min($0.line.count, $0.cursor + 1) }
        case (UInt8(ascii: "H"), _), (UInt8(ascii: "~"), [UInt8(ascii: "1")]), (UInt8(ascii: "~"), [UInt8(ascii: "7")]):
            edit { $0.cursor = 0 }
        case (UInt8(ascii: "F"), _), (UInt8(ascii: "~"), [UInt8(ascii: "4")]), (UInt8(ascii: "~"), [UInt8(ascii: "8")]):
            edit { $0.cursor = $0.line.count }
        case (UInt8(ascii: "~"), [UInt8(ascii: "3")]):
            edit { state in if state.cursor < state.line.count { state.line.remove(at: state.cursor) } }
        case (UInt8(ascii: "A"), _): edit { state in browse(&state, by: -1) }
        case (UInt8(ascii: "B"), _): edit { state in browse(&state, by: 1) }
        default: break
        }
    }

    private func browse(_ state: inout State, by step: Int) {
        let target = state.position + step
        guard target >= 0, target <= state.history.count else { return }
        if state.position == state.history.count { state.draft = state.line }
        state.position = target
        state.line = target == state.history.count ? state.draft : Array(state.history[target].unicodeScalars)
        state.cursor = state.line.count
    }

    /// Completes the first word from ``completions``: the whole word when one matches, else
    /// their common prefix, and lists them when that adds nothing.
    private func complete() {
        edit { state in
            let before = state.line[..<state.cursor]
            guard !before.contains(" ") else { return }
            let word = String(String.UnicodeScalarView(before))
            let matches = completions.filter { $0.hasPrefix(word) }
            guard let first = matches.first else { return }
            if matches.count == 1 {
                let rest = Array(first.unicodeScalars.dropFirst(before.count)) + [" "]
                state.line.insert(contentsOf: rest, at: state.cursor)
                state.cursor += rest.count
                return
            }
            var common = Array(first.unicodeScalars)
            for match in matches.dropFirst() {
                let scalars = Array(match.unicodeScalars)
                var length = 0
                while length < common.count, length < scalars.count, common[length] == scalars[length] { length += 1 }
                common = Array(common.prefix(length))
            }
            if common.count > before.count {
                let rest = Array(common.dropFirst(before.count))
                state.line.insert(contentsOf: rest, at: state.cursor)
                state.cursor += rest.count
            } else {
                write(Array(("\r\u{1B}[K" + matches.joined(separator: "  ") + "\r\n").utf8))
            }
        }
    }

    // MARK: - Drawing

    /// Applies a change to the line and draws it again, under the lock.
    private func edit(_ change: (inout State) -> Void) {
        state.withLock { state in
            change(&state)
            redraw(state)
        }
    }

    private func redraw(_ state: State) {
        var text = "\r" + String(String.UnicodeScalarView(prompt)) + String(String.UnicodeScalarView(state.line)) + "\u{1B}[K"
        let back = state.line.count - state.cursor
        if back > 0 { text += "\u{1B}[\(back)D" }
        write(Array(text.utf8))
    }

    /// Prints a line above the one being typed, then draws that one again.
    private func printAbove(_ text: String) {
        state.withLock { state in
            guard state.reading else {
                write(Array((text + "\r\n").utf8))
                return
            }
            write(Array(("\r\u{1B}[K" + text.replacingNewlines + "\r\n").utf8))
            redraw(state)
        }
    }

    private func finish(_ line: String?) -> String? {
        state.withLock { state in
            state.reading = false
            write(Array("\r\n".utf8))
            if let line, !line.trimmingSpacesAndTabs.isEmpty, state.history.last != line {
                state.history.append(line)
                if state.history.count > Self.historyLimit { state.history.removeFirst(state.history.count - Self.historyLimit) }
                if let historyPath { Self.append(line, to: historyPath) }
            }
            state.position = state.history.count
        }
        return line
    }

    private static func append(_ line: String, to path: String) {
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        defer { _ = systemClose(fd) }
        let bytes = Array((line + "\n").utf8)
        _ = bytes.withUnsafeBytes { systemWrite(fd, $0.baseAddress, $0.count) }
    }

    private func readByte() -> UInt8? {
        var byte: UInt8 = 0
        while true {
            let n = systemRead(STDIN_FILENO, &byte, 1)
            if n == 1 { return byte }
            if n < 0, currentErrno() == EINTR { continue }
            return nil
        }
    }

    private func write(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { systemWrite(STDOUT_FILENO, $0.baseAddress.map { $0 + offset }, $0.count - offset) }
            if n > 0 { offset += n } else if n < 0, currentErrno() == EINTR { continue } else { return }
        }
    }
}

/// The terminal's settings before the first editor changed them (restored at exit).
private let savedTerminal = Locked<termios?>(nil)

private func restoreTerminal() {
    savedTerminal.withLock { saved in
        guard var settings = saved else { return }
        _ = tcsetattr(STDIN_FILENO, TCSANOW, &settings)
    }
}

@inline(__always) private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int {
    read(fd, buffer, count)
}

@inline(__always) private func systemWrite(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ count: Int) -> Int {
    write(fd, buffer, count)
}

@inline(__always) private func systemClose(_ fd: Int32) -> Int32 {
    close(fd)
}

extension String {
    fileprivate var replacingNewlines: String {
        split(separator: "\n", omittingEmptySubsequences: false).joined(separator: "\r\n")
    }

    fileprivate var trimmingSpacesAndTabs: Substring {
        let scalars = unicodeScalars
        guard let start = scalars.firstIndex(where: { $0 != " " && $0 != "\t" }),
              let end = scalars.lastIndex(where: { $0 != " " && $0 != "\t" }) else { return "" }
        return Substring(scalars[start...end])
    }
}

#if os(Linux)
/// Opens a pseudo-terminal pair, for tests that drive the line editor as a person would.
///
/// - Returns: The master end (the test's) and the slave end (a child's stdio).
/// - Throws: ``SystemError`` when the system has no pseudo-terminals to give.
package func openPseudoTerminal() throws(SystemError) -> (master: Int32, slave: Int32) {
    var master: Int32 = -1
    var slave: Int32 = -1
    guard csyncposix_open_pseudo_terminal(&master, &slave) == 0 else {
        throw SystemError.lastCall("opening a pseudo-terminal")
    }
    return (master, slave)
}
#endif
