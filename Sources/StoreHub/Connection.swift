#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import SyncCore

/// Where one client connection stands in the protocol.
///
/// The event loop reads and writes; this enum alone says what the connection may do next.
enum ConnectionState: Equatable {
    /// Connected, not attached: `status` and `sync` are answered; `hello` attaches.
    case greeting
    /// Attached as a replica: receives every sequenced action. With a `session`, its
    /// dispatch ids are de-duplicated across reconnects.
    case attached(replica: Int, name: String, session: String?)
    /// Finished (after an `error`, an end of file, or shutdown): no more input is handled and
    /// no broadcast is added; what is queued is written, then the connection closes, at the
    /// latest at `deadline`.
    case closing(replica: Int?, name: String, deadline: ContinuousClock.Instant)

    /// The replica id, while attached or closing after being attached.
    var replica: Int? {
        switch self {
        case .greeting: nil
        case .attached(let replica, _, _): replica
        case .closing(let replica, _, _): replica
        }
    }

    /// The name from `hello` ("" when none).
    var name: String {
        switch self {
        case .greeting: ""
        case .attached(_, let name, _), .closing(_, let name, _): name
        }
    }

    /// Whether the connection is past handling input.
    var isClosing: Bool {
        if case .closing = self { return true }
        return false
    }

    /// The same connection, closing by `deadline`.
    func closing(by deadline: ContinuousClock.Instant) -> ConnectionState {
        .closing(replica: replica, name: name, deadline: deadline)
    }
}

/// One client connection, owned by the hub's event-loop thread: its descriptor, its input
/// buffer, its protocol state, and what it is owed: a position in the shared ``Backlog`` of
/// sequenced frames plus the messages meant for it alone.
///
/// Output order is exact: a private message queued when the backlog ended at position P is
/// written after the shared frames up to P and before any later one, so `welcome`, `synced`,
/// `reject` and `error` fall between actions exactly where the hub decided.
final class Connection {
    let fd: Int32
    var decoder: FrameDecoder
    var state: ConnectionState = .greeting
    /// The client closed (or half-closed) its side; frames already buffered are still handled.
    var inputEnded = false
    /// The per-pass frame budget ran out with frames possibly still buffered.
    var moreFrames = false
    /// When the connection was accepted or last sent a complete frame (for `--idle-timeout`).
    var lastFrameAt: ContinuousClock.Instant = .now
    /// Since when bytes of an incomplete frame have been buffered (`nil`: none).
    var partialSince: ContinuousClock.Instant?

    /// The position in the backlog of the next shared byte to write to this connection, or
    /// `nil` when it reads no shared frames (not attached, or it fell out of the backlog).
    var cursor: UInt64?
    /// Whether every newly released frame is for this connection (attached). When `false`,
    /// shared frames are written only up to the last private message's gate.
    var follows = false
    /// Private messages, back to back; `outOffset` bytes already written.
    private var out: [UInt8] = []
    private var outOffset = 0
    /// Where private bytes in `out` start waiting for the shared stream: the bytes from
    /// `gates[i].start` (up to the next gate) go out once the stream is written up to
    /// `gates[i].after`.
    private var gates: [(start: Int, after: UInt64)] = []
    private var gateHead = 0

    init(fd: Int32, maxFrameBytes: Int) {
        self.fd = fd
        self.decoder = FrameDecoder(maxPayloadBytes: maxFrameBytes)
    }

    /// Private bytes not yet written.
    var privateBytes: Int { out.count - outOffset }

    /// Queues bytes for this connection alone, after the shared frames up to `after`.
    func queue(_ bytes: [UInt8], after: UInt64) {
        guard !bytes.isEmpty else { return }
        if gateHead == gates.count || gates[gates.count - 1].after != after {
            gates.append((out.count, after))
        }
        out.append(contentsOf: bytes)
    }

    /// Where shared output stops for now, given the backlog's end (`nil`: no shared output).
    func sharedLimit(end: UInt64) -> UInt64? {
        guard let cursor else { return nil }
        if follows { return end }
        return max(cursor, gateHead < gates.count ? gates[gates.count - 1].after : cursor)
    }

