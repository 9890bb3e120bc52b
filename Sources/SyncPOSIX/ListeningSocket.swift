#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A bound, listening Unix socket together with what proves it is this process's.
///
/// Two hubs started together on one path must not orphan each other, and a hub that stops
/// must never remove a socket that another hub has bound since. So ``UnixSocket/listen(at:backlog:)``
/// first takes an exclusive `flock` on a lock file beside the socket (`PATH.lock`, held for
/// the listener's life), and remembers the device and inode of the socket file it bound;
/// ``close()`` removes the path only if it still names that very file.
public struct ListeningSocket: Sendable {
    /// The listening descriptor: non-blocking and close-on-exec.
    public let fd: Int32
    /// The socket path.
    public let path: String
    /// The lock file's descriptor (`PATH.lock`), held until ``close()``.
    let lockFD: Int32
    /// The device and inode of the socket file this process bound.
    let device: UInt64
    let inode: UInt64

    /// The lock file that serialises hubs on `path`.
    ///
    /// - Parameter path: A socket path.
    /// - Returns: `path` + `.lock`.
    public static func lockPath(for path: String) -> String { path + ".lock" }

    /// Whether `path` still names the socket file this listener bound.
    public var ownsPath: Bool {
        var info = stat()
        guard lstat(path, &info) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }

    /// Stops listening: closes the descriptor, removes the socket file if it is still the
    /// one this listener bound, and releases the lock. Call it once.
    ///
    /// - Returns: Whether the socket file was removed (`false` when the path now names
    ///   another file, which is left alone).
    @discardableResult
    public func close() -> Bool {
        UnixSocket.close(fd)
        let removed = ownsPath && unlink(path) == 0
        // The lock file itself stays: removing it would let two starting hubs lock two
        // different files of the same name.
        UnixSocket.close(lockFD)
        return removed
    }
}
