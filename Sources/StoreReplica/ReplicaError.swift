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
    /// This replica's state differs from the hub's: its reducer refused an action the hub had
    /// accepted, or its digest at a `checkpoint` differs (a reducer that is not deterministic,
    /// or different code on the two sides). A reconnecting replica heals by re-hydrating.
    case diverged(String)
    /// The calling task was cancelled before the hub's answer came. For a dispatch this ends
    /// only the wait: an action already sent may still be sequenced (its `action` event says
    /// so), exactly once on its session.
    case cancelled
    /// The history runs a newer version of the app than this replica: the hub upgraded it
    /// while this replica was attached (an `upgraded` notice), or refused its `hello`
    /// (`app-outdated`). Terminal: the replica ends and does not reconnect, and each of its
    /// dispatches the hub had not sequenced before the upgrade fails with this error (it was
    /// never applied). Run the newer version of the app (``AppOutdated/historyFingerprint``).
    /// ``wireError`` has the code `app-outdated`.
    case appOutdated(AppOutdated)

    /// The message without the `disconnected: ` prefix a dropped link's reason would repeat.
    var plainMessage: String {
        if case .disconnected(let message) = self { return message }
        return description
    }

    /// Whether this replica's state was found to differ from the hub's.
    var isDivergence: Bool {
        if case .diverged = self { return true }
        return false
    }

    /// The wire error behind ``hub(_:)`` and ``rejected(_:)``, if any.
    public var wireError: WireError? {
        switch self {
        case .hub(let error), .rejected(let error): error
        case .appOutdated(let outdated): outdated.error
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
        case .cancelled: "cancelled: the calling task was cancelled before the hub answered (a dispatch already sent may still be applied)"
        case .appOutdated(let outdated): outdated.error.description
        }
    }

    /// What a dispatch made after the replica ended is refused with: the same typed error
    /// for an outdated replica (its dispatch is never applied), else ``disconnected(_:)``.
    var refusalAfterEnd: ReplicaError {
        if case .appOutdated(let outdated) = self { return .appOutdated(outdated.forDispatch) }
        return .disconnected(description)
    }
}

/// Why a replica is outdated: the history it was attached to moved to a newer version of
/// its app (an `upgraded` notice), or the hub refused its `hello` with `app-outdated`.
///
/// The hub never applies a dispatch of an older version after the upgrade: what this replica
/// dispatched and the hub had not sequenced before the upgrade fails with an `AppOutdated`
/// whose ``notice`` names the upgrade (and the message says the dispatch was never applied).
public struct AppOutdated: Sendable, Equatable {
    /// The fingerprint this replica runs (`name@version`).
    public var fingerprint: String
    /// The upgrade, when this replica was attached and heard of it; `nil` when the hub refused
    /// its `hello` (its message then says which version the history runs).
    public var notice: UpgradeNotice?
    /// What to tell a person, with the code `app-outdated` (the hub's own error, for a refused
    /// `hello`).
    public var error: WireError

    /// Creates the reason.
    ///
    /// - Parameters:
    ///   - fingerprint: The fingerprint this replica runs.
    ///   - notice: The upgrade it heard of, if any.
    ///   - error: The error, code `app-outdated`.
    public init(fingerprint: String, notice: UpgradeNotice?, error: WireError) {
        self.fingerprint = fingerprint
        self.notice = notice
        self.error = error
    }

    /// The reason for a replica of `fingerprint` that heard `notice`: the history moved from
    /// `notice.from` to `notice.to` at `notice.seq`.
    ///
    /// - Parameters:
    ///   - notice: The upgrade.
    ///   - fingerprint: The fingerprint this replica runs.
    /// - Returns: The reason, with a message saying what to run.
    public static func upgraded(_ notice: UpgradeNotice, running fingerprint: String) -> AppOutdated {
        AppOutdated(fingerprint: fingerprint, notice: notice, error: WireError(.appOutdated, "the history was upgraded from \(notice.from) to \(notice.to) at seq \(notice.seq) (digest \(notice.digest)); this replica runs \(fingerprint), so the hub detached it: run version \(notice.to) of the app"))
    }

    /// The fingerprint the history runs now, when known (from the ``notice``).
    public var historyFingerprint: String? { notice?.to }

