import SyncPOSIX
import SyncProtocol

/// The NATS credentials of a shared log, and where they come from.
///
/// A password on the command line is readable by every local user (`ps`), so a hub takes its
/// credentials, in this order, from exactly one of:
/// 1. the URL (`nats://USER:PASS@…` or `nats://TOKEN@…`; allowed, and warned about);
/// 2. `--nats-credentials FILE`;
/// 3. `$CREDENTIALS_DIRECTORY/nats-credentials` (systemd's `LoadCredential=nats-credentials:…`);
/// 4. the environment: `STORESYNC_NATS_USER` with `STORESYNC_NATS_PASSWORD`, or `STORESYNC_NATS_TOKEN`.
///
/// A credentials file holds `key=value` lines: `user=` and `password=`, or `token=`. Blank
/// lines and lines starting with `#` are skipped. No value is ever put into a message.
public struct SharedLogCredentials: Sendable, Equatable {
    /// The user, with ``password``.
    public var user: String?
    /// The password.
    public var password: String?
    /// A token, instead of user and password.
    public var token: String?
    /// Where they came from, for the log ("the file /etc/storesync/nats-credentials"); never a value.
    public var source: String

    /// The name of the credential in `$CREDENTIALS_DIRECTORY`.
    public static let credentialName = "nats-credentials"

    /// The keys a credentials file may give.
    private enum Key: String {
        case user, password, token
    }

    /// Whether any secret is set.
    public var isEmpty: Bool { user == nil && password == nil && token == nil }

    /// Reads a credentials file's text.
    ///
    /// - Parameters:
    ///   - bytes: The file's contents.
    ///   - source: Where they came from, for messages.
    /// - Returns: The credentials, or what is wrong with the text (never quoting a value).
    public static func parse(_ bytes: [UInt8], source: String) -> Result<SharedLogCredentials, StorageError> {
        var credentials = SharedLogCredentials(source: source)
        let text = String(decoding: bytes, as: UTF8.self)
        // "\r\n" is one Character in Swift: split on every kind of line end.
        for (index, line) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            if line.allSatisfy({ $0 == " " || $0 == "\t" }) || line.hasPrefix("#") { continue }
            guard let equals = line.firstIndex(of: "=") else {
                return .failure(StorageError("\(source), line \(index + 1): expected key=value (user=, password= or token=); the line is not shown, as it may be a secret"))
            }
            let key = String(line[..<equals].drop(while: { $0 == " " || $0 == "\t" }).reversed()
                .drop(while: { $0 == " " || $0 == "\t" }).reversed())
            let value = String(line[line.index(after: equals)...])
            // A key is named in a message only when it is one of the three: anything else may be
            // a secret written where a key belongs (a bare token or key ends in `=`), so neither
            // it nor any part of it is shown.
            guard let known = Key(rawValue: key) else {
                return .failure(StorageError("\(source), line \(index + 1): the text before \"=\" is not user, password or token (not shown: it may be a secret); write user=NAME and password=SECRET, or token=SECRET"))
            }
            guard !value.isEmpty else {
                return .failure(StorageError("\(source), line \(index + 1): \(known.rawValue)= has no value"))
            }
            switch known {
            case .user: credentials.user = value
            case .password: credentials.password = value
            case .token: credentials.token = value
            }
        }
        return credentials.checked()
    }

    /// Reads and parses a credentials file (``SecretFile/read(_:what:)``'s checks first).
    private static func read(_ path: String, what: String, source: String) -> Result<SharedLogCredentials, StorageError> {
        do throws(SystemError) {
            return parse(try SecretFile.read(path, what: what), source: source)
        } catch {
            return .failure(StorageError(error.message))
        }
    }

    /// The credentials if they are one complete kind: user and password, or a token.
    private func checked() -> Result<SharedLogCredentials, StorageError> {
        if token != nil, user != nil || password != nil {
            return .failure(StorageError("\(source) gives both a token and a user or password; give one or the other"))
        }
        if (user == nil) != (password == nil) {
            return .failure(StorageError("\(source) gives a \(user == nil ? "password without a user" : "user without a password"); give both"))
        }
        if isEmpty { return .failure(StorageError("\(source) holds no credentials (user= and password=, or token=)")) }
        return .success(self)
    }

    /// Finds the credentials (see the type's summary for the order) and puts them into `configuration`.
    ///
    /// - Parameters:
    ///   - configuration: The shared log; credentials from its URL count as the first source.
    ///   - file: `--nats-credentials FILE`, if given.
    ///   - environment: The process's environment.
    /// - Returns: Where the credentials came from (`nil`: none, the servers are used without),
    ///   or why they cannot be used.
    public static func resolve(into configuration: inout SharedLogConfiguration, file: String?,
                               environment: [String: String]) -> Result<String?, StorageError> {
        let fromURL = configuration.user != nil || configuration.password != nil || configuration.token != nil
        var found: SharedLogCredentials?
        if let file {
            guard !fromURL else {
                return .failure(StorageError("--nats-credentials and credentials in the --log URL: give them once, in the file"))
            }
            switch read(file, what: "the NATS credentials file", source: "the NATS credentials file \(file)") {
            case .success(let credentials): found = credentials
            case .failure(let error): return .failure(error)
            }
        } else if !fromURL, let directory = environment["CREDENTIALS_DIRECTORY"], !directory.isEmpty,
                  FileSystem.exists(directory + "/" + credentialName) {
            let path = directory + "/" + credentialName
            switch read(path, what: "the NATS credentials", source: "the systemd credential \(credentialName) (\(path))") {
            case .success(let credentials): found = credentials
            case .failure(let error): return .failure(error)
            }
        } else if !fromURL {
            let user = environment["STORESYNC_NATS_USER"].flatMap { $0.isEmpty ? nil : $0 }
            let password = environment["STORESYNC_NATS_PASSWORD"].flatMap { $0.isEmpty ? nil : $0 }
            let token = environment["STORESYNC_NATS_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
            if user != nil || password != nil || token != nil {
                let credentials = SharedLogCredentials(user: user, password: password, token: token,
                                                       source: "the environment (STORESYNC_NATS_…)")
                switch credentials.checked() {
                case .success(let checked): found = checked
                case .failure(let error): return .failure(error)
                }
            }
        }
        if fromURL { return .success("the --log URL") }
        guard let found else { return .success(nil) }
        configuration.user = found.user
        configuration.password = found.password
        configuration.token = found.token
        return .success(found.source)
    }
}
