import SyncCore
import SyncPOSIX

/// Who a connection attached as: the replica id the hub gave it, the name from its `hello`
/// (`""` when none) and its session, if it named one.
struct Attachment: Equatable {
    /// The replica id.
    let replica: Int
    /// The name from `hello` (`""`: none).
    let name: String
    /// The session from `hello`.
    let session: String?
    /// The fingerprint its `hello` named (`nil`: none, a generic client).
    var fingerprint: String? = nil
    /// How many upgrades the history had gone through when it attached: a dispatch from a
    /// connection attached under an earlier version is refused `app-outdated`.
    var version = 0
}

/// Where one client connection stands in the protocol. This enum alone says what the
/// connection may do next: no flag beside it says otherwise.
enum ConnectionPhase: Equatable {
    /// Connected, not attached: `status`, `sync` and `history` are answered; `hello` attaches.
    case greeting
    /// Attached as a replica: its frames are handled, and from its `welcome` on it receives
    /// every sequenced action.
    case attached(Attachment)
    /// Attached with a resume point past this hub's applied seq (a shared log): its welcome,
    /// and its later frames, wait until the hub catches up, or fail at `deadline`.
    case awaitingCatchUp(Attachment, resume: ResumePoint, deadline: ContinuousClock.Instant)
    /// Said `hello` as a replica of a newer version than the history's, which the hub
    /// carries: held (told `waiting`) until the history is upgraded to it, then attached. Its
    /// later frames wait.
    case awaitingUpgrade(HelloRequest)
    /// Its input is over (it ended it, or sent a frame the hub refuses): nothing more is read
    /// or handled, and it is torn down once every request it made before is answered.
    case ending(Attachment?)
    /// Torn down: nothing more is read, handled or broadcast to it; what is queued is
    /// written, then it closes, at the latest at `deadline`.
    case closing(Attachment?, deadline: ContinuousClock.Instant)

    /// Who it attached as, in any phase after `hello`.
    var attachment: Attachment? {
        switch self {
        case .greeting, .awaitingUpgrade: nil
        case .attached(let attachment), .awaitingCatchUp(let attachment, _, _): attachment
        case .ending(let attachment), .closing(let attachment, _): attachment
        }
    }

    /// Whether it is torn down.
    var isClosing: Bool {
        if case .closing = self { return true }
        return false
    }

    /// Whether its input is over (ending or closing): no frame is read or handled.
    var inputOver: Bool {
        switch self {
        case .ending, .closing: true
        case .greeting, .attached, .awaitingCatchUp, .awaitingUpgrade: false
        }
    }

    /// The same connection, torn down, closing by `deadline`.
    func closing(by deadline: ContinuousClock.Instant) -> ConnectionPhase {
        .closing(attachment, deadline: deadline)
    }
}

/// What a connection has sent that is not handled yet, and how its input is timed.
struct ConnectionInput {
    /// Frames being reassembled from what was read.
    var decoder: FrameDecoder
    /// The client closed (or half-closed) its side; frames already buffered are still handled
    /// (not the phase `ending`, which is the hub ending the connection).
    var peerClosed = false
    /// Frames may be buffered that were not handled yet: the per-pass frame budget ran out,
    /// or frames were held back while the sequencer settles or the welcome waits.
    var moreFrames = false
    /// When the connection was accepted or last sent a complete frame (for `--idle-timeout`).
    var lastFrameAt: ContinuousClock.Instant
    /// Since when bytes of an incomplete frame have been buffered (`nil`: none).
    var partialSince: ContinuousClock.Instant?
}

