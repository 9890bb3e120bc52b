#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Files through the C library, for the hub's data directory: every failure is a
/// ``SystemError`` that names the file and what was being done.
public enum FileSystem {
    /// Opens (and with `O_CREAT`, creates) a file, close-on-exec.
    ///
    /// - Parameters:
    ///   - path: The file.
    ///   - flags: `open(2)` flags; `O_CLOEXEC` is added.
    ///   - mode: The mode of a created file.
    /// - Returns: The descriptor.
    /// - Throws: ``SystemError`` naming the path.
    public static func open(_ path: String, _ flags: Int32, mode: mode_t = 0o600) throws(SystemError) -> Int32 {
        let fd = Glibc_open(path, flags | O_CLOEXEC, mode)
        guard fd >= 0 else { throw SystemError.lastCall("cannot open \(path)") }
        return fd
    }

    /// Writes every byte, retrying short writes and `EINTR`.
    ///
    /// - Parameters:
    ///   - fd: A file descriptor.
    ///   - bytes: The bytes.
    ///   - path: The file's path, for the error message.
    /// - Throws: ``SystemError`` (for example `ENOSPC` on a full disk).
    public static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws(SystemError) {
        var offset = 0
        while offset < bytes.count {
            let n = Glibc_write(fd, bytes.baseAddress.map { $0 + offset }, bytes.count - offset)
            if n > 0 { offset += n; continue }
            if n < 0 && currentErrno() == EINTR { continue }
            throw SystemError.lastCall("cannot write \(path)")
        }
    }

    /// Writes every byte of an array, retrying short writes and `EINTR`.
    ///
    /// - Parameters:
    ///   - fd: A file descriptor.
    ///   - bytes: The bytes.
    ///   - path: The file's path, for the error message.
    /// - Throws: ``SystemError``.
    public static func writeAll(_ fd: Int32, _ bytes: [UInt8], path: String) throws(SystemError) {
        let result: Result<Void, SystemError> = bytes.withUnsafeBytes { raw in
            do throws(SystemError) {
                try writeAll(fd, raw, path: path)
                return .success(())
            } catch {
                return .failure(error)
            }
        }
        try result.get()
    }

    /// Makes a file's data durable (`fsync`; `F_FULLFSYNC` on Apple platforms, where plain
    /// `fsync` does not reach the platter).
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - path: The file's path, for the error message.
    /// - Throws: ``SystemError`` when the data cannot be made durable.
    public static func sync(_ fd: Int32, path: String) throws(SystemError) {
        #if canImport(Darwin)
        if fcntl(fd, F_FULLFSYNC) == 0 { return }
        #endif
        guard fsync(fd) == 0 else { throw SystemError.lastCall("cannot fsync \(path)") }
    }

    /// Makes a directory's entries (created, renamed, removed files) durable.
    ///
    /// - Parameter path: The directory.
    /// - Throws: ``SystemError``.
    public static func syncDirectory(_ path: String) throws(SystemError) {
        let fd = try open(path, O_RDONLY)
        defer { _ = Glibc_close(fd) }
        try sync(fd, path: path)
    }

    /// Reads a whole file.
    ///
    /// - Parameter path: The file.
    /// - Returns: Its bytes.
    /// - Throws: ``SystemError``.
    public static func read(_ path: String) throws(SystemError) -> [UInt8] {
        let fd = try open(path, O_RDONLY)
        defer { _ = Glibc_close(fd) }
        return try readAll(fd, path: path)
    }

