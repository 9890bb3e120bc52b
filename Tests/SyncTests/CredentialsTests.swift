import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import StoreHub
import SyncPOSIX
import Testing

/// The NATS password: where a hub reads it from, and that no message, log line or
/// command line it writes ever holds it.
@Suite("NATS credentials")
struct CredentialsTests {
    static let secret = "hub-secret-pw"

    @Test("a credentials file: user and password, or a token; comments and blank lines skipped")
    func parseFile() throws {
        let both = try SharedLogCredentials.parse(Array("# hubs\nuser=storesync\r\npassword=\(Self.secret)\n\n".utf8), source: "f").get()
        #expect(both.user == "storesync" && both.password == Self.secret && both.token == nil)
        let token = try SharedLogCredentials.parse(Array("token=abc=def\n".utf8), source: "f").get()
        #expect(token.token == "abc=def" && token.user == nil)
    }

    @Test("a bad credentials file says what is wrong without quoting a value", arguments: [
        "password=\(secret)\n", "user=u\n", "user=u\npassword=\(secret)\ntoken=t\n", "\(secret)\n",
        "pass=\(secret)\n", "", "token=\n",
    ])
    func badFiles(text: String) {
        guard case .failure(let error) = SharedLogCredentials.parse(Array(text.utf8), source: "the file F") else {
            Issue.record("accepted \(text.debugDescription)")
            return
        }
        #expect(!error.message.contains(Self.secret), "\(error.message)")
        #expect(error.message.contains("the file F"))
    }

    @Test("URLs are shown without their credentials, parsed or not", arguments: [
        "nats://storesync:\(secret)@127.0.0.1:14223", "nats://storesync:\(secret)@127.0.0.1:14223:/x",
        "tls://storesync:\(secret)@127.0.0.1:4222/x", "nats://\(secret)@h:1/bad name", "storesync:\(secret)@h",
        "nats://u:\(secret)@,/s",
    ])
    func redacted(url: String) {
        #expect(!SharedLogConfiguration.redact(url).contains(Self.secret))
        if case .failure(let error) = SharedLogConfiguration.parse(url) {
            #expect(!error.message.contains(Self.secret), "\(error.message)")
        }
    }

    @Test("sources: the file, then $CREDENTIALS_DIRECTORY, then the environment; never two with the URL")
    func resolveOrder() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/creds"
        try write("user=fromfile\npassword=\(Self.secret)\n", to: file, mode: 0o600)
        try FileManager.default.createDirectory(atPath: directory + "/systemd", withIntermediateDirectories: false)
        try write("token=fromsystemd\n", to: directory + "/systemd/nats-credentials", mode: 0o400)
        let environment = ["CREDENTIALS_DIRECTORY": directory + "/systemd", "STORESYNC_NATS_TOKEN": "fromenv"]

        var configuration = try SharedLogConfiguration.parse("nats://127.0.0.1:4222/s").get()
        #expect(try SharedLogCredentials.resolve(into: &configuration, file: file, environment: environment).get()?.contains(file) == true)
        #expect(configuration.user == "fromfile")

        configuration = try SharedLogConfiguration.parse("nats://127.0.0.1:4222/s").get()
        _ = try SharedLogCredentials.resolve(into: &configuration, file: nil, environment: environment).get()
        #expect(configuration.token == "fromsystemd")

        configuration = try SharedLogConfiguration.parse("nats://127.0.0.1:4222/s").get()
        _ = try SharedLogCredentials.resolve(into: &configuration, file: nil, environment: ["STORESYNC_NATS_TOKEN": "fromenv"]).get()
        #expect(configuration.token == "fromenv")

        configuration = try SharedLogConfiguration.parse("nats://u:p@127.0.0.1:4222/s").get()
        guard case .failure = SharedLogCredentials.resolve(into: &configuration, file: file, environment: [:]) else {
            Issue.record("a file and URL credentials were both taken")
            return
        }
    }

    @Test("a credentials file other users can read is refused, saying how to fix it")
    func openFileRefused() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/creds"
        try write("user=u\npassword=\(Self.secret)\n", to: file, mode: 0o644)
        var configuration = try SharedLogConfiguration.parse("nats://127.0.0.1:4222/s").get()
        guard case .failure(let error) = SharedLogCredentials.resolve(into: &configuration, file: file, environment: [:]) else {
            Issue.record("a world-readable credentials file was accepted")
            return
        }
        #expect(error.message.contains("other users can read or change it (mode 0644); chmod 600 it"))
    }

    @Test("holding a secret, the process leaves no core dump")
    func notDumpable() {
        SecretFile.keepOutOfCoreDumps()
        #expect(!SecretFile.isDumpable)
    }

    private func temporaryDirectory() throws -> String {
        var template = Array("/tmp/sscred-XXXXXX".utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ $0.baseAddress.flatMap { mkdtemp($0) } }) else {
            throw HarnessError("mkdtemp failed")
        }
        return String(cString: made)
    }

    private func write(_ text: String, to path: String, mode: mode_t) throws {
        guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8)) else { throw HarnessError("cannot write \(path)") }
        chmod(path, mode)
    }
}

extension MultiProcessTests {
    @Suite("hubd never prints the NATS password")
    struct CredentialLeaks {
        @Test("every refusal of a --log URL, a credentials file or a server names no secret", arguments: [
            ["--log", "nats://storesync:\(CredentialsTests.secret)@127.0.0.1:14223"],
            ["--log", "nats://storesync:\(CredentialsTests.secret)@127.0.0.1:14223:/x"],
            ["--log", "tls://storesync:\(CredentialsTests.secret)@127.0.0.1:4222/x"],
            ["--log", "nats://storesync:\(CredentialsTests.secret)@127.0.0.1:1/x", "--nats-credentials", "/nonexistent"],
            ["--log", "nats://\(CredentialsTests.secret)@127.0.0.1:1/bad%name"],
            ["--log", "nats://127.0.0.1:1/x", "--nats-credentials", "/proc/self/status"],
        ])
        func noSecretOnStderr(arguments: [String]) async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let hub = try fixture.spawn("hubd", ["--socket", fixture.socket] + arguments)
            #expect(try await hub.waitForExit() == 2)
            #expect(!hub.errorLines.isEmpty)
            #expect(!(hub.errorLines + hub.lines).joined().contains(CredentialsTests.secret), "\(hub.errorLines)")
        }
    }
}
