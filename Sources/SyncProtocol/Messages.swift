/// The protocol version this library speaks.
public let syncProtocolVersion = 1

/// A dispatch id chosen by the client: a string or an integer.
public enum DispatchID: Sendable, Hashable, CustomStringConvertible {
    /// An integer id (exact within ±2^53).
    case number(Int)
    /// A string id.
    case string(String)

    /// The largest integer id magnitude, 2^53 − 1: every integer up to it has one JSON
    /// number, so the echo always equals what was sent. Larger literals may have been
    /// rounded by the parser and are refused.
    public static let maxInteger = 9_007_199_254_740_991

    /// Reads an id from JSON.
    ///
    /// - Parameter json: A string, or an integral number with magnitude at most ``maxInteger``.
    /// - Returns: The id, or `nil` for any other value.
    public init?(json: JSON) {
        switch json {
        case .string(let value): self = .string(value)
        case .number:
            guard let value = json.intValue, abs(value) <= Self.maxInteger else { return nil }
            self = .number(value)
        default: return nil
        }
    }

    /// The wire form.
    public var json: JSON {
        switch self {
        case .number(let value): JSON(value)
        case .string(let value): .string(value)
        }
    }

    /// The id as JSON text.
    public var description: String { json.canonicalString }

    /// Whether two ids are the same JSON value: integers by value, strings by Unicode
    /// scalars (never Swift's canonical equivalence), and an integer never equals a string.
    public static func == (lhs: DispatchID, rhs: DispatchID) -> Bool {
        switch (lhs, rhs) {
        case (.number(let a), .number(let b)): a == b
        case (.string(let a), .string(let b)): JSONKey.sameScalars(a, b)
        default: false
        }
    }

    /// Hashes consistently with ``==(_:_:)``.
    ///
    /// - Parameter hasher: The hasher.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .number(let value):
            hasher.combine(0)
            hasher.combine(value)
        case .string(let value):
            hasher.combine(1)
            hasher.combine(JSONKey(value))
        }
    }
}

/// Where a reconnecting replica left off: `"resume":{"history":H,"seq":N}` in `hello`.
public struct ResumePoint: Sendable, Equatable {
    /// The history id the replica's state belongs to (from its last welcome).
    public var history: String
    /// The last seq the replica applied.
    public var seq: UInt64

    /// Creates a resume point.
    ///
    /// - Parameters:
    ///   - history: The history id.
    ///   - seq: The last applied seq.
    public init(history: String, seq: UInt64) {
        self.history = history
        self.seq = seq
    }

    /// The wire form.
    public var json: JSON { ["history": .string(history), "seq": JSON(seq)] }
}

/// A message a client sends to the hub.
///
/// The hub refuses a type it does not know (`unknown-type`); see ``HubMessage`` for the
/// other direction, where clients ignore what they do not know.
public enum ClientMessage: Sendable, Equatable {
    /// The longest `session` a `hello` may carry, in UTF-8 bytes.
    public static let maxSessionBytes = 128
    /// The longest `name` a `hello` may carry, in UTF-8 bytes.
    public static let maxNameBytes = 256
    /// The most ids a `hello`'s `in_doubt` may name.
    public static let maxInDoubt = 4_096
    /// The longest string dispatch id, in UTF-8 bytes (a longer one is refused with
    /// `reject` `bad-action`).
    public static let maxIDBytes = 128

    /// Attach as a replica: `{"type":"hello","protocol":1,"app":"json","fingerprint":"…","name":"…"}`,
    /// optionally resuming from a seq of a history (`"resume":{"history":H,"seq":N}`).
    ///
    /// With `session` (1–128 bytes, chosen by the client and kept across its reconnects),
    /// dispatch ids are scoped to the session and the hub applies each (session, id) once.
    ///
    /// `inDoubt` (`"in_doubt"`, at most ``maxInDoubt`` ids) names the dispatches of the session
    /// the client sent and has no answer for: should the hub refuse the `hello` because the
    /// history was upgraded past the client's version (`app-outdated`), it first answers each
    /// one, `duplicate` with its seq when it was sequenced, else `reject` `app-outdated` (never
    /// applied), so exactly-once holds across the upgrade. Otherwise the hub ignores it.
    case hello(protocolVersion: Int, app: String, fingerprint: String?, name: String?, resume: ResumePoint? = nil,
               session: String? = nil, inDoubt: [DispatchID] = [])
    /// Propose an action: `{"type":"dispatch","id":…,"action":{…}}`.
    case dispatch(id: DispatchID, action: JSON)
    /// Ask for the hub's status: `{"type":"status"}`, with `"checked":{…}` when the client
    /// reports its last digest comparison (``DigestCheck``), which the hub shows in its entry
    /// of `status.replicas`.
    case status(checked: DigestCheck? = nil)
    /// `{"type":"status"}`, reporting nothing: the same as `.status(checked: nil)`, as this
    /// message was written before `checked` existed.
    public static var status: ClientMessage { .status(checked: nil) }
    /// A barrier: `{"type":"sync"}` or `{"type":"sync","id":…}`. The hub answers
    /// ``HubMessage/synced(seq:id:)`` in order with everything it sends this connection, at O(1) cost.
    case sync(id: DispatchID?)
    /// Ask for the sequenced actions `from`…`to` (inclusive; `to` absent: up to the hub's seq)
    /// still in the hub's resume window: `{"type":"history","from":A,"to":B,"id":…}`. Answered in
    /// order, attached or not, with a `history` reply holding at most one page of them.
    case history(from: UInt64, to: UInt64?, id: DispatchID?)
    /// Ask the hub to move the history to a newer version of its app:
    /// `{"type":"upgrade","id":…,"to":"todos@2","dry_run":false}` (`to` absent: the newest
    /// version the hub carries). Only the hub's own user or root may ask (`not-permitted`).
    /// Answered in order with an `upgrade` report (``HubMessage/upgrade(_:)``) or a `reject`
    /// naming `id`; with `dry_run` the migration runs and nothing changes.
    case upgrade(id: DispatchID, to: String?, dryRun: Bool)

