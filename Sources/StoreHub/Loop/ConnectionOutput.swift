#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import SyncCore
import SyncPOSIX

/// Bytes that never change once made, in memory that never moves: a gathered write can
/// point into them, and many connections can share one (every full `welcome` at one seq
/// points to the same state bytes).
final class SharedBytes {
    let memory: UnsafeMutableRawBufferPointer

    init(_ bytes: [UInt8]) {
        let memory = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, bytes.count), alignment: 8)
        bytes.withUnsafeBytes { source in
            if let from = source.baseAddress, let into = memory.baseAddress, !source.isEmpty {
                into.copyMemory(from: from, byteCount: source.count)
            }
        }
        self.memory = memory
        count = bytes.count
    }

    /// The number of bytes.
    let count: Int

    deinit { memory.deallocate() }
}

/// What a connection is owed, in order: the shared frames of the ``Backlog`` from its
/// position (``cursor``) on, and private messages for it alone, each gated after the backlog
/// position it was sent at — so a `synced` or `reject` falls exactly between the frames it
/// follows.
///
/// A private message's bytes may be shared: a full `welcome` is its own small prefix, the
/// state's canonical bytes (one reference-counted buffer that every `welcome` at that seq
/// points to, never copied per connection), and a closing brace. Shared bytes are not counted
/// against `--max-queue-bytes`.
struct ConnectionOutput {
    private struct Item {
        /// The backlog position this item waits for.
        let after: UInt64
        let bytes: SharedBytes
        /// Counted against `--max-queue-bytes` (everything but a welcome's state).
        let counted: Bool
    }

    /// The position in the backlog of the next shared byte to write, or `nil` when the
    /// connection reads no shared frames (not attached, or it fell out of the backlog).
    var cursor: UInt64?
    /// Whether every newly released frame is for this connection (attached). When `false`,
    /// shared frames are written only up to the last private message's gate.
    var follows = false
    private var items: [Item] = []
    private var head = 0
    /// Bytes of `items[head]` already written.
    private var offset = 0
    /// Counted private bytes not yet written.
    private(set) var countedBytes = 0
    /// Every private byte ever queued, and ever written (to tell when a welcome is read).
    private(set) var queuedTotal: UInt64 = 0
    private(set) var writtenTotal: UInt64 = 0

    /// Private bytes not yet written (shared ones included).
    var privateBytes: Int { Int(queuedTotal - writtenTotal) }

    /// A deadline on reading: every private byte queued so far (a full `welcome`) must be
    /// written by then (`--welcome-timeout`); `nil` when none is set or it was met.
    private(set) var readDeadline: ContinuousClock.Instant?
    /// The private byte count at which ``readDeadline`` is met.
    private var readDeadlineTotal: UInt64 = 0

    /// Sets ``readDeadline`` on everything queued so far.
    ///
    /// - Parameter deadline: When it must all be written.
    mutating func mustBeRead(by deadline: ContinuousClock.Instant) {
        readDeadline = deadline
        readDeadlineTotal = queuedTotal
    }

    /// Whether the bytes under ``readDeadline`` are not all written by `now`; clears the
    /// deadline once they are.
    ///
    /// - Parameter now: The time.
    /// - Returns: `true` when the deadline passed with bytes still unwritten.
    mutating func missedReadDeadline(now: ContinuousClock.Instant) -> Bool {
        guard let deadline = readDeadline else { return false }
        if writtenTotal >= readDeadlineTotal {
            readDeadline = nil
            return false
        }
        return now >= deadline
    }

    /// Drops ``readDeadline`` (the connection is closing: its own deadline rules).
    mutating func clearReadDeadline() { readDeadline = nil }

    /// Queues bytes for this connection alone, after the shared frames up to `after`.
    ///
    /// - Parameters:
    ///   - bytes: The bytes (copied once).
    ///   - after: The backlog position they follow.
    mutating func queue(_ bytes: [UInt8], after: UInt64) {
        guard !bytes.isEmpty else { return }
        queue(shared: SharedBytes(bytes), after: after, counted: true)
    }

    /// Queues shared bytes for this connection alone, after the shared frames up to `after`.
    ///
    /// - Parameters:
    ///   - bytes: The bytes (not copied).
    ///   - after: The backlog position they follow.
    ///   - counted: Whether they count against `--max-queue-bytes`.
    mutating func queue(shared bytes: SharedBytes, after: UInt64, counted: Bool) {
        guard bytes.count > 0 else { return }
        if head > 32, head * 2 >= items.count {
            items.removeFirst(head)
            head = 0
        }
        items.append(Item(after: after, bytes: bytes, counted: counted))
        queuedTotal += UInt64(bytes.count)
        if counted { countedBytes += bytes.count }
    }

    /// Where the shared stream stopped for this connection (``stopFollowing(at:)``).
    private var stoppedAt: UInt64 = 0

