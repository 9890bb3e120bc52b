#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The time at the start of a log line: RFC 3339 in UTC with milliseconds,
/// `2026-11-28T12:45:01.123Z` (`hubd --log-timestamps`; journald adds its own).
public enum LogTimestamp {
    /// The current wall-clock time, formatted.
    ///
    /// - Returns: The timestamp.
    public static func now() -> String {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return format(seconds: Int(spec.tv_sec), milliseconds: Int(spec.tv_nsec) / 1_000_000)
    }

    /// The current wall-clock time in milliseconds since 1970-01-01T00:00:00Z (what a hub
    /// stamps a sequenced action with).
    ///
    /// - Returns: The time; 0 on a clock before 1970.
    public static func milliseconds() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return max(0, Int64(spec.tv_sec) &* 1000 &+ Int64(spec.tv_nsec) / 1_000_000)
    }

    /// A time in milliseconds since the Unix epoch, formatted (a stamp's `time`).
    ///
    /// - Parameter milliseconds: The time.
    /// - Returns: The timestamp.
    public static func format(milliseconds: Int64) -> String {
        let (seconds, rest) = milliseconds.quotientAndRemainder(dividingBy: 1000)
        return rest >= 0 ? format(seconds: Int(seconds), milliseconds: Int(rest)) : format(seconds: Int(seconds) - 1, milliseconds: Int(rest) + 1000)
    }

    /// A time, formatted.
    ///
    /// - Parameters:
    ///   - seconds: Seconds since 1970-01-01T00:00:00Z.
    ///   - milliseconds: 0 to 999.
    /// - Returns: The timestamp.
    public static func format(seconds: Int, milliseconds: Int) -> String {
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let millis = max(0, min(999, milliseconds))
        let fraction = millis < 10 ? "00\(millis)" : millis < 100 ? "0\(millis)" : "\(millis)"
        return "\(1900 + Int(parts.tm_year))-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)).\(fraction)Z"
    }

    /// Whether standard error is a terminal (log timestamps are on by default then).
    public static var standardErrorIsTerminal: Bool { isatty(2) == 1 }
}
