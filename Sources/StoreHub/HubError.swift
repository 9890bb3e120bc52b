import SyncPOSIX

/// Why a hub could not start or could not go on serving, said for a person.
///
/// Clients' mistakes never surface here: they get an `error` message on their own
/// connection and the hub carries on.
public struct HubError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of failure, for the exit status a daemon chooses.
    public enum Kind: Sendable, Equatable {
        /// The hub could not start, or its event loop failed.
        case failed
        /// The hub stopped serving because its log could not be kept consistent with its
        /// state (a failed write that could not be undone); a restart recovers what is durable.
        case logBroken
        /// The stored data cannot be used as it is (corrupt, a gap, written by another app):
        /// starting again cannot help.
        case dataUnusable
    }

    /// The `errno` behind the failure, or 0 when it did not come from a system call.
    public let errno: Int32
    /// What happened and what to do, e.g. that a live hub already listens on the path.
    public let message: String
    /// What kind of failure.
    public let kind: Kind

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - message: What happened and what to do.
    ///   - errno: The `errno`, or 0.
    ///   - kind: What kind of failure.
    public init(_ message: String, errno: Int32 = 0, kind: Kind = .failed) {
        self.message = message
        self.errno = errno
        self.kind = kind
    }

    init(_ error: SystemError) {
        self.init(error.message, errno: error.errno)
    }

    /// The message.
    public var description: String { message }
}
