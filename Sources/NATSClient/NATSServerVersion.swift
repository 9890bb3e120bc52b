/// A nats-server release number, as its `INFO` gives it (`"version":"2.12.8"`).
public struct NATSServerVersion: Sendable, Comparable, CustomStringConvertible {
    /// The three numbers, major first.
    public let major: Int, minor: Int, patch: Int

    /// Creates a version.
    ///
    /// - Parameters:
    ///   - major: The major number.
    ///   - minor: The minor number.
    ///   - patch: The patch number.
    public init(_ major: Int, _ minor: Int, _ patch: Int) {
        self.major = major
        self.minor = minor
        self.patch = patch
    }

    /// Reads `MAJOR.MINOR.PATCH`, ignoring a pre-release or build suffix (`2.11.0-RC.1`).
    ///
    /// - Parameter text: The server's `version`.
    /// - Returns: The version, or `nil` when the text does not start with three numbers.
    public init?(_ text: String) {
        let core = text.prefix { $0 != "-" && $0 != "+" }
        let parts = core.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts.allSatisfy({ !$0.isEmpty && $0.count <= 6 && $0.allSatisfy(\.isASCII) }),
              let major = Int(parts[0]), let minor = Int(parts[1]), let patch = Int(parts[2]),
              major >= 0, minor >= 0, patch >= 0 else { return nil }
        self.init(major, minor, patch)
    }

    /// `MAJOR.MINOR.PATCH`.
    /// Reads the release a `nats-server --version` line names (`nats-server: v2.12.8`).
    ///
    /// - Parameter text: What the binary printed.
    /// - Returns: The release, or `nil` when the text names none.
    public init?(announced text: String) {
        guard let mark = text.range(of: " v") else { return nil }
        self.init(String(text[mark.upperBound...].prefix { !$0.isWhitespace }))
    }

    public var description: String { "\(major).\(minor).\(patch)" }

    /// Orders versions by major, then minor, then patch.
    ///
    /// - Parameters:
    ///   - lhs: A version.
    ///   - rhs: Another.
    /// - Returns: Whether `lhs` is the older.
    public static func < (lhs: NATSServerVersion, rhs: NATSServerVersion) -> Bool {
        (lhs.major, lhs.minor, lhs.patch) < (rhs.major, rhs.minor, rhs.patch)
    }
}
