#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import SyncLocks
import Synchronization
import SyncProtocol

/// Unbuffered line output to standard output and standard error.
///
/// Each call is one `write(2)` of the whole line, so lines from several threads never
/// interleave, and a reader at the other end of a pipe sees every line as soon as it is
/// printed (no stdio buffering to flush).
public enum Console {
    /// Writes `line` and a newline to standard output.
    ///
    /// - Parameter line: The text.
    public static func out(_ line: String) { writeLine(1, line) }

    /// Writes `line` and a newline to standard error, with the credentials of any URL in it
    /// replaced by `***` (``URLCredentials/redacted(in:)``): messages and logs never hold a
    /// password, whatever was given where.
    ///
    /// - Parameter line: The text.
    public static func error(_ line: String) { writeLine(2, URLCredentials.redacted(in: line)) }

    /// Where lines go instead while a ``LineEditor`` reads a line (drawn above it).
    private static let interposer = Locked<(@Sendable (String) -> Void)?>(nil)

    /// Routes every line of ``out(_:)`` and ``error(_:)`` through `body` (a ``LineEditor``
    /// prints them above the line being typed), or back to the descriptors with `nil`.
    ///
    /// - Parameter body: Prints one line.
    public static func setInterposer(_ body: (@Sendable (String) -> Void)?) {
        interposer.withLock { $0 = body }
        interposing.store(body != nil, ordering: .releasing)
    }

    /// Whether an interposer is set: lines printed without one (`watch`, pipes) take no lock.
    private static let interposing = Atomic<Bool>(false)

    /// Writes a control sequence of the program's own (clearing the screen, moving the
    /// cursor) to standard output as it is, without a newline: the one way around the
    /// escaping of ``out(_:)``, never for text from another process.
    ///
    /// - Parameter sequence: The sequence.
    public static func control(_ sequence: StaticString) {
        var offset = 0
        let count = sequence.utf8CodeUnitCount
        while offset < count {
            let n = write(1, sequence.utf8Start + offset, count - offset)
            guard n > 0 else { return }
            offset += n
        }
    }

    private static func writeLine(_ fd: Int32, _ raw: String) {
        // Whatever built the line, nothing in it drives the terminal (docs/OPERATIONS.md §11).
        let line = ControlCharacters.terminalSafe(raw, keepingNewlines: true)
        // Called outside the lock: it writes to the terminal and takes the editor's own lock.
        if interposing.load(ordering: .acquiring), let body = interposer.withLock({ $0 }) {
            body(line)
            return
        }
        var bytes = Array(line.utf8)
        bytes.append(UInt8(ascii: "\n"))
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                write(fd, raw.baseAddress.map { $0 + offset }, raw.count - offset)
            }
            if n > 0 {
                offset += n
            } else if n < 0 && currentErrno() == EINTR {
                continue
            } else {
                return
            }
        }
    }
}

/// A cursor over command-line arguments, for the executables' small hand-written parsers.
public struct ArgumentCursor: Sendable {
    private var remaining: ArraySlice<String>

    /// Starts after the program name.
    ///
    /// - Parameter arguments: `CommandLine.arguments`.
    public init(_ arguments: [String]) { remaining = arguments.dropFirst() }

    /// The next argument, consumed; `nil` at the end.
    ///
    /// - Returns: The argument.
    public mutating func next() -> String? { remaining.popFirst() }

    /// The next argument without consuming it.
    public var peek: String? { remaining.first }

    /// Every remaining argument, consumed.
    ///
    /// - Returns: The arguments.
    public mutating func rest() -> [String] {
        defer { remaining = [] }
        return Array(remaining)
    }
}
