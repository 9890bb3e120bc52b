#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A failed system call, or a socket-level problem, described for a person.
public struct SystemError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The `errno` value, or 0 when the error is not from a system call.
    public let errno: Int32
    /// What happened and, where possible, what to do.
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

    /// An error for the system call that just failed, with `strerror(errno)` appended.
    ///
    /// - Parameter what: What was being done, e.g. `bind /run/x.sock`.
    /// - Returns: The error.
    public static func lastCall(_ what: String) -> SystemError {
        let code = currentErrno()
        return SystemError("\(what): \(describe(errno: code))", errno: code)
    }

    /// `strerror` of a code.
    ///
    /// - Parameter code: An `errno` value.
    /// - Returns: The system's text for it.
    public static func describe(errno code: Int32) -> String {
        guard let text = strerror(code) else { return "error \(code)" }
        return String(cString: text)
    }

    /// The message.
    public var description: String { message }
}

/// The calling thread's `errno`.
///
/// - Returns: The value of `errno` right now.
@inline(__always)
public func currentErrno() -> Int32 {
    #if canImport(Glibc) || canImport(Musl)
    return Glibc.errno
    #else
    return Darwin.errno
    #endif
}
