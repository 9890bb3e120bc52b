import SyncCore

/// Where one client connection stands in the protocol.
///
/// The event loop reads and writes; this enum alone says what the connection may do next.
enum ConnectionState: Equatable {
    /// Connected, not attached: `status` and `sync` are answered; `hello` attaches.
    case greeting
    /// Attached as a replica: receives every sequenced action.
    case attached(replica: Int, name: String)
    /// Finished (after an `error`, an end of file, or shutdown): no more input is handled and
    /// no broadcast is added; what is queued is written, then the connection closes, at the
    /// latest at `deadline`.
    case closing(replica: Int?, name: String, deadline: ContinuousClock.Instant)

    /// The replica id, while attached or closing after being attached.
    var replica: Int? {
        switch self {
        case .greeting: nil
        case .attached(let replica, _): replica
        case .closing(let replica, _, _): replica
        }
    }

    /// The name from `hello` ("" when none).
    var name: String {
        switch self {
        case .greeting: ""
        case .attached(_, let name), .closing(_, let name, _): name
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
