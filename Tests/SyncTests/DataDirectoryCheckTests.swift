import BuiltinApps
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
@testable import StoreHub
import SyncCore
import SyncPOSIX
import Testing

/// What `FileSystem.checkPrivateDirectory` says of `path`: `nil` when it passes.
private func refusal(of path: String) -> SystemError? {
    do throws(SystemError) {
        try FileSystem.checkPrivateDirectory(path)
        return nil
    } catch {
        return error
    }
}

/// A fresh directory from `mkdtemp` under `/tmp`, for one test; remove it with ``removeTree(_:)``.
private func temporaryRoot() throws -> String {
    var template = Array("/tmp/ssdd-XXXXXX".utf8CString)
    let made = template.withUnsafeMutableBufferPointer { buffer -> String? in
        guard let base = buffer.baseAddress, let result = mkdtemp(base) else { return nil }
        return String(cString: result)
    }
    guard let path = made else { throw HarnessError("mkdtemp failed: errno \(errno)") }
    return path
}

/// Removes a test's tree (symbolic links are removed, never followed).
private func removeTree(_ path: String) {
    try? FileManager.default.removeItem(atPath: path)
}

/// A directory with exactly `mode` (whatever the umask), given to `owner` when set.
private func makeTestDirectory(_ path: String, mode: mode_t, owner: uid_t? = nil) throws {
    guard mkdir(path, 0o700) == 0 else { throw HarnessError("mkdir \(path): errno \(errno)") }
    if let owner {
        guard chown(path, owner, gid_t.max) == 0 else { throw HarnessError("chown \(path): errno \(errno)") }
    }
    guard chmod(path, mode) == 0 else { throw HarnessError("chmod \(path): errno \(errno)") }
}

/// A symbolic link at `link` to `target`.
private func makeLink(_ link: String, to target: String) throws {
    guard symlink(target, link) == 0 else { throw HarnessError("symlink \(link): errno \(errno)") }
}

@Suite("The data directory: a real directory of the hub's user (or root) that no one else may write in")
struct DataDirectoryCheckTests {
    @Test("a real 0700 directory of ours passes (also named with a trailing slash, and at 0755); makeDirectory creates one 0700")
    func privateDirectoryPasses() throws {
        let root = try temporaryRoot()
        defer { removeTree(root) }
        let good = root + "/good"
        try makeTestDirectory(good, mode: 0o700)
        #expect(refusal(of: good) == nil, "\(String(describing: refusal(of: good)))")
        #expect(refusal(of: good + "/") == nil)
        let readable = root + "/readable"
        try makeTestDirectory(readable, mode: 0o755)
        #expect(refusal(of: readable) == nil)
        let made = root + "/made"
        try FileSystem.makeDirectory(made)
        var info = stat()
        let examined = lstat(made, &info)
        #expect(examined == 0)
        #expect(UInt32(info.st_mode) & 0o7777 == 0o700)
        #expect(refusal(of: made) == nil)
    }

