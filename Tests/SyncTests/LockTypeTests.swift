import Foundation
import Testing

/// Every lock in the package's own code is SyncLocks' `Locked`, which ThreadSanitizer can see
/// (Scripts/tsan-suppressions.txt says why a raw `Mutex` is not). Only `Locked` itself wraps
/// one; the YOUR-APP.md example, which is an app's code, may use the standard `Mutex`.
@Test("no raw Synchronization.Mutex in Sources/, Benchmarks/ or Tests/ outside SyncLocks and the YOUR-APP.md example")
func everyLockIsLocked() throws {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    let allowed: Set<String> = ["Sources/SyncLocks/Locked.swift", "Tests/StoreCoreTests/ReadmeExampleTests.swift",
                                "Tests/SyncTests/LockTypeTests.swift"]
    var offenders: [String] = []
    for folder in ["Sources", "Benchmarks", "Tests"] {
        guard let files = FileManager.default.enumerator(atPath: root.path + "/" + folder) else { continue }
        for case let file as String in files where file.hasSuffix(".swift") {
            let relative = folder + "/" + file
            guard !allowed.contains(relative) else { continue }
            let text = try String(contentsOfFile: root.path + "/" + relative, encoding: .utf8)
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated()
            where !line.trimmingCharacters(in: .whitespaces).hasPrefix("//") && !line.contains("///")
                && (line.contains("Mutex<") || line.contains("Mutex(")) {
                offenders.append("\(relative):\(number + 1): \(line.trimmingCharacters(in: .whitespaces))")
            }
        }
    }
    #expect(offenders.isEmpty, "use SyncLocks' Locked instead of a raw Mutex:\n\(offenders.joined(separator: "\n"))")
}
