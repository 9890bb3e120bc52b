/// Where a hub's log lines go, shaped like swift-log's `Logger`: a level, a message and
/// metadata for each event, and a handler the program chooses.
///
/// The library never names the program and never picks a destination: the handler does
/// (`hubd` writes `hubd: MESSAGE` to stderr, prefixing `warning: ` and `error: `; an app's own
/// hub writes its own name). Events below ``logLevel`` are dropped before their message is
/// built (the message is an autoclosure).
public struct HubLogger: Sendable {
    /// How much an event matters, least first (swift-log's levels).
    public enum Level: Int, Sendable, Comparable, CaseIterable, CustomStringConvertible {
        /// Every step, for tracing one request.
        case trace
        /// Details for debugging.
        case debug
        /// A notable event of normal operation (listening, a replica attached, the log back).
        case info
        /// Normal but significant.
        case notice
        /// Something an operator should look at; the hub goes on.
        case warning
        /// Something failed; the hub goes on or stops, as the message says.
        case error
        /// The hub cannot go on.
        case critical

        /// Orders levels from ``trace`` to ``critical``.
        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }

        /// The level's name, as `--log-level` takes it: `trace`, `debug`, `info`, …
        public var description: String {
            switch self {
            case .trace: "trace"
            case .debug: "debug"
            case .info: "info"
            case .notice: "notice"
            case .warning: "warning"
            case .error: "error"
            case .critical: "critical"
            }
        }

        /// The level named `name` (as ``description`` writes it), if any.
        ///
        /// - Parameter name: `trace`, `debug`, `info`, `notice`, `warning`, `error` or `critical`.
        public init?(name: String) {
            guard let level = Level.allCases.first(where: { $0.description == name }) else { return nil }
            self = level
        }
    }

    /// Values that qualify an event (a replica id, a seq), by name.
    public typealias Metadata = [String: String]

    /// Receives each event at or above ``logLevel``.
    public typealias Handler = @Sendable (_ level: Level, _ message: String, _ metadata: Metadata) -> Void

    /// The least level logged; events below it are dropped unbuilt.
    public var logLevel: Level
    private let handler: Handler

    /// Creates a logger.
    ///
    /// - Parameters:
    ///   - logLevel: The least level logged (default ``Level/info``).
    ///   - handler: Receives each event logged.
    public init(logLevel: Level = .info, handler: @escaping Handler) {
        self.logLevel = logLevel
        self.handler = handler
    }

    /// A logger that drops everything.
    public static let discarding = HubLogger(logLevel: .critical) { _, _, _ in }

    /// Logs an event at `level`, if that level is logged.
    ///
    /// - Parameters:
    ///   - level: How much it matters.
    ///   - message: What happened (built only when logged).
    ///   - metadata: Values that qualify it.
    public func log(level: Level, _ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
        guard level >= logLevel else { return }
        handler(level, message(), metadata())
    }

    /// Logs at ``Level/debug``. - Parameter message: What happened.
    public func debug(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
        log(level: .debug, message(), metadata: metadata())
    }

    /// Logs at ``Level/info``. - Parameter message: What happened.
    public func info(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
        log(level: .info, message(), metadata: metadata())
    }

    /// Logs at ``Level/notice``. - Parameter message: What happened.
    public func notice(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
        log(level: .notice, message(), metadata: metadata())
    }

    /// Logs at ``Level/warning``. - Parameter message: What happened.
    public func warning(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
        log(level: .warning, message(), metadata: metadata())
    }

    /// Logs at ``Level/error``. - Parameter message: What happened.
    public func error(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata = [:]) {
        log(level: .error, message(), metadata: metadata())
    }

    /// The way `hubd` writes an event: `PROGRAM: MESSAGE`, with `warning: ` or `error: ` before
    /// the message at those levels (`error: ` for critical too), and the metadata, if any, as
    /// ` key=value` pairs in name order after it.
    ///
    /// - Parameters:
    ///   - program: The program's name.
    ///   - level: The event's level.
    ///   - message: The message.
    ///   - metadata: Its metadata.
    /// - Returns: The line, without a line feed.
    public static func line(program: String, level: Level, message: String, metadata: Metadata) -> String {
        let marker = level >= .error ? "error: " : level == .warning ? "warning: " : ""
        let pairs = metadata.sorted { $0.key < $1.key }.map { " \($0.key)=\($0.value)" }.joined()
        return program + ": " + marker + message + pairs
    }
}
