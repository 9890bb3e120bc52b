import SyncCore
import SyncPOSIX

/// A blocking, framed connection to a hub: the first step of attaching, and enough for
/// one-shot questions such as `status`.
///
/// Not thread-safe: one owner at a time. ``Replica`` takes it over to attach.
public final class HubConnection {
    /// The socket path.
    public let path: String
    /// Every socket path this connection was asked to try (``path`` among them): hubs of one
    /// shared log. A replica attached over it reconnects to them in turn.
    public private(set) var candidates: [String]
    let fd: Int32
    var decoder = FrameDecoder(maxPayloadBytes: Int(UInt32.max))
    private var open = true

    /// Connects to the hub at `path`.
    ///
    /// The socket's directory must belong to this user or root (or the user named by
    /// `$STORESYNC_HUB_UID`) and be writable by no one else, and the process serving the socket
    /// must run as one of them; anything else is refused before a byte is sent.
    ///
    /// - Parameter path: The socket path.
    /// - Throws: ``ReplicaError/noHub(_:)`` naming the path and what to do.
    public init(path: String) throws(ReplicaError) {
        do {
            fd = try UnixSocket.connect(to: path, trusting: try SocketPath.trustedOwners())
        } catch {
            throw .noHub(error.message)
        }
        self.path = path
        candidates = [path]
    }

    /// Connects to the first hub of `paths` that answers (hubs on one shared log).
    ///
    /// - Parameter paths: Socket paths, tried in order.
    /// - Throws: ``ReplicaError/noHub(_:)`` naming every path tried and why each failed.
    public convenience init(paths: [String]) throws(ReplicaError) {
        guard paths.count > 1, let first = paths.first else {
            try self.init(path: paths.first ?? SocketPath.resolve())
            return
        }
        var reasons: [String] = []
        for path in paths {
            do throws(ReplicaError) {
                try self.init(path: path)
                candidates = paths
                return
            } catch {
                if case .noHub(let message) = error { reasons.append(message) } else { reasons.append(error.description) }
            }
        }
        _ = first
        throw .noHub("no hub answers at any of \(paths.joined(separator: ", ")): " + reasons.joined(separator: "; "))
    }

    deinit { close() }

    /// Closes the connection (idempotent).
    public func close() {
        guard open else { return }
        open = false
        UnixSocket.close(fd)
    }

    /// Gives up ownership of the descriptor without closing it.
    func detachDescriptor() -> Int32 {
        open = false
        return fd
    }

    /// Sends one message.
    ///
    /// - Parameter message: The message.
    /// - Throws: ``ReplicaError/disconnected(_:)`` when the hub has gone.
    public func send(_ message: ClientMessage) throws(ReplicaError) {
        let frame: [UInt8]
        do throws(FrameError) {
            frame = try Frame.encode(message)
        } catch {
            throw .rejected(WireError(.frameTooLarge, "the message does not fit one frame: \(error.description)"))
        }
        do throws(SystemError) {
            try UnixSocket.writeAll(fd, frame)
        } catch {
            // A hub that refuses a connection (too-many-clients, forbidden) says why and closes
            // at once, possibly before this write: its reason is still waiting to be read.
            if let reason = pendingError() { throw .hub(reason) }
            throw .disconnected(error.message)
        }
    }

