#if canImport(Darwin)
import Darwin
#elseif os(Linux)
import CSyncPOSIX
#endif

/// Names the calling thread for the system (`top -H`, `perf`, `/proc/PID/task/TID/comm`, a
/// debugger). `Foundation.Thread.name` does not reach the system on Linux; this does.
///
/// - Parameter name: At most 15 bytes on Linux (longer names are cut).
public func setCurrentThreadName(_ name: String) {
    let bytes = Array(name.utf8.prefix(15)).map { CChar(bitPattern: $0) } + [0]
    bytes.withUnsafeBufferPointer { buffer in
        guard let pointer = buffer.baseAddress else { return }
        #if canImport(Darwin)
        _ = pthread_setname_np(pointer)
        #elseif os(Linux)
        _ = csyncposix_set_thread_name(pointer)
        #endif
    }
}