    /// Reads a client message, checking every member it needs.
    ///
    /// Members a message does not use are ignored.
    ///
    /// - Parameter json: The parsed frame payload.
    /// - Returns: The message.
    /// - Throws: ``WireError`` with `bad-json` (not an object with a string type),
    ///   `unknown-type` or `bad-frame` (a member missing or of the wrong type).
    public init(json: JSON) throws(WireError) {
        guard case .object(let members) = json else {
            throw WireError(.badJSON, "a message must be a JSON object, not \(json.kindName)")
        }
        guard let type = members["type"]?.stringValue else {
            throw WireError(.badJSON, "a message needs a string member \"type\"")
        }
        // Matched by Unicode scalars (JSONKey), as everything on the wire is.
        switch JSONKey(type) {
        case "hello":
            guard let version = members["protocol"]?.intValue else {
                throw WireError(.badFrame, "hello needs an integer member \"protocol\" (this hub speaks \(syncProtocolVersion))")
            }
            guard let app = members["app"]?.stringValue else {
                throw WireError(.badFrame, "hello needs a string member \"app\" naming the app, e.g. \"counter\"")
            }
            let fingerprint = try Self.optionalString(members, "fingerprint")
            let name = try Self.optionalString(members, "name")
            if let name, name.utf8.count > Self.maxNameBytes {
                throw WireError(.badHello, "hello member \"name\" is \(name.utf8.count) bytes; a name is at most \(Self.maxNameBytes) bytes (UTF-8)")
            }
            var resume: ResumePoint?
            if let raw = members["resume"], !raw.isNull {
                guard let history = raw["history"]?.stringValue, let seq = raw["seq"]?.intValue, seq >= 0 else {
                    throw WireError(.badFrame, "hello member \"resume\" must be {\"history\":string,\"seq\":integer ≥ 0}, from the last welcome and the last applied action")
                }
                resume = ResumePoint(history: history, seq: UInt64(seq))
            }
            var session: String?
            if let raw = members["session"], !raw.isNull {
                guard let text = raw.stringValue else {
                    throw WireError(.badFrame, "hello member \"session\" must be a string of 1 to \(Self.maxSessionBytes) bytes (UTF-8), the same on every reconnect of this client")
                }
                guard (1...Self.maxSessionBytes).contains(text.utf8.count) else {
                    throw WireError(.badHello, "hello member \"session\" is \(text.utf8.count) bytes; a session is 1 to \(Self.maxSessionBytes) bytes (UTF-8), the same on every reconnect of this client")
                }
                session = text
            }
            var inDoubt: [DispatchID] = []
            if let raw = members["in_doubt"], !raw.isNull {
                guard let items = raw.arrayValue, items.count <= Self.maxInDoubt else {
                    throw WireError(.badFrame, "hello member \"in_doubt\" must be an array of at most \(Self.maxInDoubt) dispatch ids")
                }
                for item in items {
                    guard let id = DispatchID(json: item) else {
                        throw WireError(.badFrame, "hello member \"in_doubt\" holds something other than a dispatch id (a string, or an integer within ±(2^53 − 1))")
                    }
                    inDoubt.append(id)
                }
            }
            self = .hello(protocolVersion: version, app: app, fingerprint: fingerprint, name: name, resume: resume,
                          session: session, inDoubt: inDoubt)
        case "dispatch":
            guard let rawID = members["id"], let id = DispatchID(json: rawID) else {
                throw WireError(.badFrame, "dispatch needs a member \"id\" that is a string or an integer within ±(2^53 − 1)")
            }
            guard let action = members["action"] else {
                throw WireError(.badFrame, "dispatch needs a member \"action\"")
            }
            self = .dispatch(id: id, action: action)
        case "status":
            guard let raw = members["checked"], !raw.isNull else {
                self = .status()
                return
            }
            self = .status(checked: try DigestCheck(json: raw))
        case "sync":
            guard let rawID = members["id"], !rawID.isNull else {
                self = .sync(id: nil)
                return
            }
            guard let id = DispatchID(json: rawID) else {
                throw WireError(.badFrame, "sync member \"id\" must be a string or an integer within ±(2^53 − 1)")
            }
            self = .sync(id: id)
        case "history":
            guard let from = members["from"]?.intValue, from >= 1 else {
                throw WireError(.badFrame, "history needs an integer member \"from\" ≥ 1, the first seq wanted")
            }
            var to: UInt64?
            if let raw = members["to"], !raw.isNull {
                guard let value = raw.intValue, value >= from else {
                    throw WireError(.badFrame, "history member \"to\" must be an integer ≥ \"from\" (or absent: up to the hub's seq)")
                }
                to = UInt64(value)
            }
            var id: DispatchID?
            if let raw = members["id"], !raw.isNull {
                guard let value = DispatchID(json: raw) else {
                    throw WireError(.badFrame, "history member \"id\" must be a string or an integer within ±(2^53 − 1)")
                }
                id = value
            }
            self = .history(from: UInt64(from), to: to, id: id)
        case "upgrade":
            guard let raw = members["id"], let id = DispatchID(json: raw) else {
                throw WireError(.badFrame, "upgrade needs a member \"id\" that is a string or an integer within ±(2^53 − 1)")
            }
            var to: String?
            if let raw = members["to"], !raw.isNull {
                guard let text = raw.stringValue, text.utf8.count <= Self.maxNameBytes else {
                    throw WireError(.badFrame, "upgrade member \"to\" must be a fingerprint string such as \"todos@2\" (at most \(Self.maxNameBytes) bytes), or absent for the newest version the hub carries")
                }
                to = text
            }
            var dryRun = false
            if let raw = members["dry_run"], !raw.isNull {
                guard let flag = raw.boolValue else { throw WireError(.badFrame, "upgrade member \"dry_run\" must be a boolean") }
                dryRun = flag
            }
            self = .upgrade(id: id, to: to, dryRun: dryRun)
        default:
            throw WireError(.unknownType, "unknown message type \"\(type)\"; a client sends hello, dispatch, status, sync, history or upgrade")
        }
    }

