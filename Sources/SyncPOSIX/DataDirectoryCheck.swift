#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension FileSystem {
    /// Checks that the hub's data directory can be trusted, by the socket directory's rules
    /// (``SocketPath/checkDirectory(for:owners:sharedGroups:side:)``) without their exceptions,
    /// since a data directory is never shared: a real directory (examined with `lstat`, so not a
    /// symbolic link, even when `path` ends in `/`), owned by this process's effective user or
    /// root, and writable by no one else (no group or other write bit, sticky or not).
    ///
    /// - Parameter path: The data directory (it must exist: call after
    ///   ``makeDirectory(_:)``).
    /// - Throws: ``SystemError``, one line saying what is wrong and what to do:
    ///   `refusing the data directory DIR: it is a symbolic link (to TARGET), …; give --data-dir
    ///   the real directory` (`ELOOP`), `…: it is not a directory; …` (`ENOTDIR`),
    ///   `…: it belongs to uid U (NAME), not to this hub's user (uid E, NAME) or root, …; chown -R …`
    ///   (`EPERM`), `…: it is writable by others (mode 0777), …; chmod go-w DIR …` (`by group G`
    ///   when only its group may write; `EPERM`), or `cannot examine the data directory DIR: REASON`
    ///   when `lstat` fails.
    public static func checkPrivateDirectory(_ path: String) throws(SystemError) {
        // `lstat("link/")` follows the link: examine the name itself.
        var examined = path
        while examined.count > 1, examined.hasSuffix("/") { examined.removeLast() }
        var info = stat()
        guard lstat(examined, &info) == 0 else {
            throw SystemError.lastCall("cannot examine the data directory \(path)")
        }
        let refusing = "refusing the data directory \(path)"
        switch info.st_mode & S_IFMT {
        case S_IFDIR:
            break
        case S_IFLNK:
            throw SystemError("\(refusing): it is a symbolic link (to \(linkTarget(examined))), which could be pointed elsewhere; give --data-dir the real directory", errno: ELOOP)
        default:
            throw SystemError("\(refusing): it is not a directory; give --data-dir a directory", errno: ENOTDIR)
        }
        let user = geteuid()
        let owner = UInt32(info.st_uid)
        guard owner == user || owner == 0 else {
            let hubUser = user == 0 ? "root, this hub's user" : "this hub's user (uid \(user), \(Accounts.userName(user))) or root"
            throw SystemError("\(refusing): it belongs to uid \(owner) (\(Accounts.userName(owner))), not to \(hubUser), so its owner could read or replace the journal; chown -R \(Accounts.userName(user)) \(path) (as root), or give --data-dir a directory of the hub's user", errno: EPERM)
        }
        let mode = UInt32(info.st_mode) & 0o7777
        let othersWrite = mode & 0o002 != 0
        let groupWrite = mode & 0o020 != 0
        if othersWrite || groupWrite {
            let who = othersWrite ? "others" : "group \(info.st_gid)"
            throw SystemError("\(refusing): it is writable by \(who) (mode \(octal(mode))), who could replace or remove its files; chmod go-w \(path) (or chmod 0700 \(path)), or give --data-dir another directory", errno: EPERM)
        }
    }

    /// Where a symbolic link points, as stored in it (`?` when it cannot be read).
    private static func linkTarget(_ path: String) -> String {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBufferPointer { bytes -> Int in
            bytes.withMemoryRebound(to: CChar.self) { characters -> Int in
                guard let base = characters.baseAddress else { return -1 }
                return readlink(path, base, characters.count)
            }
        }
        guard count > 0 else { return "?" }
        return String(decoding: buffer.prefix(count), as: UTF8.self)
    }

    /// A mode as four octal digits, e.g. `0777`.
    private static func octal(_ mode: UInt32) -> String {
        let digits = String(mode, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }
}
