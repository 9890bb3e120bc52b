#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The parts of systemd's service protocol a daemon speaks without libsystemd: readiness
/// notifications (`sd_notify`) and socket activation (`sd_listen_fds`).
public enum Systemd {
    /// Sends a notification (`READY=1`, `STATUS=…`, `STOPPING=1`, `WATCHDOG=1`) to the service
    /// manager, when `NOTIFY_SOCKET` names one; otherwise does nothing.
    ///
    /// The protocol is one datagram of `KEY=VALUE` lines on the Unix socket `NOTIFY_SOCKET`
    /// names (a leading `@` is the abstract namespace).
    ///
    /// - Parameter state: The lines, e.g. `"READY=1\nSTATUS=serving"`.
    /// - Returns: Whether the datagram was sent.
    @discardableResult
    public static func notify(_ state: String) -> Bool {
        guard let raw = getenv("NOTIFY_SOCKET") else { return false }
        var path = Array(String(cString: raw).utf8)
        guard !path.isEmpty, path.count <= SocketPath.maxLength, path[0] == UInt8(ascii: "/") || path[0] == UInt8(ascii: "@") else {
            return false
        }
        let abstract = path[0] == UInt8(ascii: "@")
        if abstract { path[0] = 0 }
        #if os(Linux)
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        #else
        let fd = socket(AF_UNIX, SOCK_DGRAM, 0)
        #endif
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path)
            if !abstract { raw[path.count] = 0 }
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + path.count + (abstract ? 0 : 1))
        let message = Array(state.utf8)
        let sent = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                message.withUnsafeBytes { bytes in
                    sendto(fd, bytes.baseAddress, bytes.count, Int32(MSG_DONTWAIT), address, length)
                }
            }
        }
        return sent == message.count
    }

    /// How often the service manager wants `WATCHDOG=1` (half of `WATCHDOG_USEC`), when
    /// `WATCHDOG_USEC` is set for this process (`WATCHDOG_PID` unset or this process).
    public static var watchdogInterval: Duration? {
        guard let raw = getenv("WATCHDOG_USEC"), let usec = UInt64(String(cString: raw)), usec > 0 else { return nil }
        if let pid = getenv("WATCHDOG_PID"), Int32(String(cString: pid)) != getpid() { return nil }
        return .microseconds(Int64(clamping: usec / 2))
    }

    /// The listening sockets passed by socket activation (`LISTEN_PID` is this process and
    /// `LISTEN_FDS` ≥ 1): descriptors 3, 4, …; `nil` when the process was not socket-activated.
    /// The variables are removed, so a child process never takes them for its own.
    public static func listenDescriptors() -> [Int32]? {
        guard let pid = getenv("LISTEN_PID"), Int32(String(cString: pid)) == getpid(),
              let fds = getenv("LISTEN_FDS"), let count = Int32(String(cString: fds)), count > 0 else {
            return nil
        }
        unsetenv("LISTEN_PID")
        unsetenv("LISTEN_FDS")
        unsetenv("LISTEN_FDNAMES")
        return (0..<count).map { 3 + $0 }
    }

    /// Whether a descriptor is a listening Unix stream socket, and its path.
    ///
    /// - Parameter fd: The descriptor.
    /// - Returns: The socket's path (`""` for an unnamed one), or `nil` when it is not one.
    public static func unixListenerPath(_ fd: Int32) -> String? {
        var type: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) == 0 else { return nil }
        #if os(Linux)
        guard type == Int32(SOCK_STREAM.rawValue) else { return nil }
        var listening: Int32 = 0
        length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) == 0, listening != 0 else { return nil }
        #else
        guard type == SOCK_STREAM else { return nil }
        #endif
        var address = sockaddr_un()
        var size = socklen_t(MemoryLayout<sockaddr_un>.size)
        let named = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &size) == 0 }
        }
        guard named, address.sun_family == sa_family_t(AF_UNIX) else { return nil }
        return withUnsafeBytes(of: address.sun_path) { raw in
            String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
    }
}

/// The open-files limit (`RLIMIT_NOFILE`).
public enum DescriptorLimit {
    /// Raises the soft limit to the hard limit (capped where the system caps it).
    ///
    /// - Returns: The soft limit before and after, and the hard limit.
    @discardableResult
    public static func raise() -> (before: UInt64, after: UInt64, hard: UInt64) {
        var limit = rlimit()
        #if os(Linux)
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        #else
        let resource = RLIMIT_NOFILE
        #endif
        guard getrlimit(resource, &limit) == 0 else { return (0, 0, 0) }
        let before = UInt64(limit.rlim_cur)
        var target = limit.rlim_max
        #if canImport(Darwin)
        target = min(target, rlim_t(OPEN_MAX))
        #endif
        if target > limit.rlim_cur {
            var raised = limit
            raised.rlim_cur = target
            if setrlimit(resource, &raised) == 0 { limit = raised }
        }
        return (before, UInt64(limit.rlim_cur), UInt64(limit.rlim_max))
    }

    /// The current soft limit.
    public static var current: UInt64 {
        var limit = rlimit()
        #if os(Linux)
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        #else
        let resource = RLIMIT_NOFILE
        #endif
        guard getrlimit(resource, &limit) == 0 else { return 1024 }
        return UInt64(limit.rlim_cur)
    }
}