    /// An `error` the hub sent before closing, if one is waiting to be read.
    private func pendingError() -> WireError? {
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        for _ in 0..<64 {
            if let frame = try? decoder.nextFrame(), let json = try? JSON(parsing: frame),
               case .error(let error)? = try? HubMessage(json: json) {
                return error
            }
            guard UnixSocket.waitUntil(fd, timeoutMilliseconds: 200) else { return nil }
            switch buffer.withUnsafeMutableBytes({ UnixSocket.read(fd, into: $0) }) {
            case .bytes(let count):
                buffer.withUnsafeBytes { decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
            case .wouldBlock:
                continue
            case .endOfFile, .failed:
                return nil
            }
        }
        return nil
    }

    /// Waits for the next message from the hub, skipping message types this library does not
    /// know (the protocol's extension rule).
    ///
    /// - Parameter timeoutMilliseconds: The longest wait (-1: forever).
    /// - Returns: The message.
    /// - Throws: ``ReplicaError`` when the hub closes, times out, or sends something malformed.
    public func receive(timeoutMilliseconds: Int32 = 10_000) throws(ReplicaError) -> HubMessage {
        while true {
            let json = try receiveJSON(timeoutMilliseconds: timeoutMilliseconds)
            let message: HubMessage
            do { message = try HubMessage(json: json) } catch { throw .protocolViolation(error.message) }
            if case .unknown = message { continue }
            return message
        }
    }

    /// Waits for the next message from the hub, as JSON (any type, known or not).
    ///
    /// - Parameter timeoutMilliseconds: The longest wait (-1: forever).
    /// - Returns: The message's JSON.
    /// - Throws: ``ReplicaError`` when the hub closes, times out, or sends something that is not JSON.
    public func receiveJSON(timeoutMilliseconds: Int32 = 10_000) throws(ReplicaError) -> JSON {
        guard let json = try nextJSON(timeoutMilliseconds: timeoutMilliseconds) else {
            throw .disconnected("no answer from the hub at \(path) within \(timeoutMilliseconds) ms; is it a StoreSync hub?")
        }
        return json
    }

    /// The next known message, or `nil` when none came within the time (``receive(timeoutMilliseconds:)``
    /// without the timeout's error, for a caller that waits in slices).
    func nextMessage(timeoutMilliseconds: Int32) throws(ReplicaError) -> HubMessage? {
        while true {
            guard let json = try nextJSON(timeoutMilliseconds: timeoutMilliseconds) else { return nil }
            let message: HubMessage
            do { message = try HubMessage(json: json) } catch { throw .protocolViolation(error.message) }
            if case .unknown = message { continue }
            return message
        }
    }

    /// The next message's JSON, or `nil` when no byte came within the time.
    private func nextJSON(timeoutMilliseconds: Int32) throws(ReplicaError) -> JSON? {
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            let frame: [UInt8]?
            do {
                frame = try decoder.nextFrame()
            } catch {
                throw .protocolViolation(error.description)
            }
            if let frame {
                do { return try JSON(parsing: frame) } catch { throw .protocolViolation(error.description) }
            }
            guard UnixSocket.waitUntil(fd, timeoutMilliseconds: timeoutMilliseconds) else { return nil }
            let result = buffer.withUnsafeMutableBytes { UnixSocket.read(fd, into: $0) }
            switch result {
            case .bytes(let count):
                buffer.withUnsafeBytes { decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
            case .wouldBlock:
                continue
            case .endOfFile:
                throw .disconnected("the hub at \(path) closed the connection")
            case .failed(let code):
                throw .disconnected("reading from \(path): \(SystemError.describe(errno: code))")
            }
        }
    }

    /// Asks the hub for its status.
    ///
    /// - Returns: The status.
    /// - Throws: ``ReplicaError`` when the hub cannot be asked or answers with an error.
    public func status() throws(ReplicaError) -> HubStatus {
        try send(.status())
        switch try receive() {
        case .status(let status): return status
        case .error(let error): throw .hub(error)
        default: throw .protocolViolation("expected a status message")
        }
    }

    /// One page of a `history` reply: the actions `from`…`to` in order, and the hub's seq.
    public struct HistoryPage: Sendable {
        /// The first seq asked for.
        public var from: UInt64
        /// The last seq this page holds (`from - 1` when it holds none); ask again from `to + 1`.
        public var to: UInt64
        /// The hub's seq when it answered.
        public var seq: UInt64
        /// The actions, as `HubMessage.action` values, in seq order.
        public var actions: [HubMessage]
        /// The upgrades within the page, in seq order: at each one's seq the history moved to
        /// a newer app version (there is no action at that seq).
        public var upgrades: [UpgradeNotice] = []
    }

    /// Asks the hub for the sequenced actions `from`…`to` still in its resume window (one
    /// page: at most 4,096 actions or 1 MiB; ask again from the page's `to + 1`).
    ///
    /// - Parameters:
    ///   - from: The first seq (≥ 1).
    ///   - to: The last seq, or `nil` for up to the hub's seq.
    /// - Returns: The page.
    /// - Throws: ``ReplicaError/hub(_:)`` with `history-unavailable` when the hub no longer keeps
    ///   `from` or has not sequenced it (the connection goes on), or with `unknown-type` from a
    ///   hub too old to know `history` (it then closes the connection).
    public func history(from: UInt64, to: UInt64? = nil) throws(ReplicaError) -> HistoryPage {
        try send(.history(from: from, to: to, id: nil))
        while true {
            let json = try receiveJSON()
            switch json["type"]?.stringValue {
            case "history":
                let reply: HistoryReply
                do throws(WireError) {
                    guard case .history(let decoded) = try HubMessage(json: json) else { continue }
                    reply = decoded
                } catch {
                    throw .protocolViolation("a malformed history reply: \(error.message)")
                }
                switch reply.outcome {
                case .refused(let error): throw .hub(error)
                case .actions(let actions):
                    return HistoryPage(from: from, to: reply.to, seq: reply.seq, actions: actions, upgrades: reply.upgrades)
                }
            case "error":
                if case .error(let error)? = try? HubMessage(json: json) { throw .hub(error) }
                throw .protocolViolation("a malformed error message")
            default:
                continue  // another kind of message (an action, a checkpoint): not the answer
            }
        }
    }

    /// Asks the hub to move the history to a newer version of its app (`upgrade`, which needs
    /// no `hello`), and waits for its answer: the upgrade is answered once it is durable.
    ///
    /// A request for the version the history already runs succeeds and changes nothing
    /// (``UpgradeReport/changed`` is false), so it is safe to repeat. With `dryRun` the hub
    /// runs the migration and reports the digest, the size and the replicas it would detach,
    /// and changes nothing. Only the hub's own user and root may ask.
    ///
    /// - Parameters:
    ///   - fingerprint: The version to move to (`name@version`); `nil`: the newest the hub carries.
    ///   - dryRun: Run the migration and report, changing nothing.
    ///   - id: The request's id, echoed in the answer.
    ///   - timeoutMilliseconds: The longest wait for the answer (-1: forever).
    /// - Returns: What the upgrade did (or would do).
    /// - Throws: ``ReplicaError/rejected(_:)`` with `upgrade-refused` (nothing changed: the
    ///   message says why), `not-permitted` or `unavailable`; ``ReplicaError/hub(_:)`` when the
    ///   hub closes the connection with an `error` (`unknown-type` from a hub that predates
    ///   upgrades); ``ReplicaError/disconnected(_:)`` when no answer comes.
    public func upgrade(to fingerprint: String? = nil, dryRun: Bool = false, id: DispatchID = .string("upgrade"),
                        timeoutMilliseconds: Int32 = 300_000) throws(ReplicaError) -> UpgradeReport {
        try send(.upgrade(id: id, to: fingerprint, dryRun: dryRun))
        while true {
            switch try receive(timeoutMilliseconds: timeoutMilliseconds) {
            case .upgrade(let report) where report.id == id:
                return report
            case .reject(let rejected, let error) where rejected == id:
                throw .rejected(error)
            case .error(let error):
                throw .hub(error)
            default:
                continue  // not the answer (nothing else is expected on a connection that did not attach)
            }
        }
    }

    /// Connects, asks for the status, and closes.
    ///
    /// - Parameter path: The socket path.
    /// - Returns: The hub's status.
    /// - Throws: ``ReplicaError`` when no hub answers.
    public static func status(at path: String) throws(ReplicaError) -> HubStatus {
        let connection = try HubConnection(path: path)
        defer { connection.close() }
        return try connection.status()
    }
}
