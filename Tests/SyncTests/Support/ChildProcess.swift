import Foundation
import StoreSyncTesting
import SyncLocks
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Errors the harness raises, with enough context to debug a failure.
struct HarnessError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// How much longer than usual the deadlines are: `STORESYNC_DEADLINE_SCALE` (e.g. 10 under a
/// sanitizer, which `Scripts/sanitizers` sets), else 1.
let deadlineScale: Int = {
    guard let text = ProcessInfo.processInfo.environment["STORESYNC_DEADLINE_SCALE"], let value = Int(text), value > 0
    else { return 1 }
    return value
}()

/// A deadline of `timeout`, scaled by ``deadlineScale``.
func scaled(_ timeout: Duration) -> Duration { timeout * deadlineScale }

/// Waits for `condition` to hold, checking every few milliseconds, until `timeout` (scaled).
func waitUntil(
    _ what: @autoclosure () -> String,
    timeout: Duration = .seconds(30),
    _ condition: () throws -> Bool
) async throws {
    let timeout = scaled(timeout)
    let deadline = ContinuousClock.now + timeout
    while try !condition() {
        guard ContinuousClock.now < deadline else { throw HarnessError("timed out after \(timeout) waiting for \(what())") }
        try await Task.sleep(for: .milliseconds(5))
    }
}

/// Runs `body`, failing with a clear error instead of hanging if it does not finish in
/// `timeout` (scaled): for `for await` loops over streams that might never yield.
func withDeadline<T: Sendable>(
    _ what: String,
    timeout: Duration = .seconds(30),
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let timeout = scaled(timeout)
    return try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: timeout)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else {
            throw HarnessError("timed out after \(timeout) waiting for \(what)")
        }
        return value
    }
}

/// The built executables (`hubd`, `replica-cli`), found next to the test bundle.
enum Executables {
    static func url(_ name: String) throws -> URL { try builtExecutable(name) }
}

/// A child process with captured output lines, killed by PID when the test ends.
final class ChildProcess: Sendable {
    let name: String
    let pid: Int32
    private let process: Process
    private let stdinHandle: FileHandle
    private let output = Lines()
    private let errors = Lines()

    init(_ executable: String, _ arguments: [String], name: String? = nil, environment: [String: String] = [:]) throws {
        let process = Process()
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        // A bare name is one of the package's executables; an absolute path is used as is.
        process.executableURL = executable.hasPrefix("/") ? URL(fileURLWithPath: executable) : try Executables.url(executable)
        process.arguments = arguments
        let stdinPipe = Pipe(), stdoutPipe = Pipe(), stderrPipe = Pipe()
        process.standardInput = stdinPipe
        process.standardOutput = stdoutPipe
        process.standardError = stderrPipe
        try process.run()
        self.name = name ?? "\(executable) \(arguments.joined(separator: " "))"
        self.process = process
        self.pid = process.processIdentifier
        self.stdinHandle = stdinPipe.fileHandleForWriting
        Self.collect(stdoutPipe.fileHandleForReading, into: output, name: "stdout")
        Self.collect(stderrPipe.fileHandleForReading, into: errors, name: "stderr")
    }

    /// Reads lines on a thread of its own until end of file.
    private static func collect(_ handle: FileHandle, into sink: Lines, name: String) {
        let thread = Thread {
            var pending = Data()
            while true {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                pending.append(chunk)
                while let newline = pending.firstIndex(of: 0x0A) {
                    let line = String(decoding: pending[pending.startIndex..<newline], as: UTF8.self)
                    pending.removeSubrange(pending.startIndex...newline)
                    sink.append(line)
                }
            }
            if !pending.isEmpty { sink.append(String(decoding: pending, as: UTF8.self)) }
            sink.finished.store(true, ordering: .releasing)
        }
        thread.start()
    }

    var lines: [String] { output.withLock { $0 } }
    var errorLines: [String] { errors.withLock { $0 } }
    var isRunning: Bool { process.isRunning }

    func write(_ text: String) {
        try? stdinHandle.write(contentsOf: Data(text.utf8))
    }

    func closeInput() {
        try? stdinHandle.close()
    }

    func signal(_ number: Int32) {
        if process.isRunning { kill(pid, number) }
    }

    /// Waits for the process to exit and returns its status (128+N for a signal N).
    @discardableResult
    func waitForExit(timeout: Duration = .seconds(30)) async throws -> Int32 {
        try await waitUntil("\(name) to exit", timeout: timeout) { !process.isRunning }
        // The reader threads may still be draining the pipes right after the exit.
        try await waitUntil("\(name)'s output to end", timeout: .seconds(10)) {
            output.finished.load(ordering: .acquiring) && errors.finished.load(ordering: .acquiring)
        }
        return process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
    }

    /// Waits for an output line that satisfies `match` and returns it.
    @discardableResult
    func waitForLine(timeout: Duration = .seconds(30), _ what: String = "a line",
                     where match: (String) -> Bool) async throws -> String {
        var found: String?
        try await waitUntil("\(name) to print \(what); stdout: \(lines.suffix(5)), stderr: \(errorLines.suffix(5))",
                            timeout: timeout) {
            found = output.withLock { $0.first(where: match) }
            return found != nil
        }
        return found ?? ""
    }

    /// Waits until stdout holds at least `count` lines.
    func waitForLineCount(_ count: Int, timeout: Duration = .seconds(60)) async throws {
        try await waitUntil("\(name) to print \(count) lines (has \(lines.count)); stderr: \(errorLines.suffix(5))",
                            timeout: timeout) { output.withLock { $0.count } >= count }
    }
}

/// Lines captured from one output stream, shared with the thread that reads them.
final class Lines: Sendable {
    private let storage = Locked<[String]>([])
    /// Set when the stream reached end of file and every line is in.
    let finished = Atomic<Bool>(false)
    func append(_ line: String) { storage.withLock { $0.append(line) } }
    func withLock<T>(_ body: (inout [String]) -> T) -> T { storage.withLock { body(&$0) } }
}
