import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import StoreHub
@testable import StoreSyncCommands
@testable import SyncPOSIX
import SyncProtocol
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

    /// A secret the way the review wrote one: 32 random bytes in base64, so it ends in `=`.
    static let base64Secret = "UWfdBdl20TbbQk3PZx9aLm2VvT8sRjYe1cN4oHwq7qM="

    /// Whether any 6 characters in a row of `secret` appear in `message`.
    static func quotesPart(of secret: String, in message: String) -> Bool {
        let characters = Array(secret)
        guard characters.count >= 6 else { return message.contains(secret) }
        return (0...(characters.count - 6)).contains { message.contains(String(characters[$0..<($0 + 6)])) }
    }

    @Test("no part of a secret written where a key belongs is quoted: a bare token, a key file, text before =", arguments: [
        "\(base64Secret)\n", "c3VwZXJzZWNyZXRzZWNyZXRzZWNyZXQ=\npassword=x\n", "user=u\n\(base64Secret)\n",
        "# the log key, given by mistake\n\(base64Secret)\n", "c3VwZXJzZWNyZXRzZWNyZXRzZWNyZXQ==\n", " \(base64Secret) = x\n",
        "Password=\(base64Secret)\n", "token\(base64Secret)\n",
    ])
    func secretWhereAKeyBelongs(text: String) {
        guard case .failure(let error) = SharedLogCredentials.parse(Array(text.utf8), source: "the file F") else {
            Issue.record("accepted \(text.debugDescription)")
            return
        }
        for secret in [Self.base64Secret, "c3VwZXJzZWNyZXRzZWNyZXRzZWNyZXQ"] {
            #expect(!Self.quotesPart(of: secret, in: error.message), "\(error.message)")
        }
        #expect(error.message.contains("the file F, line "), "it says which line: \(error.message)")
    }

    @Test("a known key without a value is named, never its line")
    func emptyValueNamed() {
        guard case .failure(let error) = SharedLogCredentials.parse(Array("user=u\npassword=\n".utf8), source: "F") else {
            Issue.record("accepted an empty password")
            return
        }
        #expect(error.message == "F, line 2: password= has no value")
    }

    @Test("arguments are quoted without a URL's credentials, wherever they stand", arguments: [
        "--log=nats://storesync:\(secret)@127.0.0.1:1/ledger", "nats://storesync:\(secret)@127.0.0.1:1/ledger",
        "storesync:\(secret)@127.0.0.1", "--lgo=nats://\(secret)@h:1/s", "tls://u:\(secret)@h/x", "--nats-password=\(secret)",
    ])
    func argumentsRedacted(argument: String) throws {
        do {
            _ = try HubOptions.parse(["hubd", argument])
            Issue.record("hubd took \(argument)")
        } catch {
            #expect(!error.message.contains(Self.secret), "\(error.message)")
            #expect(error.message.contains("***@") || error.message.contains("=…\""), "\(error.message)")
        }
        for arguments in [["replica-cli", argument], ["replica-cli", "status", argument], ["replica-cli", "--socket", "/x", argument]] {
            do {
                _ = try ReplicaOptions.parse(arguments)
            } catch {
                #expect(!error.message.contains(Self.secret), "\(error.message)")
            }
        }
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

    @Test("a secret file owned by another user, or in a directory another user can write, is refused, saying how to fix it")
    func ownerAndDirectory() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/key"
        try write(Self.base64Secret + "\n", to: file, mode: 0o600)
        #expect((try? SecretFile.read(file, what: "the key")) != nil, "owned by this user, mode 600, in a 700 directory")
        // /tmp: root's, writable by all, but sticky: no other user can rename or remove the file.
        #expect(SecretFile.placementProblem("/tmp/x", user: geteuid()) == nil)
        if geteuid() == 0 {
            // Only root can give a file away: the other checks are made as root.
            chown(file, 65534, 65534)
            #expect(throws: SystemError.self) { try SecretFile.read(file, what: "the key") }
            do {
                _ = try SecretFile.read(file, what: "the key")
            } catch {
                #expect(error.message.contains("owned by uid 65534") && error.message.contains("chown"), "\(error.message)")
                #expect(!CredentialsTests.quotesPart(of: Self.base64Secret, in: error.message))
            }
            chown(file, 0, 0)
            // The directory: another user's, or writable by others.
            chown(directory, 65534, 65534)
            #expect(throws: SystemError.self) { try SecretFile.read(file, what: "the key") }
            chown(directory, 0, 0)
        }
        chmod(directory, 0o777)
        do {
            _ = try SecretFile.read(file, what: "the key")
            Issue.record("a key in a directory every user can write was taken")
        } catch {
            #expect(error.message.contains("other users can write to the directory \(directory)") && error.message.contains("chmod go-w"),
                    "\(error.message)")
        }
        chmod(directory, 0o700)
        // A link to it from a directory others can write is refused too (they could point it elsewhere).
        let open = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: open) }
        chmod(open, 0o777)
        symlink(file, open + "/link")
        #expect(throws: SystemError.self) { try SecretFile.read(open + "/link", what: "the key") }
        // And the credentials reader goes through the same checks.
        var configuration = try SharedLogConfiguration.parse("nats://127.0.0.1:4222/s").get()
        guard case .failure = SharedLogCredentials.resolve(into: &configuration, file: open + "/link", environment: [:]) else {
            Issue.record("credentials through a link in an open directory were taken")
            return
        }
    }

    @Test("a URL's credentials are never in a line written to stderr or the log, wherever it stands in it")
    func linesRedacted() {
        let secret = Self.secret
        for line in ["no hub is listening at nats://u:\(secret)@h:1/s (connect: No such file)",
                     "replica 5 (nats://u:\(secret)@h) attached", "bad pointer \"nats://\(secret)@h/x\"",
                     "x tls://u:\(secret)@a:1,u:\(secret)@b:2/s y", "nats://u:p/\(secret)@h/s"] {
            let shown = URLCredentials.redacted(in: line)
            #expect(!shown.contains(secret) && shown.contains("://***@"), "\(shown)")
        }
        #expect(URLCredentials.redacted(in: "nothing to hide @ all") == "nothing to hide @ all")
        #expect(URLCredentials.redacted(in: "see https://example.com/docs") == "see https://example.com/docs")
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
            ["--log=nats://storesync:\(CredentialsTests.secret)@127.0.0.1:1/ledger"],
            ["nats://storesync:\(CredentialsTests.secret)@127.0.0.1:1/ledger"],
            ["--socket-group", "nats://storesync:\(CredentialsTests.secret)@127.0.0.1:1/ledger"],
        ])
        func noSecretOnStderr(arguments: [String]) async throws {
            // (Also: every `--flag=value` hides its value, below.)
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let hub = try fixture.spawn("hubd", ["--socket", fixture.socket] + arguments)
            #expect(try await hub.waitForExit() == 2)
            #expect(!hub.errorLines.isEmpty)
            #expect(!(hub.errorLines + hub.lines).joined().contains(CredentialsTests.secret), "\(hub.errorLines)")
        }

        @Test("a URL with a password where a socket, a pointer, a name or a flag's value goes: never printed, by replica-cli or in the hub's log", arguments: [
            ["--socket", "nats://u:\(CredentialsTests.secret)@h:1/s", "status"],
            ["--pointer", "nats://u:\(CredentialsTests.secret)@h/x", "state"],
            ["--app", "counter", "dispatch", "nats://u:\(CredentialsTests.secret)@h:1/s"],
            ["inspect", "--nats-password=\(CredentialsTests.secret)", "--http", "0"],
            ["history", "--nats-password=\(CredentialsTests.secret)"],
            ["--hub-uid", "nats://u:\(CredentialsTests.secret)@h", "status"],
        ])
        func replicaNoSecret(arguments: [String]) async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            try await fixture.startHub()
            let (status, out, err) = try await fixture.runCLI(arguments)
            #expect(status != 0)
            #expect(!(out + err).joined().contains(CredentialsTests.secret), "\(err)")
        }

        @Test("a replica named with a URL and password: the hub's log line about it holds no password")
        func nameInHubLog() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let hub = try await fixture.startHub()
            let (status, _, _) = try await fixture.runCLI(["--name", "nats://u:\(CredentialsTests.secret)@h", "--app", "json", "dispatch", #"{"type":"set","path":"/a","value":1}"#])
            #expect(status == 0)
            try await waitUntil("the hub to log the replica's attach line: \(hub.errorLines)") {
                hub.errorLines.contains { $0.contains("attached") && $0.contains("***@h") }
            }
            #expect(!(hub.errorLines + hub.lines).joined().contains(CredentialsTests.secret), "\(hub.errorLines)")
        }

        @Test("a credentials file or \\$CREDENTIALS_DIRECTORY holding a bare token or the log key: exit 2, the line named, no part of it printed")
        func bareTokenFile() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let file = fixture.directory + "/creds"
            _ = FileManager.default.createFile(atPath: file, contents: Data((CredentialsTests.base64Secret + "\n").utf8))
            chmod(file, 0o600)
            try FileManager.default.createDirectory(atPath: fixture.directory + "/creds.d", withIntermediateDirectories: false)
            chmod(fixture.directory + "/creds.d", 0o700)
            let systemd = fixture.directory + "/creds.d/nats-credentials"
            _ = FileManager.default.createFile(atPath: systemd, contents: Data(("# key\n" + CredentialsTests.base64Secret + "\n").utf8))
            chmod(systemd, 0o400)
            let runs: [([String], [String: String])] = [
                (["--log", "nats://127.0.0.1:1/x", "--nats-credentials", file, "--log-unauthenticated"], [:]),
                (["--log", "nats://127.0.0.1:1/x", "--log-unauthenticated"], ["CREDENTIALS_DIRECTORY": fixture.directory + "/creds.d"]),
            ]
            for (arguments, environment) in runs {
                let hub = try fixture.spawn("hubd", ["--socket", fixture.socket] + arguments, environment: environment)
                #expect(try await hub.waitForExit() == 2)
                let said = (hub.errorLines + hub.lines).joined(separator: "\n")
                #expect(said.contains("line "), "\(said)")
                #expect(!CredentialsTests.quotesPart(of: CredentialsTests.base64Secret, in: said), "\(said)")
            }
        }
    }
}