    private static func optionalString(_ members: [JSONKey: JSON], _ key: JSONKey) throws(WireError) -> String? {
        guard let value = members[key], !value.isNull else { return nil }
        guard let string = value.stringValue else {
            throw WireError(.badFrame, "hello member \"\(key)\" must be a string, not \(value.kindName)")
        }
        return string
    }

    /// The wire form.
    public var json: JSON {
        switch self {
        case .hello(let version, let app, let fingerprint, let name, let resume, let session, let inDoubt):
            var members: [JSONKey: JSON] = ["type": "hello", "protocol": JSON(version), "app": .string(app)]
            if !inDoubt.isEmpty { members["in_doubt"] = .array(inDoubt.map(\.json)) }
            if let fingerprint { members["fingerprint"] = .string(fingerprint) }
            if let name { members["name"] = .string(name) }
            if let resume { members["resume"] = resume.json }
            if let session { members["session"] = .string(session) }
            return .object(members)
        case .dispatch(let id, let action):
            return ["type": "dispatch", "id": id.json, "action": action]
        case .status(let checked):
            guard let checked else { return ["type": "status"] }
            return ["type": "status", "checked": checked.json]
        case .sync(let id):
            guard let id else { return ["type": "sync"] }
            return ["type": "sync", "id": id.json]
        case .history(let from, let to, let id):
            var members: [JSONKey: JSON] = ["type": "history", "from": JSON(from)]
            if let to { members["to"] = JSON(to) }
            if let id { members["id"] = id.json }
            return .object(members)
        case .upgrade(let id, let to, let dryRun):
            var members: [JSONKey: JSON] = ["type": "upgrade", "id": id.json, "dry_run": .bool(dryRun)]
            if let to { members["to"] = .string(to) }
            return .object(members)
        }
    }
}

/// One attached replica, as listed in a status message.
public struct ReplicaInfo: Sendable, Equatable {
    /// The replica id the hub assigned.
    public let replica: Int
    /// The name from its hello, or "".
    public let name: String
    /// Bytes queued for it in the hub (`queued_bytes`), if the hub says.
    public let queuedBytes: Int?
    /// Actions sequenced that the hub has not yet written to it (`lag`), if the hub says.
    public let lag: Int?
    /// The user id of the process at the other end (`uid`), if the hub says.
    public let uid: Int?
    /// The process id at the other end (`pid`), if the hub says.
    public let pid: Int?
    /// What the replica last reported of its digest comparisons with the hub (`checked`), if
    /// it has reported one on this connection and the hub says.
    public let checked: DigestCheck?

    /// Creates an entry.
    ///
    /// - Parameters:
    ///   - replica: The id.
    ///   - name: The name.
    ///   - queuedBytes: Bytes the hub has queued for it.
    ///   - lag: Actions not yet written to it.
    ///   - uid: The peer's user id.
    ///   - pid: The peer's process id.
    ///   - checked: The replica's last reported digest comparison.
    public init(replica: Int, name: String, queuedBytes: Int? = nil, lag: Int? = nil, uid: Int? = nil, pid: Int? = nil,
                checked: DigestCheck? = nil) {
        self.replica = replica
        self.name = name
        self.queuedBytes = queuedBytes
        self.lag = lag
        self.uid = uid
        self.pid = pid
        self.checked = checked
    }
}

