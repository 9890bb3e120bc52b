import Foundation

/// CPU time spent by a process's threads, from `/proc/PID/task/TID/schedstat` (nanoseconds on
/// a CPU, as the scheduler counts them) and each thread's name (`comm`). Linux only; elsewhere
/// empty, and the bench reports no CPU figures.
struct CPUTime {
    /// Nanoseconds on a CPU by thread role: `main` (the process's first thread), or the
    /// thread's name (`storesync-read`, `storesync-write`, …).
    var byRole: [String: UInt64] = [:]

    var total: UInt64 { byRole.values.reduce(0, +) }

    /// Reads every thread of `pid` now.
    static func of(_ pid: Int32) -> CPUTime {
        var time = CPUTime()
        let base = "/proc/\(pid)/task"
        guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: base) else { return time }
        for task in tasks {
            guard let stat = try? String(contentsOfFile: "\(base)/\(task)/schedstat", encoding: .utf8),
                  let first = stat.split(separator: " ").first, let nanoseconds = UInt64(first) else { continue }
            let name = (try? String(contentsOfFile: "\(base)/\(task)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
            let role = task == String(pid) ? "main" : name
            time.byRole[role, default: 0] += nanoseconds
        }
        return time
    }

    /// What was spent between `earlier` and this reading (threads that ended meanwhile are lost).
    func since(_ earlier: CPUTime) -> CPUTime {
        var delta = CPUTime()
        for (role, value) in byRole { delta.byRole[role] = value &- min(value, earlier.byRole[role] ?? 0) }
        return delta
    }
}