    /// Stops adding newly released shared frames; those up to `end` are still owed.
    ///
    /// - Parameter end: The backlog's end now.
    mutating func stopFollowing(at end: UInt64) {
        follows = false
        stoppedAt = end
    }

    /// Where shared output stops for now, given the backlog's end (`nil`: no shared output).
    func sharedLimit(end: UInt64) -> UInt64? {
        guard let cursor else { return nil }
        if follows { return end }
        return max(cursor, stoppedAt, head < items.count ? items[items.count - 1].after : cursor)
    }

    /// Bytes owed that count against `--max-queue-bytes`: shared frames up to
    /// ``sharedLimit(end:)`` plus counted private bytes.
    func countedPending(end: UInt64) -> Int {
        var shared = 0
        if let cursor, let limit = sharedLimit(end: end) { shared = Int(limit - cursor) }
        return shared + countedBytes
    }

    /// Every byte owed: shared frames up to ``sharedLimit(end:)`` plus every private byte.
    func pending(end: UInt64) -> Int {
        var shared = 0
        if let cursor, let limit = sharedLimit(end: end) { shared = Int(limit - cursor) }
        return shared + privateBytes
    }

    /// Whether anything at all is owed.
    func owesAnything(end: UInt64) -> Bool {
        if head < items.count { return true }
        if let cursor, let limit = sharedLimit(end: end), cursor < limit { return true }
        return false
    }

    /// Calls `body` with what is owed, in order, as at most `maxPieces` buffers: shared
    /// ranges pointing into `backlog` and private bytes. A shared range no longer in memory
    /// ends the list.
    func withOutput<R>(backlog: Backlog, maxPieces: Int, _ body: (UnsafeBufferPointer<iovec>) -> R) -> R {
        var vectors: [iovec] = []
        vectors.reserveCapacity(4)
        var position = cursor
        var stopped = false
        var index = head
        while index < items.count, !stopped, vectors.count < maxPieces {
            let item = items[index]
            if let from = position, from < item.after {
                if backlog.gather(from: from, to: item.after, into: &vectors, limit: maxPieces) < item.after { stopped = true }
                position = item.after
                if stopped || vectors.count >= maxPieces { break }
            }
            let lower = index == head ? offset : 0
            if item.bytes.count > lower, let start = item.bytes.memory.baseAddress {
                vectors.append(iovec(iov_base: start + lower, iov_len: item.bytes.count - lower))
            }
            index += 1
        }
        if index == items.count, !stopped, vectors.count < maxPieces, let from = position,
           let limit = sharedLimit(end: backlog.end), from < limit {
            _ = backlog.gather(from: from, to: limit, into: &vectors, limit: maxPieces)
        }
        return vectors.withUnsafeBufferPointer(body)
    }

    /// Notes that `count` bytes were written, walking the order ``withOutput`` gives.
    mutating func consume(_ count: Int) {
        var left = count
        while left > 0 {
            if head < items.count {
                let item = items[head]
                if let from = cursor, from < item.after {
                    let step = min(UInt64(left), item.after - from)
                    cursor = from + step
                    left -= Int(step)
                    continue
                }
                let step = min(left, item.bytes.count - offset)
                offset += step
                left -= step
                writtenTotal += UInt64(step)
                if item.counted { countedBytes -= step }
                if offset == item.bytes.count {
                    head += 1
                    offset = 0
                }
                continue
            }
            guard let from = cursor else { return }
            cursor = from + UInt64(left)
            left = 0
        }
        if head == items.count {
            items.removeAll(keepingCapacity: items.capacity <= 64)
            head = 0
        }
    }

    /// Leaves the shared stream because its frames from ``cursor`` on are no longer held
    /// (a replica that fell out of the backlog).
    ///
    /// Private messages gated after frames this connection will not get are dropped: they
    /// would name seqs it never saw.
    ///
    /// - Parameter carry: The rest of the frame the connection was half-way through (empty at
    ///   a frame boundary); it is written before anything else, so the stream stays whole.
    mutating func leaveStream(carry: [UInt8]) {
        guard let from = cursor else { return }
        cursor = nil
        follows = false
        stoppedAt = 0
        // An item gated at or before `from` is passed: it is still owed; later ones are dropped.
        var keep = items.count
        for index in head..<items.count where items[index].after > from {
            keep = index
            break
        }
        for index in keep..<items.count {
            let dropped = items[index].bytes.count - (index == head ? offset : 0)
            if items[index].counted { countedBytes -= dropped }
            queuedTotal -= UInt64(dropped)
        }
        if keep == head { offset = 0 }
        items.removeSubrange(keep...)
        if !carry.isEmpty {
            // `from` is inside a frame, so no private byte was due yet: the carry goes first.
            items.insert(Item(after: from, bytes: SharedBytes(carry), counted: true), at: head)
            countedBytes += carry.count
            queuedTotal += UInt64(carry.count)
        }
    }
}