/// The hub's answer to `status`.
public struct HubStatus: Sendable, Equatable {
    /// The protocol version.
    public var protocolVersion: Int
    /// The app's name.
    public var app: String
    /// The app's fingerprint.
    public var fingerprint: String
    /// The hub's run id.
    public var hub: String
    /// The last sequence number.
    public var seq: UInt64
    /// The digest of the current state.
    public var digest: String
    /// The attached replicas.
    public var replicas: [ReplicaInfo]
    /// The largest frame payload the hub accepts from a client (`max_frame_bytes`), if it says.
    public var maxFrameBytes: Int?
    /// The id of this sequence of actions (`history`), if the hub says: kept across restarts
    /// of a hub with a data directory, new for every in-memory run.
    public var history: String?
    /// Storage facts (`storage`): data directory, fsync mode, journal bytes and segments,
    /// newest snapshot seq, last fsync latency; `null` members for an in-memory hub.
    public var storage: JSON?
    /// For a hub on a log shared with other hubs (`log`): its kind, servers, stream, the
    /// log's last seq, the hub's applied seq and whether it is connected; `nil` otherwise.
    public var log: JSON?
    /// The newest version of the app this hub carries, when the history runs an older one
    /// (`upgradable_to`, a fingerprint); `nil` otherwise.
    public var upgradableTo: String?

    /// Creates a status.
    ///
    /// - Parameters:
    ///   - protocolVersion: The protocol version.
    ///   - app: The app's name.
    ///   - fingerprint: The app's fingerprint.
    ///   - hub: The hub's run id.
    ///   - seq: The last sequence number.
    ///   - digest: The state digest.
    ///   - replicas: The attached replicas.
    ///   - maxFrameBytes: The hub's limit on a client frame's payload.
    ///   - history: The history id.
    ///   - storage: Storage facts.
    ///   - log: Shared-log facts.
    ///   - upgradableTo: The newest version this hub carries, when the history runs an older one.
    public init(protocolVersion: Int, app: String, fingerprint: String, hub: String, seq: UInt64,
                digest: String, replicas: [ReplicaInfo], maxFrameBytes: Int? = nil, history: String? = nil,
                storage: JSON? = nil, log: JSON? = nil, upgradableTo: String? = nil) {
        self.protocolVersion = protocolVersion
        self.app = app
        self.fingerprint = fingerprint
        self.hub = hub
        self.seq = seq
        self.digest = digest
        self.replicas = replicas
        self.maxFrameBytes = maxFrameBytes
        self.history = history
        self.storage = storage
        self.log = log
        self.upgradableTo = upgradableTo
    }
}

/// The hub's `welcome`: this replica's id and the state every later action applies to.
///
/// A full welcome carries the state and its digest. A resumed one (``resumed``) carries
/// neither: the replica keeps its state as of `seq`, and the actions after it follow.
public struct Welcome: Sendable, Equatable {
    /// The hub's run id.
    public var hub: String
    /// The replica id the hub assigned to this connection.
    public var replica: Int
    /// The seq the state was taken at; the next action this connection receives is `seq + 1`.
    public var seq: UInt64
    /// The state, as the app encodes it; `nil` in a resumed welcome.
    public var state: JSON?
    /// The digest of the state's canonical bytes; `nil` in a resumed welcome.
    public var digest: String?
    /// Whether this continues the replica's own state from the `resume` it asked for.
    public var resumed: Bool
    /// The largest frame payload the hub accepts from a client (`max_frame_bytes`), if it says;
    /// a client refuses a larger dispatch itself instead of losing its connection.
    public var maxFrameBytes: Int?
    /// The id of this sequence of actions (`history`), if the hub says.
    public var history: String?
    /// The app version (fingerprint) the state and every later action are of, if the hub
    /// says: a client that named none in `hello` learns which shape it received.
    public var fingerprint: String?

    /// Creates a welcome.
    ///
    /// - Parameters:
    ///   - hub: The hub's run id.
    ///   - replica: The replica id.
    ///   - seq: The seq of the state.
    ///   - state: The state.
    ///   - digest: The state's digest.
    ///   - maxFrameBytes: The hub's frame limit for clients.
    ///   - history: The history id.
    ///   - fingerprint: The app version the state is of.
    public init(hub: String, replica: Int, seq: UInt64, state: JSON, digest: String, maxFrameBytes: Int? = nil,
                history: String? = nil, fingerprint: String? = nil) {
        self.fingerprint = fingerprint
        self.hub = hub
        self.replica = replica
        self.seq = seq
        self.state = state
        self.digest = digest
        self.resumed = false
        self.maxFrameBytes = maxFrameBytes
        self.history = history
    }

