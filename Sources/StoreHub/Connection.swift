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
/// and output buffers, and its protocol state.
final class Connection {
    let fd: Int32
    var decoder: FrameDecoder
    /// Bytes queued for this client; `outOffset` of them already written.
    var out: [UInt8] = []
    var outOffset = 0
    var state: ConnectionState = .greeting
    /// The client closed (or half-closed) its side; frames already buffered are still handled.
    var inputEnded = false
    /// The per-pass frame budget ran out with frames possibly still buffered.
    var moreFrames = false
    /// When the connection was accepted or last sent a complete frame (for `--idle-timeout`).
    var lastFrameAt: ContinuousClock.Instant = .now
    /// Since when bytes of an incomplete frame have been buffered (`nil`: none).
    var partialSince: ContinuousClock.Instant?
    /// Where each broadcast batch queued for this replica ends in `out`, with the seq of its
    /// last action: what has been written tells how far behind the replica is.
    private var marks: [(end: Int, seq: UInt64)] = []
    private var markHead = 0
    /// The seq of the last action written to the socket (or queued before attaching).
    private(set) var writtenSeq: UInt64 = 0

    /// Notes that `out` now ends with the actions up to `seq`.
    func markQueued(through seq: UInt64) {
        if pendingBytes == 0 {
            writtenSeq = seq
        } else {
            marks.append((out.count, seq))
        }
    }

    /// Advances ``writtenSeq`` after a write moved `outOffset`.
    func noteWritten() {
        while markHead < marks.count, marks[markHead].end <= outOffset {
            writtenSeq = marks[markHead].seq
            markHead += 1
        }
        if markHead == marks.count {
            marks.removeAll(keepingCapacity: true)
            markHead = 0
        } else if markHead > 64, markHead * 2 >= marks.count {
            // A replica that stays behind: drop the passed marks (amortised O(1) per mark).
            marks.removeFirst(markHead)
            markHead = 0
        }
    }

    /// Drops the first `cut` bytes of `out` (already written).
    func dropWrittenPrefix(_ cut: Int) {
        out.removeFirst(cut)
        outOffset -= cut
        for index in markHead..<marks.count { marks[index].end -= cut }
    }

    init(fd: Int32, maxFrameBytes: Int) {
        self.fd = fd
        self.decoder = FrameDecoder(maxPayloadBytes: maxFrameBytes)
    }

    var pendingBytes: Int { out.count - outOffset }

    /// For logs: `replica 3 (alice)` or `client (not attached)`.
    var label: String {
        guard let replica = state.replica else { return "client (not attached)" }
        return state.name.isEmpty ? "replica \(replica)" : "replica \(replica) (\(state.name))"
    }
}
