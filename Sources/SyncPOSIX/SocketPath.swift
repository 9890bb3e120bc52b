#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Where the hub's Unix socket lives, and the checks a path must pass.
public enum SocketPath {
    /// The environment variable that names the socket when `--socket` is not given.
    public static let environmentVariable = "STORESYNC_SOCKET"

    /// The longest path `sun_path` holds on this system, in bytes (107 on Linux, 103 on Darwin).
    public static var maxLength: Int {
        MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1
    }

    /// The socket path to use: `explicit` (from `--socket`), else `$STORESYNC_SOCKET`, else
    /// `$XDG_RUNTIME_DIR/storesync/hub.sock`, else `$TMPDIR/storesync-UID/hub.sock`
    /// (`/tmp` when `TMPDIR` is unset).
    ///
    /// - Parameter explicit: The path given on the command line, if any.
    /// - Returns: The path.
    public static func resolve(explicit: String? = nil) -> String {
        if let explicit, !explicit.isEmpty { return explicit }
        if let value = environment(environmentVariable), !value.isEmpty { return value }
        if let runtime = environment("XDG_RUNTIME_DIR"), !runtime.isEmpty {
            return join(runtime, "storesync/hub.sock")
        }
        let temp = environment("TMPDIR").flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        return join(temp, "storesync-\(getuid())/hub.sock")
    }

    /// Checks that `path` fits in `sun_path`.
    ///
    /// - Parameter path: The socket path.
    /// - Throws: ``SystemError`` saying how long it is, the limit, and what to do.
    public static func validate(_ path: String) throws(SystemError) {
        guard !path.isEmpty else { throw SystemError("the socket path is empty; pass --socket PATH") }
        let length = path.utf8.count
        guard length <= maxLength else {
            throw SystemError("socket path is \(length) bytes, longer than the \(maxLength) a Unix socket address holds: \(path) — choose a shorter path with --socket or \(environmentVariable)")
        }
        guard !path.utf8.contains(0) else { throw SystemError("socket path contains a NUL byte") }
    }

    /// Creates the socket's directory (and missing parents) with mode 0700 if it does not exist.
    ///
    /// - Parameter path: The socket path.
    /// - Throws: ``SystemError`` when a directory cannot be created or a parent is not a directory.
    public static func prepareDirectory(for path: String) throws(SystemError) {
        let directory = parent(of: path)
        guard !directory.isEmpty, directory != "/" else { return }
        var info = stat()
        if stat(directory, &info) == 0 {
            guard (info.st_mode & S_IFMT) == S_IFDIR else {
                throw SystemError("\(directory) exists and is not a directory; choose another --socket path")
            }
            return
        }
        try prepareDirectory(for: directory)
        if mkdir(directory, 0o700) != 0 && currentErrno() != EEXIST {
            throw SystemError.lastCall("cannot create the socket directory \(directory)")
        }
    }

    /// The directory part of a path ("." for a bare name).
    ///
    /// - Parameter path: A path.
    /// - Returns: Everything before the last `/`.
    public static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        let head = String(path[..<slash])
        return head.isEmpty ? "/" : head
    }

    private static func join(_ directory: String, _ rest: String) -> String {
        directory.hasSuffix("/") ? directory + rest : directory + "/" + rest
    }

    private static func environment(_ name: String) -> String? {
        guard let value = getenv(name) else { return nil }
        return String(cString: value)
    }
}
