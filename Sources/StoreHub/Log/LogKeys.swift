import SyncCore
import SyncPOSIX
import SyncProtocol

/// The keys that authenticate a shared log's records: HMAC-SHA-256 under a secret the hubs of
/// a stream share, so that another client of the same NATS server, who can publish to the
/// stream's subjects but does not hold the key, can neither forge a record nor replay one
/// elsewhere in the history.
///
/// Every record's tag covers the history id, the record's seq, the tag of the record before it
/// (so a record is valid only right after the one it was proposed on), and its body. The
/// genesis record and shared snapshot heads are tagged the same way. The first key signs;
/// every key verifies (rotating a key: add the new one second on every hub, then first, then
/// drop the old one; docs/OPERATIONS.md §20).
///
/// Without a key (``unauthenticated``, `--log-unauthenticated`) the tags are plain SHA-256:
/// the chain still tells one history from another, but anyone can write a valid record.
package struct LogKeys: Sendable, Equatable {
    /// One key: its id (in every tag it makes) and the HMAC state it starts from.
    package struct Key: Sendable {
        package let id: String
        let mac: HMACSHA256
    }

    /// The keys, the signing one first; empty when records are not authenticated.
    package let keys: [Key]

    /// The same keys, in the same order (by their ids).
    ///
    /// - Parameters:
    ///   - lhs: Keys.
    ///   - rhs: Other keys.
    /// - Returns: Whether they are the same.
    package static func == (lhs: LogKeys, rhs: LogKeys) -> Bool { lhs.keys.map(\.id) == rhs.keys.map(\.id) }

    /// The name of the key file in `$CREDENTIALS_DIRECTORY` (systemd `LoadCredential=`).
    package static let credentialName = "storesync-log-key"
    /// The fewest bytes a key may have.
    package static let minimumKeyBytes = 32

    /// No authentication: tags are SHA-256 digests anyone can compute.
    package static let unauthenticated = LogKeys(keys: [])

    /// Whether records are authenticated (a key is held).
    package var isAuthenticated: Bool { !keys.isEmpty }

    /// Keys from a key file's text: one key per line (its bytes, at least
    /// ``minimumKeyBytes``), blank lines and `#` comments skipped; the first signs.
    ///
    /// - Parameters:
    ///   - bytes: The file's contents.
    ///   - source: Where they came from, for messages (never a key).
    /// - Returns: The keys, or what is wrong.
    package static func parse(_ bytes: [UInt8], source: String) -> Result<LogKeys, StorageError> {
        var keys: [Key] = []
        let text = String(decoding: bytes, as: UTF8.self)
        for (index, raw) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let line = raw.drop { $0 == " " || $0 == "\t" }
            if line.isEmpty || line.hasPrefix("#") { continue }
            let key = Array(line.utf8)
            guard key.count >= minimumKeyBytes else {
                return .failure(StorageError("\(source), line \(index + 1): a key must be at least \(minimumKeyBytes) bytes; make one with: head -c 32 /dev/urandom | base64"))
            }
            keys.append(Key(id: keyID(key), mac: HMACSHA256(key: key)))
        }
        guard !keys.isEmpty else {
            return .failure(StorageError("\(source) holds no key; make one with: head -c 32 /dev/urandom | base64 > FILE"))
        }
        return .success(LogKeys(keys: keys))
    }

    /// Finds the keys: `--log-key-file FILE`, else `$CREDENTIALS_DIRECTORY/storesync-log-key`.
    ///
    /// - Parameters:
    ///   - file: `--log-key-file`, if given.
    ///   - credentialsDirectory: `$CREDENTIALS_DIRECTORY`, if set.
    /// - Returns: The keys, `nil` when neither is there, or what is wrong.
    package static func load(file: String?, credentialsDirectory: String?) -> Result<LogKeys?, StorageError> {
        var path = file
        if path == nil, let directory = credentialsDirectory, !directory.isEmpty,
           FileSystem.exists(directory + "/" + credentialName) {
            path = directory + "/" + credentialName
        }
        guard let path else { return .success(nil) }
        do throws(SystemError) {
            let bytes = try SecretFile.read(path, what: "the shared log's key file")
            return parse(bytes, source: "the shared log's key file \(path)").map { $0 }
        } catch {
            return .failure(StorageError(error.message))
        }
    }

    /// A key's id: 8 hex digits of a hash of it, so a tag names the key without revealing it.
    private static func keyID(_ key: [UInt8]) -> String {
        var hash = SHA256()
        hash.update(Array("storesync-log-key-id\u{0}".utf8))
        hash.update(key)
        return String(SHA256.hex(hash.finalize()).prefix(8))
    }

    /// What a tag covers, for each kind of thing tagged.
    package enum Subject {
        /// An action record: the history, its seq, the tag of the record before it ("" for the
        /// first), and its body.
        case record(history: String, seq: UInt64, previous: String, body: [UInt8])
        /// The genesis record's canonical body (without its tag).
        case genesis(body: [UInt8])
        /// A shared snapshot head's canonical body (without its tag) and the SHA-256 of the
        /// snapshot's bytes.
        case snapshotHead(body: [UInt8], contentDigest: [UInt8])

        /// The bytes that are hashed: a domain, then the parts, NUL-separated (none of the
        /// parts before the body can hold a NUL).
        func feed(_ update: (UnsafeRawBufferPointer) -> Void) {
            func part(_ bytes: [UInt8]) { bytes.withUnsafeBytes(update) }
            switch self {
            case .record(let history, let seq, let previous, let body):
                part(Array("storesync-record/1\u{0}\(history)\u{0}\(seq)\u{0}\(previous)\u{0}".utf8))
                part(body)
            case .genesis(let body):
                part(Array("storesync-genesis/1\u{0}".utf8))
                part(body)
            case .snapshotHead(let body, let contentDigest):
                part(Array("storesync-snapshot/1\u{0}".utf8))
                part(contentDigest)
                part(body)
            }
        }
    }

    /// The tag of `subject`: `hmac-sha256:KEYID:HEX` under the signing key, or `sha256:HEX`
    /// without one.
    ///
    /// - Parameter subject: What is tagged.
    /// - Returns: The tag.
    package func tag(_ subject: Subject) -> String {
        guard let key = keys.first else {
            var hash = SHA256()
            subject.feed { hash.update($0) }
            return "sha256:" + SHA256.hex(hash.finalize())
        }
        return "hmac-sha256:\(key.id):" + SHA256.hex(Self.code(key, subject))
    }

    /// Whether `tag` is a valid tag of `subject` under one of the keys (or, without keys, the
    /// plain digest), compared in constant time.
    ///
    /// - Parameters:
    ///   - tag: The tag, as read (from anyone).
    ///   - subject: What it claims to tag.
    /// - Returns: Whether it is valid.
    package func isValid(_ tag: String, for subject: Subject) -> Bool {
        guard isAuthenticated else { return tag == self.tag(subject) }
        let parts = tag.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "hmac-sha256", let key = keys.first(where: { $0.id == parts[1] }),
              let claimed = Self.bytes(hex: parts[2]), claimed.count == HMACSHA256.byteCount else { return false }
        return HMACSHA256.constantTimeEquals(claimed, Self.code(key, subject))
    }

    /// Whether a tag was made with a key (a stream of authenticated records) rather than a plain digest.
    ///
    /// - Parameter tag: A tag.
    /// - Returns: Whether it names a key.
    package static func isKeyed(_ tag: String) -> Bool { tag.hasPrefix("hmac-sha256:") }

    private static func code(_ key: Key, _ subject: Subject) -> [UInt8] {
        var mac = key.mac
        subject.feed { mac.update($0) }
        return mac.finalize()
    }

    private static func bytes(hex: Substring) -> [UInt8]? {
        guard hex.utf8.count % 2 == 0, hex.utf8.count <= 128 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(hex.utf8.count / 2)
        var high: UInt8?
        for byte in hex.utf8 {
            let value: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): value = byte - UInt8(ascii: "a") + 10
            default: return nil
            }
            if let first = high {
                bytes.append(first << 4 | value)
                high = nil
            } else {
                high = value
            }
        }
        return bytes
    }
}
