import SyncCore

/// What can go wrong for a replica, each with a message that says what to do.
public enum ReplicaError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No hub could be reached (no socket, connection refused, path too long…).
    case noHub(String)
    /// The hub sent `error` and closed the connection (e.g. `app-mismatch`).
    case hub(WireError)
    /// The hub refused this dispatch (`bad-action` or `rejected`); nothing was sequenced.
    case rejected(WireError)
    /// The connection ended before an answer arrived.
    case disconnected(String)
    /// The hub broke the protocol (bad frame, sequence gap, undecodable action).
    case protocolViolation(String)
    /// This replica's reducer refused an action the hub had accepted: the two run different reducers.
    case diverged(String)

    /// The wire error behind ``hub(_:)`` and ``rejected(_:)``, if any.
    public var wireError: WireError? {
        switch self {
        case .hub(let error), .rejected(let error): error
        default: nil
        }
    }

    /// A one-line explanation.
    public var description: String {
        switch self {
        case .noHub(let message): message
        case .hub(let error): "the hub closed the connection: \(error.rawCode): \(error.message)"
        case .rejected(let error): "\(error.rawCode): \(error.message)"
        case .disconnected(let message): "disconnected: \(message)"
        case .protocolViolation(let message): "protocol violation by the hub: \(message)"
        case .diverged(let message): "replica diverged from the hub: \(message); hub and replica must run the same app version"
        }
    }
}

/// Something that happened on a replica's connection, in order.
public enum ReplicaEvent<Action: Sendable>: Sendable {
    /// The hub sequenced an action (from any replica, this one included) and it was applied here.
    case action(seq: UInt64, origin: Int, id: DispatchID, action: Action, json: JSON)
    /// The hub refused a dispatch of this replica.
    case rejected(id: DispatchID, error: WireError)
    /// The connection ended; no more events follow.
    case disconnected(ReplicaError)
}
