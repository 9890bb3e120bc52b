#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Foundation
import SyncCore
import SyncPOSIX
import SyncLocks
import Synchronization

/// The replica's sending side: frames to the hub, from any thread, never blocking the
/// store's dispatch lock on I/O.
///
/// A send appends its frame under a lock. If no write is in progress and nothing is
/// queued, the sender writes the frame itself without blocking (`MSG_DONTWAIT`): one system
/// call, no thread hand-off, so an isolated dispatch is as fast as a direct write. Whatever
/// the socket does not take at once, and every frame sent while a write is in progress, is
/// queued; a writer thread owned by this object drains the queue with blocking writes, as
/// many frames per `write` as are queued. A send within ``burstGapNanoseconds`` of the end of
/// the previous direct write (a burst: a window of dispatches freed at once) is queued too,
/// so the rest of a burst leaves in one `write` instead of one each. Inside
/// ``Replica/withBatchedSends(_:)`` sends only queue, and the batch's end writes them
/// together on the caller's thread, with no hand-off at all.
///
/// Backpressure: past ``maxQueuedBytes`` of backlog, a sender that may wait (`mayWait`) waits
/// until the writer has caught up. The store's terminal may not: it sends while holding the
/// store's dispatch lock, which the replica's reader needs to apply incoming actions, so
/// waiting there could stall both directions until the hub dropped the link. Its backlog is
/// bounded by the replica instead: under the dispatch lock at most
/// ``ReconnectPolicy/maxPendingDispatches`` dispatches are unanswered at once.
final class Upstream: Sendable {
    let fd: Int32
    private let state = Locked<State>(State())
    /// Wakes the writer thread; signalled once per hand-off.
    private let wakeWriter = DispatchSemaphore(value: 0)
    /// Wakes senders waiting for the backlog to shrink.
    private let roomAvailable = DispatchSemaphore(value: 0)
    /// The backlog past which a sender that may wait does.
    let maxQueuedBytes: Int
    /// The largest payload the hub accepts (`max_frame_bytes` from its welcome); a larger
    /// message is refused here, so it costs the sender one refusal instead of the connection.
    let maxPayloadBytes: Int

    private struct State {
        var pending: [UInt8] = []
        /// A sender or the writer thread is writing (or a hand-off to the writer is under way);
        /// new frames go to `pending`, and the descriptor is not closed.
        var busy = false
        /// A sender is writing directly (it set `busy`, and only it may clear it): the writer
        /// thread, woken by a failure meanwhile, must not clear `busy` under it, or
        /// ``closeDescriptor(reason:)`` could close the descriptor during that write.
        var senderWriting = false
        var failure: String?
        /// Set once the descriptor is closed; it may then belong to another file.
        var closed = false
        var writerStarted = false
        /// Senders waiting on `roomAvailable`.
        var waitingForRoom = 0
        /// This side asked to close (``closeLocally()``), as opposed to the hub going away.
        var closedLocally = false
        /// When the last direct write ended (monotonic nanoseconds): a send soon after it is
        /// part of a burst, and goes to the writer thread with the rest of the burst.
        var lastDirectEnd: UInt64 = 0
        /// Open ``withBatchedSends(_:)`` scopes: while there is one, a send only queues its
        /// frame (up to ``corkLimitBytes``), and the scope's end writes the queue at once.
        var corks = 0
    }

    /// Past this much queued, a send inside a batch is handled as if there were none (the
    /// writer thread takes the queue), so a batch never holds more than this back.
    static let corkLimitBytes = 64 << 10

    /// Sends closer than this to the end of the previous direct write are a burst: the
    /// first is written at once, the rest are handed to the writer thread, which writes them
    /// together (one system call for many dispatches; an isolated dispatch never waits).
    static let burstGapNanoseconds: UInt64 = 5_000