    @Test("a symbolic link to a good directory is refused, naming its target, with or without a trailing slash")
    func symbolicLinkIsRefused() throws {
        let root = try temporaryRoot()
        defer { removeTree(root) }
        let good = root + "/good"
        try makeTestDirectory(good, mode: 0o700)
        let link = root + "/link"
        try makeLink(link, to: good)
        let error = try #require(refusal(of: link))
        #expect(error.message == "refusing the data directory \(link): it is a symbolic link (to \(good)), which could be pointed elsewhere; give --data-dir the real directory",
                "\(error.message)")
        #expect(error.errno == ELOOP)
        let slashed = try #require(refusal(of: link + "/"))
        #expect(slashed.message.contains("symbolic link"), "\(slashed.message)")
    }

    @Test("a directory everyone may write in (0777, and sticky 1777: no exception) is refused, saying chmod go-w")
    func worldWritableIsRefused() throws {
        let root = try temporaryRoot()
        defer { removeTree(root) }
        let everyone = root + "/everyone"
        try makeTestDirectory(everyone, mode: 0o777)
        let error = try #require(refusal(of: everyone))
        #expect(error.message.hasPrefix("refusing the data directory \(everyone): it is writable by others (mode 0777)"), "\(error.message)")
        #expect(error.message.contains("chmod go-w \(everyone)"), "\(error.message)")
        #expect(error.errno == EPERM)
        let sticky = root + "/sticky"
        try makeTestDirectory(sticky, mode: 0o1777)
        let stickyError = try #require(refusal(of: sticky))
        #expect(stickyError.message.contains("writable by others (mode 1777)"), "\(stickyError.message)")
    }

    @Test("a group-writable directory (0770) is refused: a data directory is never shared")
    func groupWritableIsRefused() throws {
        let root = try temporaryRoot()
        defer { removeTree(root) }
        let shared = root + "/shared"
        try makeTestDirectory(shared, mode: 0o770)
        let error = try #require(refusal(of: shared))
        #expect(error.message.contains("writable by group ") && error.message.contains("(mode 0770)"), "\(error.message)")
    }

    @Test("a file is refused as not a directory")
    func fileIsRefused() throws {
        let root = try temporaryRoot()
        defer { removeTree(root) }
        let file = root + "/file"
        try FileSystem.writeAtomically(file, [1])
        let error = try #require(refusal(of: file))
        #expect(error.message.contains("is not a directory"), "\(error.message)")
    }

    @Test("another user's directory is refused, naming its uid",
          .enabled(if: geteuid() == 0, "needs root to give a directory to another user"))
    func otherUsersDirectoryIsRefused() throws {
        let root = try temporaryRoot()
        defer { removeTree(root) }
        let theirs = root + "/theirs"
        try makeTestDirectory(theirs, mode: 0o700, owner: 65534)
        let error = try #require(refusal(of: theirs))
        #expect(error.message.hasPrefix("refusing the data directory \(theirs): it belongs to uid 65534 ("), "\(error.message)")
        #expect(error.message.contains("not to root, this hub's user"), "\(error.message)")
        #expect(error.errno == EPERM)
    }

    @Test("the file journal refuses a symbolic link before creating anything in it, as a start-up failure (not a data problem)")
    func fileLogRefusesALink() throws {
        let root = try temporaryRoot()
        defer { removeTree(root) }
        let real = root + "/real"
        try makeTestDirectory(real, mode: 0o700)
        let link = root + "/link"
        try makeLink(link, to: real)
        let log = FileLog(directory: link, fingerprint: JSONApp.fingerprint, mode: .batch)
        let failure: StorageError?
        do throws(StorageError) {
            _ = try log.open()
            log.close()
            failure = nil
        } catch {
            failure = error
        }
        let error = try #require(failure)
        #expect(error.message.hasPrefix("refusing the data directory \(link): it is a symbolic link"), "\(error.message)")
        #expect(!error.isDataProblem)
        let entries = try FileSystem.list(real)
        #expect(entries.isEmpty, "\(entries)")
    }

    @Test("--check-data reports a directory the hub would refuse as a warning; --repair refuses it")
    func checkDataReports() throws {
        let root = try temporaryRoot()
        defer { removeTree(root) }
        let data = root + "/data"
        let log = FileLog(directory: data, fingerprint: JSONApp.fingerprint, mode: .batch)
        _ = try log.open()
        log.close()
        guard chmod(data, 0o777) == 0 else { throw HarnessError("chmod \(data): errno \(errno)") }
        let report = DataDirectory.check(data, app: JSONApp(), repair: false)
        #expect(report.healthy, "\(report.lines)")
        #expect(report.lines.first.map { $0.hasPrefix("warning: ") && $0.contains("writable by others") } == true,
                "\(report.lines)")
        let repair = DataDirectory.check(data, app: JSONApp(), repair: true)
        #expect(!repair.healthy)
        #expect(repair.lines.count == 1 && repair.lines.first == refusal(of: data)?.message, "\(repair.lines)")
    }
}

extension MultiProcessTests {
    @Suite("hubd refuses a data directory it cannot trust")
    struct DataDirectoryRefusalTests {
        @Test("hubd --data-dir SYMLINK exits 1 with the refusal on stderr, and touches neither the directory nor the socket")
        func hubdRefusesALink() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let real = fixture.directory + "/real"
            try makeTestDirectory(real, mode: 0o700)
            let link = fixture.directory + "/link"
            try makeLink(link, to: real)
            let hub = try fixture.spawn("hubd", ["--socket", fixture.socket, "--app", "json", "--data-dir", link])
            #expect(try await hub.waitForExit() == 1)
            #expect(hub.errorLines.contains { $0.contains("refusing the data directory \(link): it is a symbolic link (to \(real))") },
                    "\(hub.errorLines)")
            let entries = try FileSystem.list(real)
            #expect(entries.isEmpty, "\(entries)")
            #expect(!FileSystem.exists(fixture.socket))
        }
    }
}
