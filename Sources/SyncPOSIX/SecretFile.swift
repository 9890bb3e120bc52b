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

    /// Reads a file that holds a secret, refusing one that other users could read, change or
    /// replace.
    ///
    /// The file must be a regular file (a symbolic link is followed: systemd's
    /// `$CREDENTIALS_DIRECTORY` may hold links) of at most ``maxBytes``, owned by the process's
    /// user or by root, that neither group nor others can read or write. A link on the way must
    /// be owned by the process's user or root too. Every directory that holds the file, or a
    /// link to it, and every directory above those, up to `/`, must be owned by the process's
    /// user or root and writable by no one else, except a root-owned directory with the sticky
    /// bit (`/tmp`), where no other user can rename or remove what is not theirs. This is
    /// OpenSSH's rule for its keys. Its contents are never put into an error message.
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
        let user = geteuid()
        // Links followed by hand, each checked: what is read is the file the checks were made on,
        // by a path no other user can change.
        let walked = walk(path, user: user)
        if let problem = walked.problem {
            throw SystemError("refusing \(what) \(path): \(problem)", errno: EPERM)
        }
        let file = walked.resolved ?? path
        guard lstat(file, &info) == 0 else {
            let code = errno
            throw SystemError("cannot read \(what) \(path): \(SystemError.describe(errno: code))", errno: code)
        }
        guard info.st_mode & S_IFMT == S_IFREG else {
            throw SystemError("cannot read \(what) \(path): it is not a regular file", errno: EINVAL)
        }
        guard info.st_uid == user || info.st_uid == 0 else {
            throw SystemError("refusing \(what) \(path): it is owned by uid \(info.st_uid), not by this process's user (uid \(user)) or root, so its owner can read or replace the secret; chown it to uid \(user) (or root) and chmod 600 it", errno: EPERM)
        }
        guard info.st_mode & 0o077 == 0 else {
            let mode = String(info.st_mode & 0o777, radix: 8)
            throw SystemError("refusing \(what) \(path): other users can read or change it (mode 0\(mode)); chmod 600 it", errno: EPERM)
        }
        guard info.st_size <= off_t(maxBytes) else {
            throw SystemError("refusing \(what) \(path): it is larger than \(maxBytes) bytes", errno: EFBIG)
        }
        return try FileSystem.read(file)
    }

    /// Why the directories and links on the way to a secret file let another user replace
    /// it, if they do.
    ///
    /// - Parameters:
    ///   - path: The file's path as given.
    ///   - user: The process's effective uid.
    /// - Returns: What is wrong and what to do, or `nil`.
    static func placementProblem(_ path: String, user: uid_t) -> String? {
        walk(path, user: user).problem
    }

    /// Follows a path one component at a time, as the kernel would, checking on the way every
    /// directory it passes through (and every directory above where it starts) and every
    /// symbolic link, a link's target being followed by hand.
    ///
    /// - Parameters:
    ///   - path: The file's path as given.
    ///   - user: The process's effective uid.
    /// - Returns: The path it leads to, with no link in it (`nil` when a component does not
    ///   exist, or links loop: reading it then fails with the system's own reason), or what
    ///   is wrong and what to do.
    static func walk(_ path: String, user: uid_t) -> (resolved: String?, problem: String?) {
        var current = "/"
        if !path.hasPrefix("/") {
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            guard getcwd(&buffer, buffer.count) != nil,
                  let directory = buffer.withUnsafeBufferPointer({ $0.baseAddress.map { String(cString: $0) } }) else {
                return (nil, "the current directory cannot be read, so the directories above the file cannot be checked; give its absolute path")
            }
            current = directory
        }
        // The starting directory and every one above it hold what follows.
        var above = current
        while true {
            if let problem = directoryProblem(above, user: user) { return (nil, problem) }
            guard above != "/", let slash = above.lastIndex(of: "/") else { break }
            above = slash == above.startIndex ? "/" : String(above[..<slash])
        }
        var pending = Array(path.split(separator: "/", omittingEmptySubsequences: true).reversed()).map(String.init)
        var links = 0
        while let component = pending.popLast() {
            if component == "." { continue }
            if component == ".." {
                // `current` has no link in it: its parent is where `..` leads, and was checked.
                if let slash = current.lastIndex(of: "/") { current = slash == current.startIndex ? "/" : String(current[..<slash]) }
                continue
            }
            let next = current == "/" ? "/" + component : current + "/" + component
            var info = stat()
            guard lstat(next, &info) == 0 else { return (nil, nil) }
            switch info.st_mode & S_IFMT {
            case S_IFLNK:
                guard info.st_uid == user || info.st_uid == 0 else {
                    return (nil, "the link \(next) is owned by uid \(info.st_uid), who can point it elsewhere; replace it with a link of uid \(user) or root")
                }
                links += 1
                guard links <= 40 else { return (nil, nil) }
                var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                let count = readlink(next, &buffer, buffer.count - 1)
                guard count > 0 else { return (nil, nil) }
                let target = String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
                if target.hasPrefix("/") { current = "/" }
                pending += target.split(separator: "/", omittingEmptySubsequences: true).reversed().map(String.init)
            case S_IFDIR:
                if let problem = directoryProblem(next, user: user) { return (nil, problem) }
                current = next
            default:
                // The file itself: it must be the last component.
                guard pending.isEmpty else { return (nil, nil) }
                current = next
            }
        }
        return (current, nil)
    }

    /// Why another user could replace what a directory holds, if they could.
    private static func directoryProblem(_ directory: String, user: uid_t) -> String? {
        var info = stat()
        guard lstat(directory, &info) == 0 else { return nil }
        if info.st_uid != user && info.st_uid != 0 {
            return "the directory \(directory) above it is owned by uid \(info.st_uid), who can replace the file; keep secrets in a directory of uid \(user) or root (e.g. chmod 700 a directory of your own)"
        }
        let sticky = info.st_mode & S_ISVTX != 0 && info.st_uid == 0
        if info.st_mode & 0o022 != 0 && !sticky {
            let mode = String(info.st_mode & 0o7777, radix: 8)
            return "other users can write to the directory \(directory) above it (mode 0\(mode)) and replace the file; chmod go-w \(directory), or keep the file in a directory only its owner can write"
        }
        return nil
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