/// One client connection, as the ``HubCore`` keeps it: its descriptor (as its identity),
/// who is at the other end, its ``ConnectionPhase``, its input and what it is owed
/// (``output``). Only the loop thread touches it.
///
/// Its hot stored properties are `@exclusivity(unchecked)`, each with its line of proof: see
/// ``HubLoop``'s note on exclusivity.
final class Connection {
    /// Its descriptor: the reactor's handle on it, unique while it is open.
    let fd: Int32
    /// Where it stands.
    // Unchecked: read by every dispatch (the origin's name); its `didSet` sets only this connection's derived flags.
    @exclusivity(unchecked) var phase: ConnectionPhase = .greeting {
        didSet {
            isClosing = phase.isClosing
            attachedReplica = phase.isClosing ? nil : phase.attachment?.replica
            switch phase {
            case .greeting, .attached: takesFrames = true
            case .awaitingCatchUp, .awaitingUpgrade, .ending, .closing: takesFrames = false
            }
            switch phase {
            case .awaitingCatchUp, .awaitingUpgrade: isAwaitingCatchUp = true
            default: isAwaitingCatchUp = false
            }
        }
    }
    /// Whether its frames are handled now (greeting or attached), derived when the phase is
    /// set (read per frame).
    // Unchecked: read for every frame; set only by `phase`'s `didSet`.
    @exclusivity(unchecked) private(set) var takesFrames = true
    /// Whether its welcome waits, for the hub to catch up or for an upgrade (derived as
    /// ``takesFrames`` is): it is still read, to notice its end.
    private(set) var isAwaitingCatchUp = false
    /// `phase.isClosing`, derived when the phase is set: the per-frame and per-pass paths
    /// read it without copying the phase (an enum holding strings).
    // Unchecked: read for every event and answer; set only by `phase`'s `didSet`.
    @exclusivity(unchecked) private(set) var isClosing = false
    /// The replica id while attached and not torn down (derived as ``isClosing`` is; read
    /// per dispatch).
    // Unchecked: read for every frame and dispatch; set only by `phase`'s `didSet`.
    @exclusivity(unchecked) private(set) var attachedReplica: Int?
    /// Who connected (`SO_PEERCRED` / `getpeereid`).
    let peer: PeerCredentials
    /// The digest comparison it last reported in a `status` while attached (shown in
    /// `status.replicas`, never acted on).
    var reportedCheck: DigestCheck?
    /// When the hub accepted it, as a count that only grows (1 for the first connection of
    /// the hub's run): of two connections with one session, the one with the higher value is
    /// the newer and keeps the session, whichever says `hello` last.
    let acceptOrder: UInt64
    /// What it sent that is not handled yet.
    // Unchecked: every frame is decoded where it lies in it (`decodeNext`'s closure runs `HubProtocol`, pure, which never reaches a connection).
    @exclusivity(unchecked) var input: ConnectionInput
    /// Its requests in the hub's pipeline, not yet answered (an answer that could go at once
    /// waits behind them, so the connection's answers keep their order).
    // Unchecked: counted for every request; only assigned.
    @exclusivity(unchecked) var answersWaiting = 0
    /// What is owed to it.
    // Unchecked: every answer is queued and every write consumed through mutating `ConnectionOutput` methods, which call no code that reaches a connection.
    @exclusivity(unchecked) var output = ConnectionOutput()
    /// The core's last write pass that visited it (each visits a connection once).
    var writePass: UInt64 = 0
    /// Its session's entry in the session table, once attached with a session.
    // Unchecked: read by every dispatch; only assigned.
    @exclusivity(unchecked) var session: SessionEntry?

    /// Creates the connection the hub just accepted.
    ///
    /// - Parameters:
    ///   - fd: Its descriptor.
    ///   - maxFrameBytes: The largest frame it may send (`--max-frame-bytes`).
    ///   - peer: Who connected.
    ///   - acceptOrder: Its place in the order of accepted connections (see ``acceptOrder``).
    ///   - now: When it was accepted.
    init(fd: Int32, maxFrameBytes: Int, peer: PeerCredentials, acceptOrder: UInt64, now: ContinuousClock.Instant) {
        self.fd = fd
        self.input = ConnectionInput(decoder: FrameDecoder(maxPayloadBytes: maxFrameBytes), lastFrameAt: now)
        self.peer = peer
        self.acceptOrder = acceptOrder
    }

    /// For logs: `replica 3 (alice)` or `client (not attached, …)`, the name escaped.
    var label: String {
        guard let attachment = phase.attachment else { return "client (not attached, uid \(peer.uid), pid \(peer.pid))" }
        return attachment.name.isEmpty ? "replica \(attachment.replica)"
            : "replica \(attachment.replica) (\(ControlCharacters.escaped(attachment.name)))"
    }
}
