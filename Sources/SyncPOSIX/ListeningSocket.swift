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
    /// Whether this process bound the socket (so it removes the path when it stops); `false`
    /// for a socket passed by a service manager, which owns the path.
    public var bound: Bool = true

    init(fd: Int32, path: String, lockFD: Int32, device: UInt64, inode: UInt64) {
        self.fd = fd
        self.path = path
        self.lockFD = lockFD
        self.device = device
        self.inode = inode
    }

    /// A listening socket passed by a service manager (systemd's socket activation): served
    /// as it is, never unlinked; its path and mode are the manager's business.
    ///
    /// - Parameters:
    ///   - fd: The listening descriptor (made non-blocking and close-on-exec here).
    ///   - path: Its path, for messages (`getsockname`), or a description.
    public init(adopting fd: Int32, path: String) {
        self.fd = fd
        self.path = path
        self.lockFD = -1
        self.device = 0
        self.inode = 0
        self.bound = false
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        _ = try? UnixSocket.setNonBlocking(fd)
    }

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
        guard bound else { return false }
        let removed = ownsPath && unlink(path) == 0
        // The lock file itself stays: removing it would let two starting hubs lock two
        // different files of the same name.
        UnixSocket.close(lockFD)
        return removed
    }
}
