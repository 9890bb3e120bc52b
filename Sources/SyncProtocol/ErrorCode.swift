/// The fixed list of error codes that travel in `reject` and `error` messages.
///
/// `reject` (the connection goes on) carries ``badAction``, ``rejected``, ``unavailable``,
/// ``frameTooLarge`` (an action whose canonical form does not fit one frame), and for a
/// request the connection may repeat, ``appOutdated`` (a dispatch), ``upgradeRefused`` and
/// ``notPermitted`` (an `upgrade`); every other code arrives in an `error` message, after
/// which the hub closes the connection.
public enum ErrorCode: String, Sendable, CaseIterable, CustomStringConvertible {
    /// The frame's length is 0, or a message lacks a required member or has one of the wrong type.
    case badFrame = "bad-frame"
    /// The frame's length exceeds the hub's maximum (`--max-frame-bytes`).
    case frameTooLarge = "frame-too-large"
    /// The payload is not UTF-8 JSON, or not an object with a string `"type"`.
    case badJSON = "bad-json"
    /// The message `"type"` is not one the hub knows.
    case unknownType = "unknown-type"
    /// `hello.protocol` is not a version the hub speaks.
    case protocolMismatch = "protocol-mismatch"
    /// `hello.app` or `hello.fingerprint` differs from the hub's app.
    case appMismatch = "app-mismatch"
    /// A `dispatch` arrived before `hello`.
    case notAttached = "not-attached"
    /// A second `hello` on an attached connection.
    case alreadyAttached = "already-attached"
    /// (`reject`) The action does not decode as an action of the hub's app.
    case badAction = "bad-action"
    /// (`reject`) The app's reducer refused the action.
    case rejected = "rejected"
    /// The replica did not read its actions fast enough; the hub dropped it rather than wait.
    case slowConsumer = "slow-consumer"
    /// The hub is shutting down.
    case shuttingDown = "shutting-down"
    /// (`reject`) The hub cannot make the action durable (its journal cannot be written, e.g.
    /// a full disk); nothing was applied. Retry later: the hub recovers by itself.
    case unavailable = "unavailable"
    /// Another connection said `hello` with this connection's `session`: the newer one takes
    /// the session over and this one is closed (a replica that reconnected before its old
    /// connection was noticed as gone).
    case superseded = "superseded"
    /// The connection sent no complete `hello` (nor a `status` or `sync`) within the hub's
    /// `--idle-timeout`, or held half a frame that long; the hub closed it.
    case timeout = "timeout"
    /// A `hello` member is out of bounds: `name` longer than 256 bytes, or `session` empty
    /// or longer than 128 bytes (UTF-8).
    case badHello = "bad-hello"
    /// The hub already serves its `--max-clients` connections; this one was closed at once.
    case tooManyClients = "too-many-clients"
    /// The connecting process's user may not use this hub (peer credentials: only the hub's
    /// own user, root, and the users or group the operator admitted).
    case forbidden = "forbidden"
    /// A `history` request names actions the hub no longer keeps (they left its resume
    /// window) or has not sequenced; the connection goes on.
    case historyUnavailable = "history-unavailable"
    /// Never sent by a hub: a replica library fails a dispatch it had queued (while the link
    /// was down) when the hub it reconnects to serves another history, since the dispatch was
    /// decided against the old history's state. It was not sent, and not applied.
    case historyChanged = "history-changed"
    /// The replica runs an older version of the app than the history, which was upgraded
    /// past it (`hello`, or a dispatch not sequenced before the upgrade: never applied under
    /// the newer reducer). Run the newer version of the app.
    case appOutdated = "app-outdated"
    /// The replica runs a newer version of the app than the history, and the hub cannot hold
    /// its `hello` until an upgrade (it holds as many as it may). Retry later.
    case appAhead = "app-ahead"
    /// The request (an `upgrade`) is reserved to the hub's own user and root.
    case notPermitted = "not-permitted"
    /// (`reject`) An `upgrade` was refused and nothing changed: no path from the history's
    /// version, the migration threw, the migrated state would not fit a welcome frame, or the
    /// log cannot take it. The message says which.
    case upgradeRefused = "upgrade-refused"

    /// The wire string, e.g. `bad-frame`.
    public var description: String { rawValue }
}

/// An error as it travels on the wire: `{"code":"…","message":"…"}`.
public struct WireError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The code; an unknown code from a newer hub is kept as text in ``rawCode``.
    public let code: ErrorCode?
    /// The code as sent.
    public let rawCode: String
    /// What happened and what to do, for a person.
    public let message: String

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - code: The code.
    ///   - message: What happened and what to do.
    public init(_ code: ErrorCode, _ message: String) {
        self.code = code
        self.rawCode = code.rawValue
        self.message = message
    }

    /// Creates an error from its wire fields.
    ///
    /// - Parameters:
    ///   - rawCode: The code as sent.
    ///   - message: The message.
    public init(rawCode: String, message: String) {
        self.code = ErrorCode(rawValue: rawCode)
        self.rawCode = rawCode
        self.message = message
    }

    /// `code: message`.
    public var description: String { "\(rawCode): \(message)" }

    /// The wire form.
    public var json: JSON { ["code": .string(rawCode), "message": .string(message)] }
}

/// The StoreSync version, from one place: `hubd --version`, `replica-cli --version`, and the
/// commands of your own app built on `StoreSyncCommands`.
public enum StoreSyncVersion {
    /// The library's version.
    public static let current = "1.1.0"
}
