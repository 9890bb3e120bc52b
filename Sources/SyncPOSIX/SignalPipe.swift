#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// The write end of the signal pipe, for the async-signal-safe handler (-1 when none).
private let signalWriteEnd = Atomic<Int32>(-1)

/// Turns SIGINT, SIGTERM and SIGHUP into a readable byte on a pipe, so an event loop can poll for them.
///
/// The handler does only what is async-signal-safe: an atomic load and one `write`.
public enum SignalPipe {
    /// Installs handlers for SIGINT, SIGTERM and SIGHUP (a closed terminal, or a service
    /// manager's reload request: both mean a clean stop here) and returns the pipe's read end.
    ///
    /// - Returns: A non-blocking descriptor that becomes readable when a signal arrives;
    ///   each byte read is a signal number.
    /// - Throws: ``SystemError`` when the pipe cannot be created.
    public static func install() throws(SystemError) -> Int32 {
        let ends = try UnixSocket.makePipe()
        signalWriteEnd.store(ends.write, ordering: .sequentiallyConsistent)
        let handler: @convention(c) (Int32) -> Void = { signal in
            // Async-signal-safe only: an atomic load and one write. `errno` is saved and
            // restored, because the interrupted code may be about to read it.
            let saved = errno
            let fd = signalWriteEnd.load(ordering: .relaxed)
            if fd >= 0 {
                var byte = UInt8(truncatingIfNeeded: signal)
                _ = write(fd, &byte, 1)
            }
            errno = saved
        }
        var action = sigaction()
        #if canImport(Darwin)
        action.__sigaction_u.__sa_handler = handler
        #else
        action.__sigaction_handler.sa_handler = handler
        #endif
        sigemptyset(&action.sa_mask)
        // SA_RESTART: a system call the signal interrupts is restarted rather than failing with EINTR.
        action.sa_flags = SA_RESTART
        for number in [SIGINT, SIGTERM, SIGHUP] {
            guard sigaction(number, &action, nil) == 0 else {
                throw SystemError.lastCall("cannot install the handler for signal \(number)")
            }
        }
        unblockTerminationSignals()
        return ends.read
    }

    /// Unblocks SIGINT, SIGTERM and SIGHUP on the calling thread (and threads it starts later).
    ///
    /// A process inherits its parent's signal mask; a supervisor or test runner that had
    /// them blocked would otherwise leave the process deaf to them.
    public static func unblockTerminationSignals() {
        var unblock = sigset_t()
        sigemptyset(&unblock)
        sigaddset(&unblock, SIGINT)
        sigaddset(&unblock, SIGTERM)
        sigaddset(&unblock, SIGHUP)
        pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
    }

    /// Reads the pending signal numbers from the pipe.
    ///
    /// - Parameter fd: The read end from ``install()``.
    /// - Returns: The signals received since the last call, oldest first.
    public static func drain(_ fd: Int32) -> [Int32] {
        var signals: [Int32] = []
        var buffer = [UInt8](repeating: 0, count: 16)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { break }
            signals.append(contentsOf: buffer[0..<n].map { Int32($0) })
        }
        return signals
    }
}
