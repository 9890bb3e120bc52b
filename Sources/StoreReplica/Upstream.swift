#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import SyncCore
import SyncPOSIX
import Synchronization

/// The replica's sending side: frames to the hub, coalesced, from any thread.
///
/// Frames are appended to a buffer under a lock; the first thread to find no write in
/// progress becomes the writer and writes everything pending (its own frame and any that
/// others appended meanwhile) in as few `write` calls as possible. Other threads return
/// at once. So a burst of dispatches from many tasks costs a handful of system calls.
final class Upstream: Sendable {
    let fd: Int32
    private let state = Mutex<State>(State())
    private let nextID = Atomic<Int>(1)

    private struct State {
        var pending: [UInt8] = []
        var writing = false
        var failure: String?
        /// Set once the descriptor is closed; it may then belong to another file.
        var closed = false
    }

    init(fd: Int32) { self.fd = fd }

    /// A fresh dispatch id, unique on this connection.
    func makeID() -> DispatchID { .number(nextID.add(1, ordering: .relaxed).oldValue) }

    /// Queues one frame and writes it (and whatever else is queued) unless another thread is writing.
    ///
    /// - Returns: `nil`, or why the connection cannot take writes.
    @discardableResult
    func send(_ message: ClientMessage) -> String? {
        let frame = Frame.encode(message)
        var batch: [UInt8] = state.withLock { state -> [UInt8] in
            if state.failure != nil { return [] }
            state.pending.append(contentsOf: frame)
            if state.writing { return [] }
            state.writing = true
            defer { state.pending.removeAll(keepingCapacity: true) }
            return state.pending
        }
        if batch.isEmpty { return state.withLock { $0.failure } }
        while !batch.isEmpty {
            var failure: String?
            do throws(SystemError) {
                try UnixSocket.writeAll(fd, batch)
            } catch {
                failure = error.message
            }
            batch = state.withLock { state -> [UInt8] in
                if let failure { state.failure = failure }
                if state.failure != nil || state.pending.isEmpty {
                    state.writing = false
                    state.pending.removeAll()
                    return []
                }
                defer { state.pending.removeAll(keepingCapacity: true) }
                return state.pending
            }
        }
        return state.withLock { $0.failure }
    }

    /// Marks the connection closed for writing.
    func fail(_ reason: String) {
        state.withLock { if $0.failure == nil { $0.failure = reason } }
    }

    /// Shuts the socket down both ways (the reader then sees end of file), unless already closed.
    func shutdown() {
        state.withLock { state in
            guard !state.closed else { return }
            #if canImport(Darwin)
            _ = Darwin.shutdown(fd, SHUT_RDWR)
            #else
            _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
            #endif
        }
    }

    /// Closes the descriptor once no write is in flight; later sends fail without touching it.
    func closeDescriptor(reason: String) {
        while true {
            let done = state.withLock { state -> Bool in
                if state.failure == nil { state.failure = reason }
                guard !state.writing else { return false }
                if !state.closed {
                    state.closed = true
                    UnixSocket.close(fd)
                }
                return true
            }
            if done { return }
            // A writer is inside write(2) on a socket already failed or shut down: it returns promptly.
            sched_yield()
        }
    }

    /// Whether ``fail(_:)`` was called because this side closed.
    var closedLocally: Bool { state.withLock { $0.failure == "the replica was closed" } }
}
