#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// TCP client connections, for a hub that talks to a server of its replicated log (NATS).
public enum TCPSocket {
    /// Connects to `host:port` within a time limit, trying every address the name resolves to.
    ///
    /// - Parameters:
    ///   - host: A host name or an IP address.
    ///   - port: The port.
    ///   - timeoutMilliseconds: The longest wait for each address.
    /// - Returns: The connected descriptor: non-blocking, close-on-exec, `TCP_NODELAY`, and
    ///   without SIGPIPE on write (write with ``UnixSocket/write(_:_:dontWait:)``).
    /// - Throws: ``SystemError`` naming the address and what failed.
    public static func connect(host: String, port: Int, timeoutMilliseconds: Int32) throws(SystemError) -> Int32 {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        #if os(Linux)
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        #else
        hints.ai_socktype = SOCK_STREAM
        #endif
        var list: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &list)
        guard status == 0, let first = list else {
            let why = status == 0 ? "no address" : String(cString: gai_strerror(status))
            throw SystemError("cannot resolve \(host): \(why)")
        }
        defer { freeaddrinfo(list) }
        var last = SystemError("cannot connect to \(host):\(port)")
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let info = entry {
            entry = info.pointee.ai_next
            #if os(Linux)
            let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue),
                            info.pointee.ai_protocol)
            #else
            let fd = socket(info.pointee.ai_family, info.pointee.ai_socktype, info.pointee.ai_protocol)
            if fd >= 0 {
                _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
                var on: Int32 = 1
                setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &on, socklen_t(MemoryLayout<Int32>.size))
                _ = try? UnixSocket.setNonBlocking(fd)
            }
            #endif
            guard fd >= 0 else {
                last = SystemError.lastCall("cannot create a TCP socket")
                continue
            }
            var result = Glibc_connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen)
            if result != 0, currentErrno() == EINPROGRESS {
                var entry = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                if poll(&entry, 1, timeoutMilliseconds) == 1 {
                    var error: Int32 = 0
                    var length = socklen_t(MemoryLayout<Int32>.size)
                    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
                    result = error == 0 ? 0 : -1
                    if error != 0 { last = SystemError("cannot connect to \(host):\(port): \(SystemError.describe(errno: error))", errno: error) }
                } else {
                    last = SystemError("cannot connect to \(host):\(port): no answer within \(timeoutMilliseconds) ms", errno: ETIMEDOUT)
                    result = -1
                }
            } else if result != 0 {
                last = SystemError.lastCall("cannot connect to \(host):\(port)")
            }
            guard result == 0 else {
                close(fd)
                continue
            }
            var on: Int32 = 1
            setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &on, socklen_t(MemoryLayout<Int32>.size))
            return fd
        }
        throw last
    }

    /// Listens on a loopback address (never any other: a local web page must not be reachable
    /// from the network).
    ///
    /// - Parameters:
    ///   - host: `127.0.0.1`, `localhost` (the same) or `::1`.
    ///   - port: The port; 0 picks a free one.
    /// - Returns: The listening descriptor (non-blocking, close-on-exec) and the port it got.
    /// - Throws: ``SystemError`` for another host, or when the port cannot be bound.
    public static func listenOnLoopback(host: String, port: Int) throws(SystemError) -> (fd: Int32, port: Int) {
        let ipv6: Bool
        switch host {
        case "127.0.0.1", "localhost": ipv6 = false
        case "::1", "[::1]": ipv6 = true
        default: throw SystemError("\(host) is not a loopback address: listen on 127.0.0.1, localhost or ::1")
        }
        guard (0...65_535).contains(port) else { throw SystemError("port \(port) is not from 0 to 65535") }
        #if os(Linux)
        let fd = socket(ipv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        #else
        let fd = socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0)
        if fd >= 0 {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = try? UnixSocket.setNonBlocking(fd)
        }
        #endif
        guard fd >= 0 else { throw SystemError.lastCall("cannot create a TCP socket") }
        var on: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        var result: Int32
        if ipv6 {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = in_port_t(UInt16(port).bigEndian)
            address.sin6_addr = in6addr_loopback
            result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        } else {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr = in_addr(s_addr: UInt32(0x7f00_0001).bigEndian)
            result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        guard result == 0, listen(fd, 64) == 0 else {
            let error = SystemError.lastCall("cannot listen on \(host):\(port)")
            close(fd)
            throw error
        }
        var bound = sockaddr_in6()
        var length = socklen_t(MemoryLayout<sockaddr_in6>.size)
        _ = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        // sin_port and sin6_port sit at the same offset.
        return (fd, Int(UInt16(bigEndian: bound.sin6_port)))
    }
}

@inline(__always) private func Glibc_connect(_ fd: Int32, _ address: UnsafePointer<sockaddr>?, _ length: socklen_t) -> Int32 {
    connect(fd, address, length)
}