    /// A resumed welcome: no state; the actions after `seq` follow.
    ///
    /// - Parameters:
    ///   - hub: The hub's run id.
    ///   - replica: The replica id.
    ///   - seq: The seq the replica resumes from.
    ///   - history: The history id.
    ///   - maxFrameBytes: The hub's frame limit for clients.
    ///   - fingerprint: The app version the history runs.
    /// - Returns: The welcome.
    public static func resumed(hub: String, replica: Int, seq: UInt64, history: String, maxFrameBytes: Int? = nil,
                               fingerprint: String? = nil) -> Welcome {
        var welcome = Welcome(hub: hub, replica: replica, seq: seq, state: .null, digest: "", maxFrameBytes: maxFrameBytes,
                              history: history, fingerprint: fingerprint)
        welcome.state = nil
        welcome.digest = nil
        welcome.resumed = true
        return welcome
    }
}

/// A message the hub sends to a client.
///
/// **Extension rule:** the protocol grows by new message types and new members. A client
/// ignores a message type it does not know (decoded here as ``unknown(type:)``) and every
/// member it does not know, so a newer hub never breaks an older replica.
public enum HubMessage: Sendable, Equatable {
    /// Attached: the state as of `seq`, and this replica's id.
    case welcome(Welcome)
    /// A sequenced action, sent to every attached replica including its origin, with when it
    /// was sequenced and its origin's name (``ActionStamp``, metadata a reducer never sees).
    case action(seq: UInt64, origin: Int, id: DispatchID, action: JSON, stamp: ActionStamp = .none)
    /// The origin's dispatch `id` was refused; nothing was sequenced.
    case reject(id: DispatchID, error: WireError)
    /// A fatal error; the hub closes the connection after it.
    case error(WireError)
    /// The answer to `status`.
    case status(HubStatus)
    /// The answer to `sync`: every action up to `seq` was sent to this connection before it.
    case synced(seq: UInt64, id: DispatchID?)
    /// The origin's dispatch `id` was already sequenced in its session, as `seq`; it was not
    /// applied again (exactly-once dispatch across reconnects and restarts).
    case duplicate(id: DispatchID, seq: UInt64)
    /// The digest of the hub's state right after action `seq`; sent after every action whose
    /// seq is a multiple of the hub's `--checkpoint-every`. A replica whose own digest at
    /// `seq` differs has diverged and re-hydrates.
    case checkpoint(seq: UInt64, digest: String)
    /// Whether a hub on a shared log can write it now, sent to attached replicas when that
    /// changes: `available` false with the reason while it refuses every dispatch
    /// (`unavailable`), true once it accepts them again. `seq` is
    /// the hub's applied seq then. Reads go on throughout.
    case log(available: Bool, reason: String?, seq: UInt64)
    /// The answer to `history`: a page of sequenced actions, or why there is none.
    case history(HistoryReply)
    /// The history moved to a newer app version at `seq` (in order in the action stream); the
    /// hub then detaches the connection.
    case upgraded(UpgradeNotice)
    /// The answer to an `upgrade` request.
    case upgrade(UpgradeReport)
    /// The `hello` is held until the history reaches the replica's app version.
    case waiting(WaitingNotice)
    /// A message type this library does not know; a client ignores it (the extension rule).
    case unknown(type: String)

    /// The wire form.
    public var json: JSON {
        switch self {
        case .welcome(let welcome):
            var members: [JSONKey: JSON] = [
                "type": "welcome", "protocol": JSON(syncProtocolVersion), "hub": .string(welcome.hub),
                "replica": JSON(welcome.replica), "seq": JSON(welcome.seq), "resumed": .bool(welcome.resumed),
            ]
            if let state = welcome.state { members["state"] = state }
            if let digest = welcome.digest { members["digest"] = .string(digest) }
            if let limit = welcome.maxFrameBytes { members["max_frame_bytes"] = JSON(limit) }
            if let history = welcome.history { members["history"] = .string(history) }
            if let fingerprint = welcome.fingerprint { members["fingerprint"] = .string(fingerprint) }
            return .object(members)
        case .action(let seq, let origin, let id, let action, let stamp):
            var members: [JSONKey: JSON] = ["type": "action", "seq": JSON(seq), "origin": JSON(origin), "id": id.json, "action": action]
            stamp.write(into: &members)
            return .object(members)
        case .reject(let id, let error):
            return ["type": "reject", "id": id.json, "error": error.json]
        case .error(let error):
            return ["type": "error", "error": error.json]
        case .status(let status):
            var members: [JSONKey: JSON] = [
                "type": "status", "protocol": JSON(status.protocolVersion), "app": .string(status.app),
                "fingerprint": .string(status.fingerprint), "hub": .string(status.hub),
                "seq": JSON(status.seq), "digest": .string(status.digest),
                "replicas": .array(status.replicas.map { info in
                    var entry: [JSONKey: JSON] = ["replica": JSON(info.replica), "name": .string(info.name)]
                    if let queued = info.queuedBytes { entry["queued_bytes"] = JSON(queued) }
                    if let lag = info.lag { entry["lag"] = JSON(lag) }
                    if let uid = info.uid { entry["uid"] = JSON(uid) }
                    if let pid = info.pid { entry["pid"] = JSON(pid) }
                    if let checked = info.checked { entry["checked"] = checked.json }
                    return .object(entry)
                }),
            ]
            if let limit = status.maxFrameBytes { members["max_frame_bytes"] = JSON(limit) }
            if let history = status.history { members["history"] = .string(history) }
            if let storage = status.storage { members["storage"] = storage }
            if let newest = status.upgradableTo { members["upgradable_to"] = .string(newest) }
            if let log = status.log { members["log"] = log }
            return .object(members)
        case .synced(let seq, let id):
            guard let id else { return ["type": "synced", "seq": JSON(seq)] }
            return ["type": "synced", "seq": JSON(seq), "id": id.json]
        case .duplicate(let id, let seq):
            return ["type": "duplicate", "id": id.json, "seq": JSON(seq)]
        case .checkpoint(let seq, let digest):
            return ["type": "checkpoint", "seq": JSON(seq), "digest": .string(digest)]
        case .log(let available, let reason, let seq):
            var members: [JSONKey: JSON] = ["type": "log", "available": .bool(available), "seq": JSON(seq)]
            if let reason { members["reason"] = .string(reason) }
            return .object(members)
        case .history(let reply):
            return reply.json
        case .upgraded(let notice):
            return notice.json
        case .upgrade(let report):
            return report.json
        case .waiting(let notice):
            return notice.json
        case .unknown(let type):
            return ["type": .string(type)]
        }
    }