    private static func monotonicNow() -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
    }

    init(fd: Int32, maxPayloadBytes: Int, maxQueuedBytes: Int = 8 << 20) {
        self.fd = fd
        self.maxPayloadBytes = maxPayloadBytes
        self.maxQueuedBytes = maxQueuedBytes
    }

    /// What became of a message handed to ``send(_:)``.
    enum Outcome: Sendable, Equatable {
        /// Written, or queued for the writer thread.
        case sent
        /// Longer than the hub accepts; nothing was sent and the connection is untouched.
        case tooLarge(WireError)
        /// The connection cannot take writes (it failed, or this side closed it).
        case closed(String)

        /// Why it was not sent, as the error a caller reports; `nil` when sent.
        var failure: ReplicaError? {
            switch self {
            case .sent: nil
            case .tooLarge(let error): .rejected(error)
            case .closed(let reason): .disconnected(reason)
            }
        }
    }

    /// Sends one frame: directly when the line is idle, else through the writer thread.
    ///
    /// - Parameters:
    ///   - message: The message.
    ///   - mayWait: Whether the caller may wait while more than ``maxQueuedBytes`` are queued
    ///     (never under the store's dispatch lock).
    /// - Returns: Whether it was sent; a message longer than the hub's limit is refused here.
    @discardableResult
    func send(_ message: ClientMessage, mayWait: Bool = false) -> Outcome {
        let frame: [UInt8]
        do throws(FrameError) {
            frame = try Frame.encode(message)
        } catch {
            return .tooLarge(WireError(.frameTooLarge, "the message does not fit one frame (\(error.description)); split the action"))
        }
        guard frame.count - Frame.headerSize <= maxPayloadBytes else {
            return .tooLarge(WireError(.frameTooLarge, "the message is \(frame.count - Frame.headerSize) bytes, more than the hub's limit of \(maxPayloadBytes) bytes (its --max-frame-bytes); nothing was sent — split the action or raise the hub's limit"))
        }
        return sendFrame(frame, mayWait: mayWait).map { .closed($0) } ?? .sent
    }

    /// Sends a `dispatch`, its envelope written around the action's canonical bytes
    /// (``Frame/encodeDispatch(id:action:)``); see ``send(_:mayWait:)``.
    ///
    /// - Parameters:
    ///   - id: The dispatch id.
    ///   - action: The action.
    ///   - mayWait: Whether the caller may wait while the queue is full.
    /// - Returns: Whether it was sent.
    @discardableResult
    func sendDispatch(id: DispatchID, action: WireAction, mayWait: Bool = false) -> Outcome {
        let frame: [UInt8]
        do throws(FrameError) {
            frame = try Frame.encodeDispatch(id: id, action: action)
        } catch {
            return .tooLarge(WireError(.frameTooLarge, "the message does not fit one frame (\(error.description)); split the action"))
        }
        guard frame.count - Frame.headerSize <= maxPayloadBytes else {
            return .tooLarge(WireError(.frameTooLarge, "the message is \(frame.count - Frame.headerSize) bytes, more than the hub's limit of \(maxPayloadBytes) bytes (its --max-frame-bytes); nothing was sent — split the action or raise the hub's limit"))
        }
        return sendFrame(frame, mayWait: mayWait).map { .closed($0) } ?? .sent
    }

    /// Sends an encoded frame; returns `nil`, or why the connection cannot take writes.
    private func sendFrame(_ frame: [UInt8], mayWait: Bool) -> String? {
        enum Plan { case failed(String), direct, queued(wake: Bool, wait: Bool) }
        let now = Self.monotonicNow()
        let plan = state.withLock { state -> Plan in
            if let failure = state.failure { return .failed(failure) }
            if state.corks > 0, !state.busy, state.pending.count + frame.count <= Self.corkLimitBytes {
                // Inside a batch: written with the rest when the batch ends.
                state.pending.append(contentsOf: frame)
                return .queued(wake: false, wait: false)
            }
            if !state.busy && state.pending.isEmpty && now &- state.lastDirectEnd > Self.burstGapNanoseconds {
                state.busy = true
                state.senderWriting = true
                return .direct
            }
            state.pending.append(contentsOf: frame)
            let wait = mayWait && state.pending.count > maxQueuedBytes
            if wait { state.waitingForRoom += 1 }
            if !state.busy {
                state.busy = true
                return .queued(wake: true, wait: wait)
            }
            return .queued(wake: false, wait: wait)
        }
        switch plan {
        case .failed(let failure):
            return failure
        case .direct:
            return writeDirectly(frame)
        case .queued(let wake, let wait):
            if wake { startWriterAndWake() }
            if wait { roomAvailable.wait() }
            return state.withLock { $0.failure }
        }
    }

    /// Writes `bytes` without blocking, as the sender that set `busy` and `senderWriting`;
    /// what the socket does not take goes to the front of the queue, for the writer thread.
    ///
    /// - Returns: Why the connection cannot take writes, or `nil`.
    private func writeDirectly(_ bytes: [UInt8]) -> String? {
        var written = 0
        var failure: String?
        bytes.withUnsafeBytes { bytes in
            while written < bytes.count {
                switch UnixSocket.write(fd, UnsafeRawBufferPointer(rebasing: bytes[written...]), dontWait: true) {
                case .bytes(let n): written += n
                case .wouldBlock, .endOfFile: return
                case .failed(let code):
                    failure = code == EPIPE || code == ECONNRESET
                        ? "the hub closed the connection" : "write failed: \(SystemError.describe(errno: code))"
                    return
                }
            }
        }
        let end = Self.monotonicNow()
        let handOff = state.withLock { state -> Bool in
            state.senderWriting = false
            state.lastDirectEnd = end
            if let failure, state.failure == nil { state.failure = failure }
            if state.failure != nil {
                state.pending.removeAll()
                state.busy = false
                return false
            }
            if written < bytes.count {
                state.pending.insert(contentsOf: bytes[written...], at: 0)
            }
            if state.pending.isEmpty {
                state.busy = false
                return false
            }
            return true
        }
        if handOff { startWriterAndWake() }
        return failure
    }

    /// Opens a batch: until the matching ``endBatch()``, sends queue their frames instead of
    /// writing them (see ``Replica/withBatchedSends(_:)``).
    func beginBatch() {
        state.withLock { $0.corks += 1 }
    }

    /// Closes a batch; the last one open writes what the batches queued, in one system call
    /// when the socket takes it all.
    func endBatch() {
        let queued = state.withLock { state -> [UInt8]? in
            state.corks -= 1
            guard state.corks == 0, !state.busy, !state.pending.isEmpty, state.failure == nil else { return nil }
            state.busy = true
            state.senderWriting = true
            defer { state.pending.removeAll(keepingCapacity: true) }
            return state.pending
        }
        if let queued { _ = writeDirectly(queued) }
    }

    private func startWriterAndWake() {
        let start = state.withLock { state -> Bool in
            defer { state.writerStarted = true }
            return !state.writerStarted
        }
        if start {
            let thread = Thread { [self] in
                setCurrentThreadName("storesync-write")   // for top -H, perf and /proc
                writerLoop()
            }
            thread.name = "storesync-write"
            thread.start()
        }
        wakeWriter.signal()
    }

    /// Drains `pending` with blocking writes; sleeps while there is nothing to write.
    private func writerLoop() {
        while true {
            wakeWriter.wait()
            while true {
                let (batch, exit) = state.withLock { state -> ([UInt8], Bool) in
                    if state.failure != nil || state.pending.isEmpty {
                        // A direct sender still writing owns `busy`; it clears it when done.
                        if !state.senderWriting { state.busy = false }
                        state.pending.removeAll()
                        return ([], state.failure != nil)
                    }
                    defer { state.pending.removeAll(keepingCapacity: true) }
                    return (state.pending, false)
                }
                if batch.isEmpty {
                    releaseWaitingSenders()
                    if exit { return }
                    break
                }
                var failure: String?
                do throws(SystemError) {
                    try UnixSocket.writeAll(fd, batch)
                } catch {
                    failure = error.message
                }
                if let failure { fail(failure) }
                releaseWaitingSenders()
            }
        }
    }

    /// Wakes every sender waiting for room (the backlog was just written, or the link failed).
    private func releaseWaitingSenders() {
        let waiting = state.withLock { state -> Int in
            defer { state.waitingForRoom = 0 }
            return state.waitingForRoom
        }
        for _ in 0..<waiting { roomAvailable.signal() }
    }

    /// Marks the connection closed for writing; queued frames are dropped.
    func fail(_ reason: String) {
        let wake = state.withLock { state -> Bool in
            if state.failure == nil { state.failure = reason }
            return state.writerStarted
        }
        // The writer thread wakes, finds the failure, releases waiting senders and exits.
        if wake { wakeWriter.signal() }
        releaseWaitingSenders()
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
        fail(reason)
        // A blocking write in flight (the writer thread's) fails at once on a shut-down socket.
        shutdown()
        while true {
            let done = state.withLock { state -> Bool in
                guard !state.busy else { return false }
                if !state.closed {
                    state.closed = true
                    UnixSocket.close(fd)
                }
                return true
            }
            if done { return }
            // A write in flight on a failed or shut-down socket returns promptly.
            sched_yield()
        }
    }

    /// Fails further sends because this side is closing, and remembers that it was this side.
    func closeLocally() {
        state.withLock { $0.closedLocally = true }
        fail("the replica was closed")
    }

    /// Whether ``closeLocally()`` was called.
    var closedLocally: Bool { state.withLock { $0.closedLocally } }
}
