#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
#if os(Linux)
import CSyncPOSIX
#endif

/// Files that hold a secret (a password, a token, a key), and keeping secrets out of core
/// dumps.
public enum SecretFile {
    /// The largest secret file read.
    public static let maxBytes = 64 << 10

    /// Reads a file that holds a secret, refusing one that other users could read or change.
    ///
    /// The file must be a regular file (a symbolic link is followed: systemd's
    /// `$CREDENTIALS_DIRECTORY` may hold links), of at most ``maxBytes``, that neither group
    /// nor others can read or write. Its contents are never put into an error message.
    ///
    /// - Parameters:
    ///   - path: The file.
    ///   - what: What it holds, for messages ("the NATS credentials file").
    /// - Returns: The bytes.
    /// - Throws: ``SystemError`` saying what is wrong and what to do.
    public static func read(_ path: String, what: String) throws(SystemError) -> [UInt8] {
        var info = stat()
        guard stat(path, &info) == 0 else {
            let code = errno
            throw SystemError("cannot read \(what) \(path): \(SystemError.describe(errno: code))", errno: code)
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw SystemError("cannot read \(what) \(path): it is not a regular file", errno: EINVAL)
        }
        guard info.st_mode & 0o077 == 0 else {
            let mode = String(info.st_mode & 0o777, radix: 8)
            throw SystemError("refusing \(what) \(path): other users can read or change it (mode 0\(mode)); chmod 600 it", errno: EPERM)
        }
        guard info.st_size <= off_t(maxBytes) else {
            throw SystemError("refusing \(what) \(path): it is larger than \(maxBytes) bytes", errno: EFBIG)
        }
        return try FileSystem.read(path)
    }

    /// Stops the process from leaving a core dump, and from being traced by other processes
    /// of its user, while it holds a secret (Linux: `PR_SET_DUMPABLE` 0; elsewhere nothing).
    public static func keepOutOfCoreDumps() {
        #if os(Linux)
        _ = csyncposix_set_dumpable(0)
        #endif
    }

    /// Whether the process may leave a core dump (Linux; `true` elsewhere).
    public static var isDumpable: Bool {
        #if os(Linux)
        return csyncposix_get_dumpable() != 0
        #else
        return true
        #endif
    }
}