    /// The message's `"type"`, for logs.
    public var typeName: String {
        switch self {
        case .welcome: "welcome"
        case .action: "action"
        case .reject: "reject"
        case .error: "error"
        case .status: "status"
        case .synced: "synced"
        case .duplicate: "duplicate"
        case .checkpoint: "checkpoint"
        case .history: "history"
        case .log: "log"
        case .upgraded: "upgraded"
        case .upgrade: "upgrade"
        case .waiting: "waiting"
        case .unknown(let type): type
        }
    }

    /// Reads a hub message; an unknown type is ``unknown(type:)``, unknown members are ignored.
    ///
    /// - Parameter json: The parsed frame payload.
    /// - Returns: The message.
    /// - Throws: ``WireError`` (`bad-json` for a payload that is not an object with a string
    ///   `"type"`, `bad-frame` for a known type with a member missing or of the wrong type).
    public init(json: JSON) throws(WireError) {
        guard case .object(let m) = json, let type = m["type"]?.stringValue else {
            throw WireError(.badJSON, "a hub message must be a JSON object with a string \"type\"")
        }
        func int(_ key: JSONKey) throws(WireError) -> Int {
            guard let value = m[key]?.intValue else { throw WireError(.badFrame, "\(type) needs an integer \"\(key)\"") }
            return value
        }
        func optionalInt(_ key: JSONKey) throws(WireError) -> Int? {
            guard let value = m[key], !value.isNull else { return nil }
            guard let int = value.intValue else { throw WireError(.badFrame, "\(type) member \"\(key)\" must be an integer") }
            return int
        }
        func seq(_ key: JSONKey) throws(WireError) -> UInt64 {
            let value = try int(key)
            guard value >= 0 else { throw WireError(.badFrame, "\(type) member \"\(key)\" must not be negative") }
            return UInt64(value)
        }
        func string(_ key: JSONKey) throws(WireError) -> String {
            guard let value = m[key]?.stringValue else { throw WireError(.badFrame, "\(type) needs a string \"\(key)\"") }
            return value
        }
        func error() throws(WireError) -> WireError {
            guard let e = m["error"], let code = e["code"]?.stringValue, let message = e["message"]?.stringValue else {
                throw WireError(.badFrame, "\(type) needs an \"error\" object with string \"code\" and \"message\"")
            }
            return WireError(rawCode: code, message: message)
        }
        func id() throws(WireError) -> DispatchID {
            guard let raw = m["id"], let id = DispatchID(json: raw) else {
                throw WireError(.badFrame, "\(type) needs an \"id\" that is a string or an integer")
            }
            return id
        }
        switch JSONKey(type) {
        case "welcome":
            if m["resumed"]?.boolValue == true {
                guard let history = m["history"]?.stringValue else {
                    throw WireError(.badFrame, "a resumed welcome needs a string \"history\"")
                }
                self = .welcome(.resumed(hub: try string("hub"), replica: try int("replica"), seq: try seq("seq"),
                                         history: history, maxFrameBytes: try optionalInt("max_frame_bytes"),
                                         fingerprint: m["fingerprint"]?.stringValue))
                return
            }
            guard let state = m["state"] else { throw WireError(.badFrame, "welcome needs a \"state\"") }
            self = .welcome(Welcome(hub: try string("hub"), replica: try int("replica"), seq: try seq("seq"),
                                    state: state, digest: try string("digest"),
                                    maxFrameBytes: try optionalInt("max_frame_bytes"),
                                    history: m["history"]?.stringValue, fingerprint: m["fingerprint"]?.stringValue))
        case "action":
            guard let action = m["action"] else { throw WireError(.badFrame, "action needs an \"action\"") }
            self = .action(seq: try seq("seq"), origin: try int("origin"), id: try id(), action: action,
                           stamp: ActionStamp.read(from: m))
        case "reject":
            self = .reject(id: try id(), error: try error())
        case "error":
            self = .error(try error())
        case "status":
            var replicas: [ReplicaInfo] = []
            for entry in m["replicas"]?.arrayValue ?? [] {
                guard let replica = entry["replica"]?.intValue else {
                    throw WireError(.badFrame, "status replicas need an integer \"replica\"")
                }
                replicas.append(ReplicaInfo(replica: replica, name: entry["name"]?.stringValue ?? "",
                                            queuedBytes: entry["queued_bytes"]?.intValue, lag: entry["lag"]?.intValue,
                                            uid: entry["uid"]?.intValue, pid: entry["pid"]?.intValue,
                                            checked: DigestCheck.lenient(entry["checked"])))
            }
            self = .status(HubStatus(protocolVersion: try int("protocol"), app: try string("app"),
                                     fingerprint: try string("fingerprint"), hub: try string("hub"),
                                     seq: try seq("seq"), digest: try string("digest"), replicas: replicas,
                                     maxFrameBytes: try optionalInt("max_frame_bytes"),
                                     history: m["history"]?.stringValue,
                                     storage: m["storage"].flatMap { $0.objectValue == nil ? nil : $0 },
                                     log: m["log"].flatMap { $0.objectValue == nil ? nil : $0 },
                                     upgradableTo: m["upgradable_to"]?.stringValue))
        case "synced":
            var syncID: DispatchID?
            if let raw = m["id"], !raw.isNull {
                guard let parsed = DispatchID(json: raw) else {
                    throw WireError(.badFrame, "synced member \"id\" must be a string or an integer")
                }
                syncID = parsed
            }
            self = .synced(seq: try seq("seq"), id: syncID)
        case "duplicate":
            self = .duplicate(id: try id(), seq: try seq("seq"))
        case "checkpoint":
            self = .checkpoint(seq: try seq("seq"), digest: try string("digest"))
        case "log":
            guard let available = m["available"]?.boolValue else {
                throw WireError(.badFrame, "log member \"available\" must be a boolean")
            }
            self = .log(available: available, reason: m["reason"]?.stringValue, seq: try seq("seq"))
        case "history":
            self = .history(try HistoryReply(members: m))
        case "upgraded":
            self = .upgraded(UpgradeNotice(seq: try seq("seq"), from: try string("from"), to: try string("to"),
                                           digest: try string("digest")))
        case "upgrade":
            var detaches: [UpgradeReport.Detached] = []
            for entry in m["detaches"]?.arrayValue ?? [] {
                guard let replica = entry["replica"]?.intValue else {
                    throw WireError(.badFrame, "upgrade detaches need an integer \"replica\"")
                }
                detaches.append(UpgradeReport.Detached(replica: replica, name: entry["name"]?.stringValue ?? "",
                                                       fingerprint: entry["fingerprint"]?.stringValue))
            }
            var report = UpgradeReport(id: try id(), dryRun: m["dry_run"]?.boolValue ?? false,
                                       changed: m["changed"]?.boolValue ?? false, seq: try seq("seq"),
                                       from: try string("from"), to: try string("to"), digest: try string("digest"),
                                       stateBytes: try optionalInt("state_bytes") ?? 0, detaches: detaches)
            for entry in (m["hubs_lacking"]?.arrayValue ?? []).prefix(1_024) {
                guard let name = entry["hub"]?.stringValue else {
                    throw WireError(.badFrame, "upgrade hubs_lacking need a string \"hub\"")
                }
                report.hubsLacking.append(UpgradeReport.Hub(name: name, versions: entry["versions"]?.arrayValue?.compactMap(\.stringValue)))
            }
            self = .upgrade(report)
        case "waiting":
            self = .waiting(WaitingNotice(reason: m["for"]?.stringValue ?? "", fingerprint: try string("fingerprint"),
                                          seq: try seq("seq"), message: m["message"]?.stringValue ?? ""))
        default:
            self = .unknown(type: type)
        }
    }
}