    /// Reads everything left in an open file.
    ///
    /// - Parameters:
    ///   - fd: The descriptor.
    ///   - path: The file's path, for the error message.
    /// - Returns: Its bytes.
    /// - Throws: ``SystemError``.
    public static func readAll(_ fd: Int32, path: String) throws(SystemError) -> [UInt8] {
        var result: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc_read(fd, $0.baseAddress, $0.count) }
            if n > 0 { result.append(contentsOf: chunk[0..<n]); continue }
            if n == 0 { return result }
            if currentErrno() == EINTR { continue }
            throw SystemError.lastCall("cannot read \(path)")
        }
    }

    /// Writes a file atomically: a temporary file, written and fsynced, renamed into place,
    /// then the directory fsynced. A crash leaves either the old file or the new one.
    ///
    /// - Parameters:
    ///   - path: The file.
    ///   - bytes: Its new contents.
    /// - Throws: ``SystemError``; the old file is then untouched.
    public static func writeAtomically(_ path: String, _ bytes: [UInt8]) throws(SystemError) {
        let temporary = path + ".tmp"
        let fd: Int32
        do throws(SystemError) {
            fd = try open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW)
        } catch where error.errno == EEXIST {
            // Left by a crash mid-write: never followed, removed, then created afresh.
            _ = unlink(temporary)
            fd = try open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW)
        }
        do throws(SystemError) {
            try writeAll(fd, bytes, path: temporary)
            try sync(fd, path: temporary)
        } catch {
            _ = Glibc_close(fd)
            _ = unlink(temporary)
            throw error
        }
        _ = Glibc_close(fd)
        guard rename(temporary, path) == 0 else {
            let error = SystemError.lastCall("cannot rename \(temporary) to \(path)")
            _ = unlink(temporary)
            throw error
        }
        try syncDirectory(parent(of: path))
    }

    /// Cuts a file to `length` bytes and makes that durable.
    ///
    /// - Parameters:
    ///   - path: The file.
    ///   - length: The new length.
    /// - Throws: ``SystemError``.
    public static func truncate(_ path: String, to length: Int) throws(SystemError) {
        let fd = try open(path, O_WRONLY)
        defer { _ = Glibc_close(fd) }
        guard ftruncate(fd, off_t(length)) == 0 else { throw SystemError.lastCall("cannot truncate \(path)") }
        try sync(fd, path: path)
    }

    /// The names in a directory (without `.` and `..`).
    ///
    /// - Parameter path: The directory.
    /// - Returns: The entry names, unsorted.
    /// - Throws: ``SystemError``.
    public static func list(_ path: String) throws(SystemError) -> [String] {
        guard let directory = opendir(path) else { throw SystemError.lastCall("cannot list \(path)") }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// Creates a directory (mode 0700) unless it exists; a non-directory there is an error.
    ///
    /// - Parameter path: The directory.
    /// - Throws: ``SystemError``.
    public static func makeDirectory(_ path: String) throws(SystemError) {
        var info = stat()
        if stat(path, &info) == 0 {
            guard (info.st_mode & S_IFMT) == S_IFDIR else { throw SystemError("\(path) exists and is not a directory") }
            return
        }
        guard mkdir(path, 0o700) == 0 else {
            if currentErrno() == EEXIST { return }
            throw SystemError.lastCall("cannot create the directory \(path)")
        }
        // The new entry in its parent must survive a power loss too.
        try syncDirectory(parent(of: path))
    }

    /// Whether a file exists.
    ///
    /// - Parameter path: The path.
    /// - Returns: `true` when something is there.
    public static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    /// The size of a file, or `nil` when it cannot be read.
    ///
    /// - Parameter path: The file.
    /// - Returns: Its size in bytes.
    public static func size(_ path: String) -> Int? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return Int(info.st_size)
    }

    /// Removes a file, ignoring a missing one.
    ///
    /// - Parameter path: The file.
    public static func remove(_ path: String) {
        _ = unlink(path)
    }

    /// Takes an exclusive, non-blocking `flock` on `path` (created 0600), held until the
    /// returned descriptor is closed (or the process ends, however it ends).
    ///
    /// - Parameter path: The lock file.
    /// - Returns: The descriptor holding the lock, or `nil` when another process holds it.
    /// - Throws: ``SystemError`` when the file cannot be opened or locked for another reason.
    public static func lockExclusive(_ path: String) throws(SystemError) -> Int32? {
        let fd = try open(path, O_RDWR | O_CREAT | O_NOFOLLOW)
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let code = currentErrno()
            _ = Glibc_close(fd)
            if code == EWOULDBLOCK { return nil }
            throw SystemError("cannot lock \(path): \(SystemError.describe(errno: code))", errno: code)
        }
        return fd
    }

    /// Closes a descriptor, ignoring errors.
    ///
    /// - Parameter fd: The descriptor.
    public static func close(_ fd: Int32) { _ = Glibc_close(fd) }

    /// The directory part of a path ("." for a bare name).
    ///
    /// - Parameter path: A path.
    /// - Returns: Everything before the last `/`.
    public static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}

@inline(__always) private func Glibc_open(_ path: String, _ flags: Int32, _ mode: mode_t) -> Int32 { open(path, flags, mode) }
@inline(__always) private func Glibc_write(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ count: Int) -> Int { write(fd, buffer, count) }
@inline(__always) private func Glibc_read(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int { read(fd, buffer, count) }
@inline(__always) private func Glibc_close(_ fd: Int32) -> Int32 { close(fd) }
