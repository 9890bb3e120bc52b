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

/// Unix domain stream sockets through the C library: listen, connect, read, write, close.
///
/// Every function takes and returns plain file descriptors; the event loop or the
/// connection that owns a descriptor is the only one that touches it.
public enum UnixSocket {
    /// The result of a non-blocking read or write.
    public enum IOResult: Sendable, Equatable {
        /// This many bytes moved (always > 0).
        case bytes(Int)
        /// Nothing now; try again when `poll` says so.
        case wouldBlock
        /// The peer closed the connection (reads only).
        case endOfFile
        /// The call failed with this `errno`.
        case failed(Int32)
    }

    /// Why `path` cannot be a hub's socket, when something other than a socket is there.
    ///
    /// - Parameter path: A socket path.
    /// - Returns: The refusal, or `nil` when nothing or a socket is there.
    public static func notASocket(_ path: String) -> SystemError? {
        var info = stat()
        guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) != S_IFSOCK else { return nil }
        return SystemError("\(path) exists and is not a socket; refusing to replace it — remove it or choose another --socket path")
    }

    /// Binds and listens on `path`, replacing a stale socket file but never a live hub.
    ///
    /// The socket's directory is created if missing (mode 0700, or 0750 for a shared group)
    /// and must pass ``SocketPath/checkDirectory(for:owners:sharedGroups:side:)``. Start-up is
    /// serialised by an exclusive `flock` on `PATH.lock` (kept for the listener's life), so two
    /// hubs starting together cannot both decide the path is free; a socket file nobody accepts
    /// on (left by a hub that died) is then removed. The socket is bound at a private staging
    /// name beside the path (`PATH.lock` holds it for this hub), given its group and `mode`,
    /// and only then renamed into place, so the path never names a socket more open than asked for.
    ///
    /// - Parameters:
    ///   - path: The socket path.
    ///   - mode: The socket file's mode (default 0600: the hub's user only).
    ///   - group: The group the socket is shared with, if any.
    ///   - backlog: The `listen` backlog.
    /// - Returns: The listener (non-blocking and close-on-exec), which remembers the inode it bound.
    /// - Throws: ``SystemError`` when the path is too long or unusable, the directory cannot be
    ///   trusted, another hub holds the lock or listens there, the path is some other kind of
    ///   file, or a system call fails.
    public static func listen(at path: String, mode: mode_t = 0o600, group: UInt32? = nil,
                              backlog: Int32 = 128) throws(SystemError) -> ListeningSocket {
        try SocketPath.validate(path)
        try SocketPath.prepareDirectory(for: path, group: group)
        try SocketPath.checkDirectory(for: path, owners: [geteuid(), 0], sharedGroups: group.map { [$0] } ?? [], side: "hub")
        let lockPath = ListeningSocket.lockPath(for: path)
        let lockFD = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard lockFD >= 0 else { throw SystemError.lastCall("cannot open the lock file \(lockPath)") }
        var fd: Int32 = -1
        do throws(SystemError) {
            guard flock(lockFD, LOCK_EX | LOCK_NB) == 0 else {
                let code = currentErrno()
                if code == EWOULDBLOCK {
                    throw SystemError("another hub is already listening on \(path), or starting there (it holds the lock \(lockPath)); stop it first, or start this one with another --socket path", errno: EADDRINUSE)
                }
                throw SystemError.lastCall("cannot lock \(lockPath)")
            }
            var info = stat()
            if lstat(path, &info) == 0 {
                guard (info.st_mode & S_IFMT) == S_IFSOCK else {
                    throw SystemError("\(path) exists and is not a socket; refusing to replace it — remove it or choose another --socket path")
                }
                switch probe(path) {
                case .live:
                    throw SystemError("a hub is already listening on \(path); stop it first, or start this one with another --socket path", errno: EADDRINUSE)
                case .stale:
                    if unlink(path) != 0 && currentErrno() != ENOENT {
                        throw SystemError.lastCall("cannot remove the stale socket \(path)")
                    }
                case .failed(let error):
                    throw error
                }
            }
            fd = try makeSocket()
            let listening = fd
            // Bound at a private name, given its owner, group and mode, and only then renamed
            // into place (atomically): the path never names a socket more open than asked for,
            // and no process-wide umask is touched (other threads may be creating files).
            // A path at the length limit has no room for the staging suffix: it is bound in place,
            // where the peer check still turns away anyone the mode let in for that moment.
            var staging = SocketPath.stagingPath(for: path)
            if staging.utf8.count > SocketPath.maxLength { staging = path }
            if staging != path { _ = unlink(staging) }
            try withAddress(staging) { (address, length) throws(SystemError) in
                guard bind(listening, address, length) == 0 else {
                    throw SystemError.lastCall("cannot bind the socket \(path)")
                }
            }
            do throws(SystemError) {
                if let group, chown(staging, uid_t.max, group) != 0 {
                    throw SystemError.lastCall("cannot give the socket \(path) to group \(group)")
                }
                guard chmod(staging, mode) == 0 else { throw SystemError.lastCall("cannot set mode \(String(mode, radix: 8)) on \(path)") }
                guard staging == path || rename(staging, path) == 0 else {
                    throw SystemError.lastCall("cannot move the socket into place at \(path)")
                }
            } catch {
                _ = unlink(staging)
                throw error
            }
            guard lstat(path, &info) == 0 else { throw SystemError.lastCall("cannot stat the new socket \(path)") }
            let listener = ListeningSocket(fd: fd, path: path, lockFD: lockFD, device: UInt64(info.st_dev),
                                           inode: UInt64(info.st_ino))
            do throws(SystemError) {
                guard Glibc_listen(fd, backlog) == 0 else { throw SystemError.lastCall("cannot listen on \(path)") }
                try setNonBlocking(fd)
            } catch {
                listener.close()
                throw error
            }
            return listener
        } catch {
            if fd >= 0 { close(fd) }
            close(lockFD)
            throw error
        }
    }

    private enum Probe { case live, stale, failed(SystemError) }

    private static func probe(_ path: String) -> Probe {
        do {
            let fd = try connect(to: path)
            close(fd)
            return .live
        } catch {
            if error.errno == ECONNREFUSED || error.errno == ENOENT { return .stale }
            return .failed(error)
        }
    }

    /// Connects to the hub at `path` (blocking), as a client that trusts only certain users.
    ///
    /// Before connecting, the socket's directory must pass
    /// ``SocketPath/checkDirectory(for:owners:sharedGroups:side:)`` (owned by one of `owners`);
    /// after connecting, the process at the other end must run as one of `owners` (peer
    /// credentials), as ssh-agent clients check their agent. So a socket another user put in
    /// the hub's place is refused before anything is sent to it.
    ///
    /// - Parameters:
    ///   - path: The socket path.
    ///   - owners: The users whose hub this client accepts (itself, root, and the hub's user
    ///     when it is another); `nil` connects to whatever listens (for a hub's own probes).
    /// - Returns: The connected descriptor, close-on-exec, in blocking mode.
    /// - Throws: ``SystemError`` that names the path and says what to do.
    public static func connect(to path: String, trusting owners: Set<UInt32>) throws(SystemError) -> Int32 {
        try SocketPath.validate(path)
        try SocketPath.checkDirectory(for: path, owners: owners, sharedGroups: PeerCredentials.ownGroups(), side: "client")
        let fd = try connect(to: path)
        guard let peer = PeerCredentials.of(fd) else {
            close(fd)
            throw SystemError("cannot tell which user serves \(path) (no peer credentials); refusing to talk to it", errno: EPERM)
        }
        guard owners.contains(peer.uid) else {
            close(fd)
            throw SystemError("the socket \(path) is served by uid \(peer.uid) (\(Accounts.userName(peer.uid)), pid \(peer.pid)), not by you or root; nothing was sent. If that is the hub you mean, set STORESYNC_HUB_UID=\(peer.uid) (replica-cli --hub-uid \(peer.uid)); otherwise someone else is squatting on the path", errno: EPERM)
        }
        return fd
    }

    /// Connects to whatever listens at `path` (blocking), without checking who it is.
    ///
    /// - Parameter path: The socket path.
    /// - Returns: The connected descriptor, close-on-exec, in blocking mode.
    /// - Throws: ``SystemError`` that names the path and says how to start a hub when none listens.
    public static func connect(to path: String) throws(SystemError) -> Int32 {
        try SocketPath.validate(path)
        let fd = try makeSocket()
        do throws(SystemError) {
            try withAddress(path) { (address, length) throws(SystemError) in
                var result: Int32
                repeat { result = Glibc_connect(fd, address, length) } while result != 0 && currentErrno() == EINTR
                guard result == 0 else {
                    let code = currentErrno()
                    var info = stat()
                    if code == ECONNREFUSED, lstat(path, &info) == 0, (info.st_mode & S_IFMT) != S_IFSOCK {
                        throw SystemError("\(path) is not a socket, so no hub can be listening there; point --socket / $\(SocketPath.environmentVariable) at the hub's socket (hubd logs it when it starts)", errno: code)
                    }
                    switch code {
                    case ENOENT, ECONNREFUSED:
                        throw SystemError("no hub is listening at \(path) (\(SystemError.describe(errno: code).lowercased())); start one with \(SocketPath.startHint(for: path)), or point --socket / $\(SocketPath.environmentVariable) at a running hub", errno: code)
                    case EACCES:
                        throw SystemError("permission denied connecting to \(path); the hub's socket is private to the user who started it", errno: code)
                    default:
                        throw SystemError("cannot connect to \(path): \(SystemError.describe(errno: code))", errno: code)
                    }
                }
            }
            return fd
        } catch {
            close(fd)
            throw error
        }
    }

    /// Whether something listens at `path`, without waiting: a non-blocking `connect`, closed
    /// at once (nothing is sent). A listener whose queue is full (`EAGAIN`) counts as listening.
    ///
    /// - Parameter path: The socket path.
    /// - Returns: Whether a connection was accepted or queued.
    public static func isListening(at path: String) -> Bool {
        guard (try? SocketPath.validate(path)) != nil, let fd = try? makeSocket() else { return false }
        defer { close(fd) }
        guard (try? setNonBlocking(fd)) != nil else { return false }
        let answered = try? withAddress(path) { (address, length) throws(SystemError) -> Bool in
            var result: Int32
            repeat { result = Glibc_connect(fd, address, length) } while result != 0 && currentErrno() == EINTR
            return result == 0 || currentErrno() == EAGAIN || currentErrno() == EINPROGRESS
        }
        return answered ?? false
    }

    /// Accepts one pending connection on a non-blocking listener.
    ///
    /// - Parameter listener: The listening descriptor.
    /// - Returns: The new connection (non-blocking, close-on-exec), `nil` when none is pending.
    /// - Throws: ``SystemError`` for failures other than "none pending" and transient ones.
    public static func accept(_ listener: Int32) throws(SystemError) -> Int32? {
        while true {
            #if !os(Linux)
            let fd = Glibc_accept(listener, nil, nil)
            if fd >= 0 {
                // No accept4 here: flags are set right after, before anything can fork from this
                // thread's point of view (the hub's loop thread is the only one accepting).
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                var on: Int32 = 1
                setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &on, socklen_t(MemoryLayout<Int32>.size))
                do throws(SystemError) {
                    try setNonBlocking(fd)
                } catch {
                    close(fd)
                    throw error
                }
                return fd
            }
            #else
            // Atomically close-on-exec and non-blocking: a process forking on another thread
            // never inherits the connection.
            let fd = csyncposix_accept4(listener, Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue))
            if fd >= 0 { return fd }
            #endif
            switch currentErrno() {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK, ECONNABORTED, EPROTO: return nil
            default: throw SystemError.lastCall("accept")
            }
        }
    }

    /// Reads what is available into `buffer`.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - buffer: Where the bytes go.
    /// - Returns: The outcome.
    public static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> IOResult {
        while true {
            let n = Glibc_read(fd, buffer.baseAddress, buffer.count)
            if n > 0 { return .bytes(n) }
            if n == 0 { return .endOfFile }
            switch currentErrno() {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            case let code: return .failed(code)
            }
        }
    }

    /// Writes as much of `bytes` as the socket takes now, without raising SIGPIPE.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - bytes: The bytes.
    ///   - dontWait: Never block, even on a blocking descriptor (`MSG_DONTWAIT`).
    /// - Returns: The outcome.
    public static func write(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, dontWait: Bool = false) -> IOResult {
        guard bytes.count > 0 else { return .bytes(0) }
        let wait = dontWait ? Int32(MSG_DONTWAIT) : 0
        return sendOutcome { flags in send(fd, bytes.baseAddress, bytes.count, flags | wait) }
    }

    /// Writes as much of several buffers, in order, as the socket takes now, in one system
    /// call (`sendmsg`), without raising SIGPIPE.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - vectors: The buffers (at most `IOV_MAX`, 1024 on Linux and Darwin).
    /// - Returns: The outcome.
    public static func write(_ fd: Int32, gathering vectors: UnsafeBufferPointer<iovec>) -> IOResult {
        guard !vectors.isEmpty else { return .bytes(0) }
        var message = msghdr()
        message.msg_iov = UnsafeMutablePointer(mutating: vectors.baseAddress)
        message.msg_iovlen = numericCast(vectors.count)
        return sendOutcome { flags in sendmsg(fd, &message, flags) }
    }

    /// Runs a send-family call with the flags that keep it from raising SIGPIPE (none on
    /// Darwin, whose sockets are created with `SO_NOSIGPIPE`), retrying after `EINTR`.
    private static func sendOutcome(_ call: (Int32) -> Int) -> IOResult {
        #if canImport(Darwin)
        let flags: Int32 = 0
        #else
        let flags = Int32(MSG_NOSIGNAL)
        #endif
        while true {
            let n = call(flags)
            if n >= 0 { return .bytes(n) }
            switch currentErrno() {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return .wouldBlock
            case let code: return .failed(code)
            }
        }
    }

    /// Writes all of `bytes` on a blocking descriptor.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - bytes: The bytes.
    /// - Throws: ``SystemError`` when the peer is gone or the write fails.
    public static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(SystemError) {
        var offset = 0
        while offset < bytes.count {
            switch write(fd, UnsafeRawBufferPointer(rebasing: bytes[offset...])) {
            case .bytes(let n): offset += n
            case .wouldBlock: _ = waitUntil(fd, writable: true, timeoutMilliseconds: 1000)
            case .endOfFile: throw SystemError("the hub closed the connection")
            case .failed(let code):
                throw SystemError(code == EPIPE || code == ECONNRESET
                                  ? "the hub closed the connection" : "write failed: \(SystemError.describe(errno: code))",
                                  errno: code)
            }
        }
    }

    /// Writes all of `bytes` on a blocking descriptor.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - bytes: The bytes.
    /// - Throws: ``SystemError`` when the peer is gone or the write fails.
    public static func writeAll(_ fd: Int32, _ bytes: [UInt8]) throws(SystemError) {
        let result: Result<Void, SystemError> = bytes.withUnsafeBytes { raw in
            do throws(SystemError) {
                try writeAll(fd, raw)
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        try result.get()
    }

    /// Waits until `fd` is readable (or writable), up to a timeout.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - writable: Wait for writability instead of readability.
    ///   - timeoutMilliseconds: The longest wait; -1 waits forever.
    /// - Returns: Whether the descriptor became ready (or hung up) in time.
    public static func waitUntil(_ fd: Int32, writable: Bool = false, timeoutMilliseconds: Int32) -> Bool {
        var entry = pollfd(fd: fd, events: Int16(writable ? POLLOUT : POLLIN), revents: 0)
        while true {
            let n = poll(&entry, 1, timeoutMilliseconds)
            if n >= 0 { return n > 0 }
            if currentErrno() != EINTR { return false }
        }
    }

    /// Puts a descriptor in non-blocking mode.
    ///
    /// - Parameter fd: The descriptor.
    /// - Throws: ``SystemError`` when `fcntl` fails.
    public static func setNonBlocking(_ fd: Int32) throws(SystemError) {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
            throw SystemError.lastCall("cannot make a socket non-blocking")
        }
    }

    /// Closes a descriptor, ignoring errors.
    ///
    /// - Parameter fd: The descriptor.
    public static func close(_ fd: Int32) {
        _ = Glibc_close(fd)
    }

    /// Makes this process ignore SIGPIPE (for a program's own use, such as a test runner that
    /// writes to pipes of child processes it may have killed).
    ///
    /// The library never needs it and never calls it: its socket writes use `MSG_NOSIGNAL`
    /// (Linux) or `SO_NOSIGPIPE` (Apple platforms), so a closed peer is an `EPIPE` result.
    public static func ignoreBrokenPipes() {
        signal(SIGPIPE, SIG_IGN)
    }

    /// Creates a pipe whose two ends are non-blocking and close-on-exec.
    ///
    /// - Returns: The read end and the write end.
    /// - Throws: ``SystemError`` when the pipe cannot be created.
    public static func makePipe() throws(SystemError) -> (read: Int32, write: Int32) {
        var ends: [Int32] = [-1, -1]
        #if !os(Linux)
        guard pipe(&ends) == 0 else { throw SystemError.lastCall("cannot create a pipe") }
        for fd in ends {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            do throws(SystemError) {
                try setNonBlocking(fd)
            } catch {
                close(ends[0])
                close(ends[1])
                throw error
            }
        }
        #else
        guard csyncposix_pipe2(&ends, O_CLOEXEC | O_NONBLOCK) == 0 else { throw SystemError.lastCall("cannot create a pipe") }
        #endif
        return (ends[0], ends[1])
    }

    /// Creates a connected pair of Unix stream sockets, close-on-exec (in-process transports,
    /// tests and benchmarks).
    ///
    /// - Returns: The two ends; either may read and write.
    /// - Throws: ``SystemError`` when the pair cannot be created.
    public static func makeSocketPair() throws(SystemError) -> (Int32, Int32) {
        var ends: [Int32] = [-1, -1]
        #if !os(Linux)
        guard socketpair(AF_UNIX, SOCK_STREAM, 0, &ends) == 0 else { throw SystemError.lastCall("cannot create a socket pair") }
        for fd in ends {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            var on: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &on, socklen_t(MemoryLayout<Int32>.size))
        }
        #else
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
            throw SystemError.lastCall("cannot create a socket pair")
        }
        #endif
        return (ends[0], ends[1])
    }

    private static func makeSocket() throws(SystemError) -> Int32 {
        #if !os(Linux)
        let fd = socket(AF_UNIX, SOCK_STREAM, 0)
        guard fd >= 0 else { throw SystemError.lastCall("cannot create a Unix socket") }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        var on: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &on, socklen_t(MemoryLayout<Int32>.size))
        #else
        // Close-on-exec from birth: a fork on another thread can never inherit it.
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw SystemError.lastCall("cannot create a Unix socket") }
        #endif
        return fd
    }

    private static func withAddress<T>(
        _ path: String,
        _ body: (UnsafePointer<sockaddr>, socklen_t) throws(SystemError) -> T
    ) throws(SystemError) -> T {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count <= SocketPath.maxLength else { throw SystemError("socket path too long: \(path)") }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let length = socklen_t(MemoryLayout<sockaddr_un>.size)
        return try withUnsafePointer(to: &address) { pointer throws(SystemError) -> T in
            try pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { (address) throws(SystemError) -> T in
                try body(address, length)
            }
        }
    }
}

// The C library's names, reachable inside `UnixSocket` whose own methods shadow them.
@inline(__always) private func Glibc_listen(_ fd: Int32, _ backlog: Int32) -> Int32 { listen(fd, backlog) }
@inline(__always) private func Glibc_connect(_ fd: Int32, _ address: UnsafePointer<sockaddr>, _ length: socklen_t) -> Int32 {
    connect(fd, address, length)
}
@inline(__always) private func Glibc_accept(_ fd: Int32, _ address: UnsafeMutablePointer<sockaddr>?, _ length: UnsafeMutablePointer<socklen_t>?) -> Int32 {
    accept(fd, address, length)
}
@inline(__always) private func Glibc_read(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int {
    read(fd, buffer, count)
}
@inline(__always) private func Glibc_close(_ fd: Int32) -> Int32 { close(fd) }