extension Frame {
    /// Encodes a hub message as one frame (header and canonical JSON payload).
    ///
    /// - Parameter message: The message.
    /// - Returns: The frame's bytes.
    /// - Throws: ``FrameError/tooLarge(length:limit:)`` when it does not fit one frame.
    public static func encode(_ message: HubMessage) throws(FrameError) -> [UInt8] { try encode(message.json) }

    /// Encodes a client message as one frame.
    ///
    /// - Parameter message: The message.
    /// - Returns: The frame's bytes.
    /// - Throws: ``FrameError/tooLarge(length:limit:)`` when it does not fit one frame.
    public static func encode(_ message: ClientMessage) throws(FrameError) -> [UInt8] {
        guard case .dispatch(let id, let action) = message else { return try encode(message.json) }
        return try encodeDispatch(id: id, action: WireAction(action))
    }

    /// Writes an integer as the canonical writer would, without going through `Double` when it
    /// is within ±2^53 (beyond, `json`'s canonical form, which is what the number means there).
    @inline(__always)
    private static func writeInteger(_ value: Int?, orJSON json: JSON, into buffer: inout [UInt8]) {
        guard let value, value.magnitude < 1 << 53 else {
            json.writeCanonical(into: &buffer)
            return
        }
        if value < 0 { buffer.append(UInt8(ascii: "-")) }
        _JSONWriter.writeInteger(UInt64(value.magnitude), into: &buffer)
    }

