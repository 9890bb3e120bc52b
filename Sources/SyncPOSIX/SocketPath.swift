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

    /// The directory that holds the hubs' default sockets: `$XDG_RUNTIME_DIR/storesync`, else
    /// `$TMPDIR/storesync-UID` (`/tmp` when `TMPDIR` is unset).
    ///
    /// - Returns: The directory's path (it may not exist yet).
    public static func defaultDirectory() -> String {
        if let runtime = environment("XDG_RUNTIME_DIR"), !runtime.isEmpty {
            return join(runtime, "storesync")
        }
        let temp = environment("TMPDIR").flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        return join(temp, "storesync-\(getuid())")
    }

    /// The file name of an app's default socket: `APP.sock`, with every byte of the app's name
    /// other than letters, digits, `-`, `_` and `.` replaced by `_` (so a name is never a path).
    ///
    /// - Parameter app: The app's name (``SyncApp``'s `name`, e.g. `counter`).
    /// - Returns: The file name, e.g. `counter.sock`.
    public static func fileName(forApp app: String) -> String {
        var name = ""
        for scalar in app.unicodeScalars {
            switch scalar {
            case "a"..."z", "A"..."Z", "0"..."9", "-", "_", ".": name.unicodeScalars.append(scalar)
            default: name += "_"
            }
        }
        if name.isEmpty || name.hasPrefix(".") { name = "_" + name }
        return name + ".sock"
    }

    /// The socket path to use: `explicit` (from `--socket`), else `$STORESYNC_SOCKET`, else the
    /// app's default socket in ``defaultDirectory()``: `$XDG_RUNTIME_DIR/storesync/APP.sock`,
    /// else `$TMPDIR/storesync-UID/APP.sock`. Hubs of different apps so never share a default.
    ///
    /// With no app (a client that does not know the hub's app yet), the default is the one hub
    /// socket in that directory when there is exactly one (see ``locate(explicit:app:)`` for the
    /// error when there is none or several), else `hub.sock` there.
    ///
    /// - Parameters:
    ///   - explicit: The path given on the command line, if any.
    ///   - app: The app whose default socket to use, if known.
    /// - Returns: The path.
    public static func resolve(explicit: String? = nil, app: String? = nil) -> String {
        if let explicit, !explicit.isEmpty { return explicit }
        if let value = environment(environmentVariable), !value.isEmpty { return value }
        let directory = defaultDirectory()
        if let app { return join(directory, fileName(forApp: app)) }
        if let only = try? discover(in: directory) { return only }
        return join(directory, "hub.sock")
    }

    /// The socket paths to try: ``resolve(explicit:app:)`` split at commas (`"/run/a.sock,/run/b.sock"`:
    /// hubs on one shared log, tried in turn), empty parts dropped.
    ///
    /// - Parameters:
    ///   - explicit: The path or paths given on the command line, if any.
    ///   - app: The app whose default socket to use, if known.
    /// - Returns: At least one path.
    public static func resolveList(explicit: String? = nil, app: String? = nil) -> [String] {
        split(resolve(explicit: explicit, app: app))
    }

    /// The socket paths a client tries, as ``resolveList(explicit:app:)``, but with no app and
    /// nothing explicit it insists on finding exactly one hub: the one socket in
    /// ``defaultDirectory()``, or the one of several that a hub answers on.
    ///
    /// - Parameters:
    ///   - explicit: The path or paths given with `--socket`, if any.
    ///   - app: The app whose default socket to use, if known.
    /// - Returns: At least one path.
    /// - Throws: ``SystemError`` when no app is known and the directory holds no hub's socket,
    ///   or several that answer, naming them, `--app` and `--socket`.
    public static func locate(explicit: String? = nil, app: String? = nil) throws(SystemError) -> [String] {
        if app != nil || (explicit.map { !$0.isEmpty } ?? false)
            || (environment(environmentVariable).map { !$0.isEmpty } ?? false) {
            return resolveList(explicit: explicit, app: app)
        }
        return [try discover(in: defaultDirectory())]
    }

    /// How to start a hub on `path`, for messages: an app's default socket names its app
    /// (`` `swift run hubd --app todos` ``; the counter is hubd's default app), any other path
    /// `` `swift run hubd` (or `hubd --socket PATH`) ``.
    ///
    /// - Parameter path: The socket path a client tried.
    /// - Returns: The hint, in backquotes.
    public static func startHint(for path: String) -> String {
        let name = String(path.dropFirst(parent(of: path).count + 1))
        guard parent(of: path) == defaultDirectory(), name.hasSuffix(".sock"), name.count > 5 else {
            return "`swift run hubd` (or `hubd --socket \(path)`)"
        }
        let app = String(name.dropLast(5))
        return app == "counter" ? "`swift run hubd`" : "`swift run hubd --app \(app)` (or your app's own hub)"
    }

    /// The one hub socket in `directory`: the only `*.sock` socket there, or the only one of
    /// several that accepts a connection.
    private static func discover(in directory: String) throws(SystemError) -> String {
        var sockets: [String] = []
        if let handle = opendir(directory) {
            while let entry = readdir(handle) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
                }
                guard name.hasSuffix(".sock"), name.count > 5 else { continue }
                let path = join(directory, name)
                var info = stat()
                if lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFSOCK { sockets.append(path) }
            }
            closedir(handle)
        }
        sockets.sort()
        if sockets.count == 1, let only = sockets.first { return only }
        guard !sockets.isEmpty else {
            throw SystemError("no hub is listening in \(directory) (a hub's default socket is \(join(directory, "APP.sock"))); start one with `swift run hubd`, or name the hub with --app NAME or --socket PATH", errno: ENOENT)
        }
        let live = sockets.filter(answers)
        if live.count == 1, let only = live.first { return only }
        let listed = (live.isEmpty ? sockets : live).map { String($0.dropFirst(directory.count + 1)) }.joined(separator: ", ")
        if live.isEmpty {
            throw SystemError("no hub is listening in \(directory): its sockets (\(listed)) are left over from hubs that stopped; start one with `swift run hubd`, or name the hub with --app NAME or --socket PATH", errno: ECONNREFUSED)
        }
        throw SystemError("several hubs listen in \(directory) (\(listed)); choose one with --app NAME (its socket is NAME.sock) or --socket PATH", errno: EEXIST)
    }

    /// Whether something accepts a connection at `path` (the connection is closed at once).
    private static func answers(_ path: String) -> Bool { UnixSocket.isListening(at: path) }

    private static func split(_ resolved: String) -> [String] {
        let parts = resolved.split(separator: ",").map(String.init).filter { !$0.isEmpty }
        return parts.isEmpty ? [resolved] : parts
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

    /// Creates the socket's directory (and missing parents) if it does not exist: mode 0700,
    /// or 0750 with its group set to `group` when the socket is shared with one.
    ///
    /// - Parameters:
    ///   - path: The socket path.
    ///   - group: The group the socket is shared with, if any.
    /// - Throws: ``SystemError`` when a directory cannot be created or a parent is not a directory.
    public static func prepareDirectory(for path: String, group: UInt32? = nil) throws(SystemError) {
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
        guard mkdir(directory, group == nil ? 0o700 : 0o750) == 0 else {
            if currentErrno() == EEXIST { return }
            throw SystemError.lastCall("cannot create the socket directory \(directory)")
        }
        if let group {
            // Owner-only until the group is right; then the group may enter.
            _ = chmod(directory, 0o700)
            guard chown(directory, uid_t.max, group) == 0, chmod(directory, 0o750) == 0 else {
                throw SystemError.lastCall("cannot give the socket directory \(directory) to group \(group)")
            }
        }
    }

    /// Checks that the socket's directory can be trusted: a directory (not a symbolic link),
    /// owned by one of `owners` (the effective user and root, and for a client the hub's user),
    /// and writable by no one else — except a sticky directory owned by root, such as `/tmp`,
    /// where no one can rename or remove another user's socket, and a directory writable by
    /// a group in `sharedGroups` (for the hub, its `--socket-group`; for a client, its own
    /// groups: it trusts the group it was put in, and it checks who serves the socket anyway).
    ///
    /// - Parameters:
    ///   - path: The socket path.
    ///   - owners: The user ids a trusted directory may belong to.
    ///   - sharedGroups: The groups whose write permission is accepted.
    ///   - side: `"hub"` or `"client"`, for the message.
    /// - Throws: ``SystemError`` naming the directory, its owner and mode, and what to do.
    public static func checkDirectory(for path: String, owners: Set<UInt32>, sharedGroups: Set<UInt32> = [],
                                      side: String) throws(SystemError) {
        let directory = parent(of: path)
        var info = stat()
        guard lstat(directory, &info) == 0 else {
            let code = currentErrno()
            if code == ENOENT { return }
            throw SystemError.lastCall("cannot examine the socket directory \(directory)")
        }
        let mode = UInt32(info.st_mode) & 0o7777
        let described = "\(directory) (owner \(Accounts.userName(info.st_uid)), uid \(info.st_uid); mode \(String(mode, radix: 8)))"
        if (info.st_mode & S_IFMT) == S_IFLNK {
            throw SystemError("refusing the socket directory \(described): it is a symbolic link, which another user could point elsewhere; use a real directory (--socket, or $\(environmentVariable))", errno: ELOOP)
        }
        guard (info.st_mode & S_IFMT) == S_IFDIR else {
            throw SystemError("\(directory) exists and is not a directory; choose another --socket path", errno: ENOTDIR)
        }
        let who = side == "hub" ? "the hub's user" : "you"
        guard owners.contains(info.st_uid) else {
            throw SystemError("refusing the socket directory \(described): it belongs to another user, who could put their own socket there and read what is sent; remove it (as its owner or root) or choose a directory owned by \(who) or root with --socket", errno: EPERM)
        }
        let sticky = mode & UInt32(S_ISVTX) != 0
        let otherWrite = mode & 0o002 != 0
        let groupWrite = mode & 0o020 != 0
        if (otherWrite || groupWrite) && !(sticky && info.st_uid == 0) {
            if otherWrite || !(groupWrite && sharedGroups.contains(UInt32(info.st_gid))) {
                throw SystemError("refusing the socket directory \(described): \(otherWrite ? "everyone" : "its group") may write in it, so another user could replace the socket; run chmod go-w \(directory) (or chmod 0700), or choose another --socket path", errno: EPERM)
            }
        }
    }

    /// Where the hub binds its socket before renaming it into place: `PATH.new`, beside it
    /// (only the holder of `PATH.lock` uses it).
    ///
    /// - Parameter path: The socket path.
    /// - Returns: The staging path.
    public static func stagingPath(for path: String) -> String { path + ".new" }

    /// The environment variable naming the user (number or name) a client trusts to serve the
    /// hub's socket besides itself and root, for a hub run by another user (a system service).
    public static let hubUIDVariable = "STORESYNC_HUB_UID"

    /// The users whose hub a client accepts: itself, root, and `$STORESYNC_HUB_UID` if set.
    ///
    /// - Returns: The user ids.
    /// - Throws: ``SystemError`` when `STORESYNC_HUB_UID` names no user.
    public static func trustedOwners() throws(SystemError) -> Set<UInt32> {
        var owners: Set<UInt32> = [geteuid(), 0]
        if let text = environment(hubUIDVariable), !text.isEmpty {
            guard let uid = Accounts.uid(text) else {
                throw SystemError("$\(hubUIDVariable) is \"\(text)\", which is no user on this system; set it to the hub's user name or uid")
            }
            owners.insert(uid)
        }
        return owners
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
