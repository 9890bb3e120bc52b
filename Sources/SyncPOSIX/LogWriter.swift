#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import SyncLocks
import Synchronization
import SyncProtocol

/// Log lines written to a descriptor (stderr) without ever making the thread that logs wait
/// for whoever reads them.
///
/// ``write(_:)`` writes a line itself when nothing is queued and the descriptor has room for
/// it (so lines appear at once and in order); otherwise it appends to a bounded queue that a
/// thread of its own drains. When the reader falls so far behind that the queue is full
/// (4,096 lines or 1 MiB), further lines are dropped and counted, and the count is written as
/// one line (`N log lines dropped …`) once the queue has room again.
public final class LogWriter: Sendable {
    private struct State {
        var lines: [String] = []
        var bytes = 0
        var dropped = 0
        var writerStarted = false
        /// A caller is writing a line directly; the writer thread waits for it.
        var busy = false
    }

    private let fd: Int32
    private let prefix: String
    private let state = Locked(State())
    private let wake = DispatchSemaphore(value: 0)
    private let idle = DispatchSemaphore(value: 0)
    /// The most lines queued.
    public static let maxLines = 4_096
    /// The most bytes queued.
    public static let maxBytes = 1 << 20

    /// Creates a writer.
    ///
    /// - Parameters:
    ///   - fd: The descriptor (default 2, stderr).
    ///   - prefix: Put before the dropped-lines notice, e.g. `"hubd: "`.
    public init(fd: Int32 = 2, prefix: String = "") {
        self.fd = fd
        self.prefix = prefix
    }

    /// Writes one line (a newline is added) at once when the descriptor can take it without
    /// waiting, else queues it for the writer thread; never blocks on the descriptor.
    ///
    /// - Parameter line: The line.
    public func write(_ line: String) {
        // One line, whatever it holds: no newline or control sequence from text another
        // process chose reaches the log or the terminal behind it.
        var bytes = Array(ControlCharacters.terminalSafe(URLCredentials.redacted(in: line), keepingNewlines: false).utf8)
        bytes.append(UInt8(ascii: "\n"))
        // The common case: nothing queued, and room in the pipe for one atomic write
        // (`PIPE_BUF`): written here, in order with what came before.
        let direct = bytes.count <= 4096 && state.withLock { state -> Bool in
            guard state.lines.isEmpty, !state.busy else { return false }
            state.busy = true
            return true
        }
        if direct {
            var entry = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            let writable = poll(&entry, 1, 0) == 1 && entry.revents & Int16(POLLOUT) != 0
            if writable { writeAll(bytes) }
            let wakeWriter = state.withLock { state -> Bool in
                state.busy = false
                if !writable { enqueue(line, into: &state) }
                return !state.lines.isEmpty || state.dropped > 0
            }
            if wakeWriter { startAndWake() }
            return
        }
        state.withLock { enqueue(line, into: &$0) }
        startAndWake()
    }

    private func enqueue(_ line: String, into state: inout State) {
        guard state.lines.count < Self.maxLines, state.bytes + line.utf8.count < Self.maxBytes else {
            state.dropped += 1
            return
        }
        state.lines.append(line)
        state.bytes += line.utf8.count + 1
    }

    private func startAndWake() {
        let start = state.withLock { state -> Bool in
            defer { state.writerStarted = true }
            return !state.writerStarted
        }
        if start {
            let thread = Thread { [self] in run() }
            thread.name = "StoreSync log writer"
            thread.start()
        }
        wake.signal()
    }

    /// Waits (at most `timeout`) until every queued line is written: for a clean exit.
    ///
    /// - Parameter timeout: The longest wait.
    public func flush(timeout: Duration = .seconds(2)) {
        let deadline = ContinuousClock.now + timeout
        while state.withLock({ !$0.lines.isEmpty && $0.writerStarted }), ContinuousClock.now < deadline {
            wake.signal()
            _ = idle.wait(timeout: .now() + .milliseconds(20))
        }
    }

    private func run() {
        while true {
            wake.wait()
            while true {
                let (lines, dropped) = state.withLock { state -> ([String], Int) in
                    if state.busy { return ([], -1) }
                    defer {
                        state.lines.removeAll(keepingCapacity: true)
                        state.bytes = 0
                        state.dropped = 0
                    }
                    return (state.lines, state.dropped)
                }
                if dropped < 0 {
                    // A direct write is under way; it wakes this thread again if lines remain.
                    break
                }
                if lines.isEmpty && dropped == 0 {
                    idle.signal()
                    break
                }
                var text = lines.joined(separator: "\n")
                if !lines.isEmpty { text += "\n" }
                if dropped > 0 {
                    text += "\(prefix)\(dropped) log lines dropped (stderr was not read fast enough)\n"
                }
                writeAll(Array(text.utf8))
            }
        }
    }

    private func writeAll(_ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { raw in
                Glibc_write(fd, raw.baseAddress.map { $0 + offset }, raw.count - offset)
            }
            if n > 0 {
                offset += n
            } else if n < 0 && currentErrno() == EINTR {
                continue
            } else if n < 0 && (currentErrno() == EAGAIN || currentErrno() == EWOULDBLOCK) {
                var entry = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                _ = poll(&entry, 1, 1000)
            } else {
                return
            }
        }
    }
}

@inline(__always) private func Glibc_write(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ count: Int) -> Int { write(fd, buffer, count) }