    /// The same reason, as the failure of a dispatch the hub had not sequenced before the
    /// upgrade (or before refusing the `hello`): it was never applied.
    public var forDispatch: AppOutdated {
        guard !error.message.hasPrefix(Self.dispatchPrefix) else { return self }
        var copy = self
        if let notice {
            copy.error = WireError(.appOutdated, "\(Self.dispatchPrefix) the history was upgraded from \(notice.from) to \(notice.to) at seq \(notice.seq); it was never applied (nor will be): run version \(notice.to) of the app, then dispatch it again if it still applies")
        } else {
            copy.error = WireError(.appOutdated, "\(Self.dispatchPrefix) the hub refused this replica's version (\(fingerprint)); it was never applied (nor will be): \(error.message)")
        }
        return copy
    }

    /// How the message of a dispatch's failure starts.
    private static var dispatchPrefix: String { "this dispatch was not sequenced before" }
}

/// Something that happened on a replica's connection, in order.
public enum ReplicaEvent<Action: Sendable>: Sendable {
    /// The hub sequenced an action (from any replica, this one included) and it was applied
    /// here; `stamp` says when the hub sequenced it and what its origin is called.
    case action(seq: UInt64, origin: Int, id: DispatchID, action: Action, json: JSON, stamp: ActionStamp)
    /// The hub refused a dispatch of this replica.
    case rejected(id: DispatchID, error: WireError)
    /// The connection dropped, is being re-established, or is back (see ``ConnectionChange``).
    case connection(ConnectionChange)
    /// A hub on a shared log stopped taking dispatches because it cannot reach its log
    /// (`available` false, with the reason), or takes them again (`true`).
    /// The link itself is fine: actions already sequenced keep coming, and dispatches made
    /// meanwhile are refused `unavailable` (nothing applied; send them again later).
    case hubLog(available: Bool, reason: String?)
    /// The connection ended for good (closed, reconnection gave up, or the history was
    /// upgraded past this replica's version: ``ReplicaError/appOutdated(_:)``); no more events follow.
    case disconnected(ReplicaError)
}

/// An action the hub sequenced (from any replica, this one included), as applied here; what
/// ``Replica/observeActions(_:)`` reports.
public struct AppliedAction<Action: Sendable>: Sendable {
    /// Its seq.
    public let seq: UInt64
    /// The replica that dispatched it.
    public let origin: Int
    /// The dispatcher's id.
    public let id: DispatchID
    /// The action, decoded.
    public let action: Action
    /// When the hub sequenced it, and its origin's name (metadata the reducer never sees).
    public let stamp: ActionStamp

    /// Creates the report of an applied action.
    ///
    /// - Parameters:
    ///   - seq: Its seq.
    ///   - origin: The dispatching replica.
    ///   - id: The dispatcher's id.
    ///   - action: The action.
    ///   - stamp: When it was sequenced, and its origin's name.
    @inlinable public init(seq: UInt64, origin: Int, id: DispatchID, action: Action, stamp: ActionStamp = .none) {
        self.seq = seq
        self.origin = origin
        self.id = id
        self.action = action
        self.stamp = stamp
    }
}

/// A change in a replica's link to its hub.
public enum ConnectionChange: Sendable, Equatable {
    /// The link dropped; the replica reconnects (per its ``ReconnectPolicy``).
    case dropped(reason: String)
    /// Attempt `attempt` (from 1) to reconnect is starting.
    case reconnecting(attempt: Int)
    /// The link is back and continues the same history from `seq`: nothing was missed, the
    /// actions after `seq` follow in order.
    case resumed(seq: UInt64)
    /// The link is back with a full welcome: the local state was replaced by the hub's state at
    /// `seq` (another history, a gap beyond the hub's backlog, or a hub that lost a tail).
    case rehydrated(seq: UInt64)
    /// This replica's state differed from the hub's at `seq` (a `checkpoint` digest that did not
    /// match, or a sequenced action this replica could not apply): a reducer is not
    /// deterministic, or the two sides run different code. The replica drops the link and
    /// re-hydrates from a full welcome (a ``rehydrated(seq:)`` follows).
    case diverged(seq: UInt64, reason: String)
    /// The hub holds this replica's `hello`: the history runs an older version of the app, and
    /// the hub carries this replica's version, so it attaches once the history is upgraded
    /// (`replica-cli upgrade`); a ``resumed(seq:)`` or ``rehydrated(seq:)`` follows then. Also
    /// reported, once per wait, while a hub that cannot hold it (`app-ahead`) is retried with
    /// the ``ReconnectPolicy``: that notice's `seq` is 0 and its message is the hub's.
    case waiting(WaitingNotice)
}

/// Where a replica's link to its hub stands.
public enum LinkState: Sendable, Equatable {
    /// Attached and receiving.
    case connected
    /// Between a drop and the next welcome; `attempt` counts from 1.
    case reconnecting(attempt: Int)
    /// Ended for good.
    case disconnected(ReplicaError)
}
