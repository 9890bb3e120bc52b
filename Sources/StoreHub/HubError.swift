import SyncPOSIX

/// Why a hub could not start or could not go on serving, said for a person.
///
/// Clients' mistakes never surface here: they get an `error` message on their own
/// connection and the hub carries on.
public struct HubError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The `errno` behind the failure, or 0 when it did not come from a system call.
    public let errno: Int32
    /// What happened and what to do, e.g. that a live hub already listens on the path.
    public let message: String

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - message: What happened and what to do.
    ///   - errno: The `errno`, or 0.
    public init(_ message: String, errno: Int32 = 0) {
        self.message = message
        self.errno = errno
    }

    init(_ error: SystemError) {
        self.init(error.message, errno: error.errno)
    }

    /// The message.
    public var description: String { message }
}