    /// Bytes owed to this connection: shared frames up to ``sharedLimit(end:)`` plus private bytes.
    func pendingBytes(end: UInt64) -> Int {
        var shared = 0
        if let cursor, let limit = sharedLimit(end: end) { shared = Int(limit - cursor) }
        return shared + privateBytes
    }

    /// Calls `body` with what is owed, in order, as at most `maxPieces` buffers: shared
    /// ranges pointing into `backlog` and private bytes. A shared range no longer in memory
    /// ends the list.
    func withOutput<R>(backlog: Backlog, maxPieces: Int, _ body: (UnsafeBufferPointer<iovec>) -> R) -> R {
        let end = backlog.end
        return out.withUnsafeBytes { queued in
            var vectors: [iovec] = []
            vectors.reserveCapacity(4)
            var position = cursor
            var stopped = false
            func addShared(_ from: UInt64, _ to: UInt64) {
                if backlog.gather(from: from, to: to, into: &vectors, limit: maxPieces) < to { stopped = true }
            }
            var index = gateHead
            while index < gates.count, !stopped, vectors.count < maxPieces {
                let gate = gates[index]
                if let from = position, from < gate.after {
                    addShared(from, gate.after)
                    position = gate.after
                    if stopped || vectors.count >= maxPieces { break }
                }
                let lower = index == gateHead ? max(gate.start, outOffset) : gate.start
                let upper = index + 1 < gates.count ? gates[index + 1].start : out.count
                if upper > lower, let base = queued.baseAddress {
                    vectors.append(iovec(iov_base: UnsafeMutableRawPointer(mutating: base + lower), iov_len: upper - lower))
                }
                index += 1
            }
            if index == gates.count, !stopped, vectors.count < maxPieces, let from = position,
               let limit = sharedLimit(end: end), from < limit {
                addShared(from, limit)
            }
            return vectors.withUnsafeBufferPointer(body)
        }
    }

    /// Notes that `count` bytes were written, walking the order ``withOutput`` gives.
    func consume(_ count: Int) {
        var left = count
        while left > 0 {
            if gateHead < gates.count {
                let gate = gates[gateHead]
                if let from = cursor, from < gate.after {
                    let step = min(UInt64(left), gate.after - from)
                    cursor = from + step
                    left -= Int(step)
                    continue
                }
                let upper = gateHead + 1 < gates.count ? gates[gateHead + 1].start : out.count
                let step = min(left, upper - outOffset)
                outOffset += step
                left -= step
                if outOffset == upper { gateHead += 1 }
                continue
            }
            guard let from = cursor else { return }
            cursor = from + UInt64(left)
            left = 0
        }
        if outOffset == out.count {
            out.removeAll(keepingCapacity: out.capacity <= 1 << 20)
            outOffset = 0
            gates.removeAll(keepingCapacity: true)
            gateHead = 0
        } else if outOffset >= 1 << 20, outOffset * 2 >= out.count {
            out.removeFirst(outOffset)
            for index in gateHead..<gates.count { gates[index].start -= outOffset }
            gates.removeFirst(gateHead)
            gateHead = 0
            outOffset = 0
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
    func leaveStream(carry: [UInt8]) {
        guard let from = cursor else { return }
        cursor = nil
        follows = false
        // A gate at or before `from` is passed: its bytes (and those of the gates before the
        // first one past `from`) are still owed.
        var cut = out.count
        for index in gateHead..<gates.count where gates[index].after > from {
            cut = gates[index].start
            gates.removeSubrange(index...)
            break
        }
        out.removeSubrange(max(cut, outOffset)...)
        if !carry.isEmpty {
            // `from` is inside a frame, so no private byte was due yet: the carry goes first.
            out.replaceSubrange(outOffset..<outOffset, with: carry)
            for index in gateHead..<gates.count { gates[index].start += carry.count }
            gates.insert((outOffset, from), at: gateHead)
        }
    }

    /// For logs: `replica 3 (alice)` or `client (not attached)`.
    var label: String {
        guard let replica = state.replica else { return "client (not attached)" }
        return state.name.isEmpty ? "replica \(replica)" : "replica \(replica) (\(state.name))"
    }
}
