#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// An open directory: files inside it are opened, renamed and removed relative to its
/// descriptor (`openat`, `renameat`, `unlinkat`), and its entries made durable with one
/// `fsync` of the held descriptor.
///
/// The hub holds one for its data directory, so writing the journal never needs a new
/// descriptor for the directory itself, and a directory renamed or replaced under it cannot
/// redirect its writes. Owned by one thread; ``close()`` once.
public final class DirectoryHandle {
    /// The directory's path, for messages.
    public let path: String
    /// The directory's descriptor (`O_DIRECTORY`, close-on-exec).
    public let fd: Int32

    /// Opens a directory.
    ///
    /// - Parameter path: The directory.
    /// - Throws: ``SystemError`` naming the path.
    public init(_ path: String) throws(SystemError) {
        let fd = Glibc_openDirectory(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw SystemError.lastCall("cannot open the directory \(path)") }
        self.path = path
        self.fd = fd
    }

    /// Closes the descriptor.
    public func close() { _ = Glibc_close(fd) }

    /// The path of an entry, for messages.
    ///
    /// - Parameter name: The entry's name.
    /// - Returns: `path/name`.
    public func pathOf(_ name: String) -> String { path.hasSuffix("/") ? path + name : path + "/" + name }

    /// Opens (with `O_CREAT`, creates) an entry, close-on-exec and never through a symbolic link.
    ///
    /// - Parameters:
    ///   - name: The entry's name.
    ///   - flags: `open(2)` flags; `O_CLOEXEC | O_NOFOLLOW` are added.
    ///   - mode: The mode of a created file.
    /// - Returns: The descriptor.
    /// - Throws: ``SystemError`` naming the file.
    public func open(_ name: String, _ flags: Int32, mode: mode_t = 0o600) throws(SystemError) -> Int32 {
        let fd = openat(self.fd, name, flags | O_CLOEXEC | O_NOFOLLOW, mode)
        guard fd >= 0 else { throw SystemError.lastCall("cannot open \(pathOf(name))") }
        return fd
    }

    /// Renames an entry within the directory.
    ///
    /// - Throws: ``SystemError``.
    public func rename(_ from: String, to: String) throws(SystemError) {
        guard renameat(fd, from, fd, to) == 0 else {
            throw SystemError.lastCall("cannot rename \(pathOf(from)) to \(pathOf(to))")
        }
    }

    /// Removes an entry, ignoring a missing one.
    public func remove(_ name: String) { _ = unlinkat(fd, name, 0) }

    /// Makes the directory's entries (created, renamed, removed files) durable.
    ///
    /// - Throws: ``SystemError``.
    public func sync() throws(SystemError) { try FileSystem.sync(fd, path: path) }

    /// The size of an entry, or `nil` when it cannot be read.
    public func size(_ name: String) -> Int? {
        var info = stat()
        guard fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { return nil }
        return Int(info.st_size)
    }

    /// Whether an entry exists (symbolic links count, unfollowed).
    public func exists(_ name: String) -> Bool {
        var info = stat()
        return fstatat(fd, name, &info, AT_SYMLINK_NOFOLLOW) == 0
    }

    /// The names in the directory (without `.` and `..`).
    ///
    /// - Throws: ``SystemError``.
    public func list() throws(SystemError) -> [String] { try FileSystem.list(path) }

    /// Reads a whole entry.
    ///
    /// - Throws: ``SystemError``.
    public func read(_ name: String) throws(SystemError) -> [UInt8] {
        let fd = try open(name, O_RDONLY)
        defer { _ = Glibc_close(fd) }
        return try FileSystem.readAll(fd, path: pathOf(name))
    }

    /// Writes an entry atomically: a temporary file (created exclusively, never through a
    /// link), written and fsynced, renamed into place, then the directory fsynced.
    ///
    /// - Parameters:
    ///   - name: The entry.
    ///   - bytes: Its new contents.
    /// - Throws: ``SystemError``; the old entry is then untouched.
    public func writeAtomically(_ name: String, _ bytes: [UInt8]) throws(SystemError) {
        let temporary = name + ".tmp"
        let fd: Int32
        do throws(SystemError) {
            fd = try open(temporary, O_WRONLY | O_CREAT | O_EXCL)
        } catch where error.errno == EEXIST {
            // Left by a crash mid-write: never followed, removed, then created afresh.
            remove(temporary)
            fd = try open(temporary, O_WRONLY | O_CREAT | O_EXCL)
        }
        do throws(SystemError) {
            try FileSystem.writeAll(fd, bytes, path: pathOf(temporary))
            try FileSystem.sync(fd, path: pathOf(temporary))
        } catch {
            _ = Glibc_close(fd)
            remove(temporary)
            throw error
        }
        _ = Glibc_close(fd)
        do throws(SystemError) {
            try rename(temporary, to: name)
        } catch {
            remove(temporary)
            throw error
        }
        try sync()
    }
}

@inline(__always) private func Glibc_close(_ fd: Int32) -> Int32 { close(fd) }
@inline(__always) private func Glibc_openDirectory(_ path: String, _ flags: Int32) -> Int32 { open(path, flags) }
