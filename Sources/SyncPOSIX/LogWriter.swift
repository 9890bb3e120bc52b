#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import Synchronization

/// Log lines written to a descriptor (stderr) by a thread of their own, so that the thread
/// that logs never waits for whoever reads them.
///
/// ``write(_:)`` only appends to a bounded queue. When the reader falls so far behind that
/// the queue is full (4,096 lines or 1 MiB), further lines are dropped and counted, and the
/// count is written as one line (`N log lines dropped …`) once the queue has room again.
public final class LogWriter: Sendable {
    private struct State {
        var lines: [String] = []
        var bytes = 0
        var dropped = 0
        var writerStarted = false
    }

    private let fd: Int32
    private let prefix: String
    private let state = Mutex(State())
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

    /// Queues one line (a newline is added); never blocks on the descriptor.
    ///
    /// - Parameter line: The line.
    public func write(_ line: String) {
        let start = state.withLock { state -> Bool in
            guard state.lines.count < Self.maxLines, state.bytes + line.utf8.count < Self.maxBytes else {
                state.dropped += 1
                return false
            }
            state.lines.append(line)
            state.bytes += line.utf8.count + 1
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
                    defer {
                        state.lines.removeAll(keepingCapacity: true)
                        state.bytes = 0
                        state.dropped = 0
                    }
                    return (state.lines, state.dropped)
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