    /// Encodes a `dispatch` as one frame, the envelope written directly in canonical member
    /// order (`action`, `id`, `type`) with no `JSON` object for it: the replicas' hot path.
    /// The payload is `ClientMessage.dispatch(id:action:)`'s canonical form.
    ///
    /// - Parameters:
    ///   - id: The dispatch id.
    ///   - action: The action (canonical bytes are copied as they are).
    /// - Returns: The frame's bytes.
    /// - Throws: ``FrameError/tooLarge(length:limit:)`` when it does not fit one frame.
    public static func encodeDispatch(id: DispatchID, action: WireAction) throws(FrameError) -> [UInt8] {
        // One allocation: the envelope's fixed parts and an id take at most 64 bytes.
        var buffer: [UInt8] = []
        buffer.reserveCapacity(64 + (action.withCanonicalBytes { $0.count } ?? 64))
        for _ in 0..<Frame.headerSize { buffer.append(0) }
        _JSONWriter.appendStatic(#"{"action":"#, to: &buffer)
        action.writeCanonical(into: &buffer)
        _JSONWriter.appendStatic(#","id":"#, to: &buffer)
        if case .number(let number) = id {
            writeInteger(number, orJSON: id.json, into: &buffer)
        } else {
            id.json.writeCanonical(into: &buffer)
        }
        _JSONWriter.appendStatic(#","type":"dispatch"}"#, to: &buffer)
        try patchHeader(of: &buffer, at: 0)
        return buffer
    }

    /// Appends one `action` frame to `buffer`, writing the envelope directly (no intermediate `JSON`).
    ///
    /// This is the hub's hot path: the envelope is encoded once and the same bytes go to
    /// every replica. The payload is
    /// `{"type":"action","seq":…,"origin":…,"id":…,"origin_name":…,"time":…,"action":…}`, the
    /// stamp's members only when it has them.
    /// The canonical form can be longer than what the client sent (`1e20` is 21 digits), so the
    /// hub checks the result, not the input, against the frame limit.
    ///
    /// - Parameters:
    ///   - seq: The sequence number.
    ///   - origin: The dispatching replica.
    ///   - id: The origin's dispatch id.
    ///   - action: The action JSON.
    ///   - stamp: When it was sequenced and its origin's name.
    ///   - buffer: Where the frame goes.
    /// - Returns: The payload's length in bytes.
    /// - Throws: ``FrameError/tooLarge(length:limit:)`` when the envelope is longer than
    ///   ``Frame/maxPayloadBytes``; `buffer` is then left as it was.
    @discardableResult
    public static func appendActionEnvelope(seq: UInt64, origin: Int, id: DispatchID, action: JSON, stamp: ActionStamp = .none,
                                            to buffer: inout [UInt8]) throws(FrameError) -> Int {
        try appendActionEnvelope(seq: seq, origin: origin, id: id, action: WireAction(action), stamp: stamp, to: &buffer)
    }

    /// ``appendActionEnvelope(seq:origin:id:action:stamp:to:)`` for an action held as a
    /// ``WireAction``: canonical bytes are copied as they are.
    ///
    /// - Returns: The payload's length.
    /// - Throws: ``FrameError`` when the payload is larger than a frame can carry.
    @discardableResult
    public static func appendActionEnvelope(seq: UInt64, origin: Int, id: DispatchID, action: WireAction, stamp: ActionStamp = .none,
                                            to buffer: inout [UInt8]) throws(FrameError) -> Int {
        let start = buffer.count
        buffer.append(contentsOf: [0, 0, 0, 0])
        _JSONWriter.appendStatic(#"{"type":"action","seq":"#, to: &buffer)
        writeInteger(seq < 1 << 53 ? Int(seq) : nil, orJSON: JSON(seq), into: &buffer)
        _JSONWriter.appendStatic(#","origin":"#, to: &buffer)
        writeInteger(origin, orJSON: JSON(origin), into: &buffer)
        _JSONWriter.appendStatic(#","id":"#, to: &buffer)
        if case .number(let number) = id {
            writeInteger(number, orJSON: id.json, into: &buffer)
        } else {
            id.json.writeCanonical(into: &buffer)
        }
        if let name = stamp.originName {
            _JSONWriter.appendStatic(#","origin_name":"#, to: &buffer)
            JSON.string(name).writeCanonical(into: &buffer)
        }
        if let time = stamp.time {
            _JSONWriter.appendStatic(#","time":"#, to: &buffer)
            writeInteger(time >= 0 && time <= ActionStamp.maxTime ? Int(time) : nil, orJSON: .number(Double(time)), into: &buffer)
        }
        _JSONWriter.appendStatic(#","action":"#, to: &buffer)
        action.writeCanonical(into: &buffer)
        buffer.append(UInt8(ascii: "}"))
        try patchHeader(of: &buffer, at: start)
        return buffer.count - start - headerSize
    }
}
