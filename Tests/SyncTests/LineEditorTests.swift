import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import SyncPOSIX
import SyncProtocol
import Testing

/// A pseudo-terminal pair: the master end for the test, the slave end for a child's stdio.
final class PseudoTerminal {
    let master: Int32
    let slave: Int32

    init() throws {
        (master, slave) = try openPseudoTerminal()
        _ = fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK)
    }

    /// Everything read from the terminal so far.
    private(set) var output = ""

    func type(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { write(master, $0.baseAddress, $0.count) }
    }

    /// Reads until `condition` holds for the output, with a deadline.
    func wait(_ what: String, timeout: Duration = .seconds(20), until condition: (String) -> Bool) async throws {
        let deadline = ContinuousClock.now + scaled(timeout)
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !condition(output) {
            guard ContinuousClock.now < deadline else { throw HarnessError("timed out waiting for \(what); the terminal shows \(output.debugDescription)") }
            let n = read(master, &buffer, buffer.count)
            if n > 0 {
                output += String(decoding: buffer[0..<n], as: UTF8.self)
            } else {
                try await Task.sleep(for: .milliseconds(10))
            }
        }
    }

    func close() {
        _ = Glibc.close(master)
        _ = Glibc.close(slave)
    }
}

extension MultiProcessTests {
    @Suite("attach's line editor, through a pseudo-terminal")
    struct LineEditorTests {
        @Test("arrows, Backspace, history, Ctrl-A/K, Tab completion and Ctrl-D; history kept in a file")
        func editing() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let hub = try await fixture.startHub(app: "json")
            let terminal = try PseudoTerminal()
            defer { terminal.close() }
            let process = Process()
            process.executableURL = try Executables.url("replica-cli")
            process.arguments = ["--socket", fixture.socket, "attach"]
            var environment = ProcessInfo.processInfo.environment
            environment["XDG_STATE_HOME"] = fixture.directory + "/state"
            process.environment = environment
            let handle = FileHandle(fileDescriptor: terminal.slave, closeOnDealloc: false)
            process.standardInput = handle
            process.standardOutput = handle
            process.standardError = handle
            try process.run()
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            try await terminal.wait("the prompt") { $0.contains("> ") }
            func state() throws -> String {
                let client = try RawClient(path: fixture.socket)
                defer { client.close() }
                try client.send(["type": "hello", "protocol": 1, "app": "json"])
                return try client.receive()["state"]?.canonicalString ?? ""
            }
            // Typed "set /a 12", Left, Backspace (the 1 goes), Enter.
            terminal.type("set /a 12\u{1B}[D\u{7F}\r")
            try await waitUntil("set /a 2 to be applied") { try state() == #"{"a":2}"# }
            // Up brings it back; Ctrl-A, Ctrl-K clear it; a new line.
            terminal.type("\u{1B}[A")
            try await terminal.wait("the recalled line") { $0.hasSuffix("> set /a 2") || $0.contains("> set /a 2\u{1B}[K") }
            terminal.type("\u{01}\u{0B}set /c 3\r")
            try await waitUntil("set /c 3 to be applied") { try state() == #"{"a":2,"c":3}"# }
            // Tab completes :sta to :stat (common to :state and :status), then :dig to ":digest "
            // (:di is :diff or :digest).
            terminal.type(":sta\t")
            try await terminal.wait("the common prefix") { $0.hasSuffix("> :stat\u{1B}[K") }
            terminal.type("e\r")
            try await terminal.wait(":state's output") { $0.contains("\"c\": 3") || $0.contains("\"c\":3") }
            terminal.type(":dig\t\r")
            try await terminal.wait(":digest's output") { $0.contains("seq 2 digest ") }
            // Ctrl-C with a half-typed line clears it (nothing is sent), and attach goes on.
            terminal.type("set /d 4\u{03}")
            try await terminal.wait("the cleared line") { $0.contains("set /d 4\u{1B}[K^C") }
            terminal.type("set /e 5\r")
            try await waitUntil("set /e 5 to be applied, not set /d 4") { try state() == #"{"a":2,"c":3,"e":5}"# }
            // Keys go to the editor only once it reads again (its prompt is drawn): typed before,
            // while the terminal is back in cooked mode, a Ctrl-D could be lost.
            try await terminal.wait("the prompt after set /e 5") {
                $0.contains(#"{"path":"/e","type":"set","value":5}"#) && $0.hasSuffix("\r> \u{1B}[K")
            }
            // Ctrl-D on an empty line ends attach (exit 0).
            terminal.type("\u{04}")
            let deadline = ContinuousClock.now + scaled(.seconds(20))
            while process.isRunning, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
            #expect(!process.isRunning)
            // terminationStatus traps on a running process: read it only once it has ended.
            if !process.isRunning { #expect(process.terminationStatus == 0) }
            let history = try String(contentsOfFile: fixture.directory + "/state/storesync/attach-history", encoding: .utf8)
            #expect(history == "set /a 2\nset /c 3\n:state\n:digest \nset /e 5\n", "\(history.debugDescription)")
            hub.signal(SIGTERM)
            _ = try await hub.waitForExit()
        }
    }
}
