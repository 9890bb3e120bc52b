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

/// Who is at the other end of a Unix socket, as the kernel says (`SO_PEERCRED` on Linux,
/// `getpeereid` and `LOCAL_PEERPID` on Apple platforms): the credentials the peer had when it
/// connected, which it cannot forge.
public struct PeerCredentials: Sendable, Equatable {
    /// The peer's effective user id.
    public var uid: UInt32
    /// The peer's effective group id.
    public var gid: UInt32
    /// The peer's process id (0 when the system does not say).
    public var pid: Int32

    /// Creates credentials.
    ///
    /// - Parameters:
    ///   - uid: The user id.
    ///   - gid: The group id.
    ///   - pid: The process id.
    public init(uid: UInt32, gid: UInt32, pid: Int32) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
    }

    /// The credentials of the peer of a connected Unix socket.
    ///
    /// - Parameter fd: The connected socket.
    /// - Returns: The peer's credentials, or `nil` when the system cannot tell.
    public static func of(_ fd: Int32) -> PeerCredentials? {
        #if os(Linux)
        var uid: UInt32 = 0, gid: UInt32 = 0
        var pid: Int32 = 0
        guard csyncposix_peer_credentials(fd, &uid, &gid, &pid) == 0 else { return nil }
        return PeerCredentials(uid: uid, gid: gid, pid: pid)
        #elseif canImport(Darwin)
        var uid = uid_t()
        var gid = gid_t()
        guard getpeereid(fd, &uid, &gid) == 0 else { return nil }
        var pid: pid_t = 0
        var length = socklen_t(MemoryLayout<pid_t>.size)
        if getsockopt(fd, SOL_LOCAL, LOCAL_PEERPID, &pid, &length) != 0 { pid = 0 }
        return PeerCredentials(uid: uid, gid: gid, pid: pid)
        #else
        return nil
        #endif
    }

    /// The supplementary groups the peer of a connected Unix socket had when it connected, as
    /// the kernel says (`SO_PEERGROUPS`, Linux 4.13 and later).
    ///
    /// - Parameter fd: The connected socket.
    /// - Returns: The group ids, or `nil` when the system cannot tell (older kernels, other
    ///   platforms): then membership comes from the group database instead.
    public static func groups(of fd: Int32) -> [UInt32]? {
        #if os(Linux)
        var capacity = 64
        while capacity <= 65_536 {
            var groups = [UInt32](repeating: 0, count: capacity)
            let count = csyncposix_peer_groups(fd, &groups, Int32(capacity))
            if count >= 0 { return Array(groups.prefix(Int(count))) }
            guard currentErrno() == ERANGE else { return nil }
            capacity *= 4
        }
        return nil
        #else
        return nil
        #endif
    }

    /// The groups of this process: its effective group and its supplementary groups.
    ///
    /// - Returns: The group ids.
    public static func ownGroups() -> Set<UInt32> {
        var groups: Set<UInt32> = [UInt32(getegid())]
        let count = getgroups(0, nil)
        if count > 0 {
            var list = [gid_t](repeating: 0, count: Int(count))
            let got = getgroups(count, &list)
            if got > 0 { for gid in list.prefix(Int(got)) { groups.insert(UInt32(gid)) } }
        }
        return groups
    }

    /// This process's own effective credentials.
    public static var current: PeerCredentials { PeerCredentials(uid: geteuid(), gid: getegid(), pid: getpid()) }
}

/// Users and groups by name or number, through the C library's password and group databases.
public enum Accounts {
    /// A user id from a name or a decimal number.
    ///
    /// - Parameter text: `"storesync"` or `"1001"`.
    /// - Returns: The uid, or `nil` when there is no such user.
    public static func uid(_ text: String) -> UInt32? {
        if let number = UInt32(text) { return number }
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16 << 10)
        guard getpwnam_r(text, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.pw_uid
    }

    /// A group id from a name or a decimal number.
    ///
    /// - Parameter text: `"storesync-clients"` or `"1001"`.
    /// - Returns: The gid, or `nil` when there is no such group.
    public static func gid(_ text: String) -> UInt32? {
        if let number = UInt32(text) { return number }
        var entry = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 64 << 10)
        guard getgrnam_r(text, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.gr_gid
    }

    /// A user's name, or its number as text.
    public static func userName(_ uid: UInt32) -> String {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16 << 10)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil, let name = entry.pw_name else {
            return String(uid)
        }
        return String(cString: name)
    }

    /// Whether a user belongs to a group, as its primary group or a supplementary one.
    ///
    /// - Parameters:
    ///   - uid: The user.
    ///   - primary: The user's primary group as the peer credentials say.
    ///   - gid: The group.
    /// - Returns: Whether the user is a member.
    public static func isMember(uid: UInt32, primary: UInt32, of gid: UInt32) -> Bool {
        if primary == gid { return true }
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16 << 10)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil, let name = entry.pw_name else {
            return false
        }
        #if canImport(Darwin)
        var groups = [Int32](repeating: 0, count: 256)
        var count = Int32(groups.count)
        _ = getgrouplist(name, Int32(bitPattern: primary), &groups, &count)
        return groups.prefix(Int(max(0, count))).contains(Int32(bitPattern: gid))
        #else
        var groups = [gid_t](repeating: 0, count: 256)
        var count = Int32(groups.count)
        _ = getgrouplist(name, primary, &groups, &count)
        return groups.prefix(Int(max(0, count))).contains(gid)
        #endif
    }
}
