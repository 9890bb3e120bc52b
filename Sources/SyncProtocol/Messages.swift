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
}

/// A message a client sends to the hub.
public enum ClientMessage: Sendable, Equatable {
    /// Attach as a replica: `{"type":"hello","protocol":1,"app":"json","fingerprint":"…","name":"…"}`.
    case hello(protocolVersion: Int, app: String, fingerprint: String?, name: String?)
    /// Propose an action: `{"type":"dispatch","id":…,"action":{…}}`.
    case dispatch(id: DispatchID, action: JSON)
    /// Ask for the hub's status: `{"type":"status"}`.
    case status

    /// Reads a client message, checking every member it needs.
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
        switch type {
        case "hello":
            guard let version = members["protocol"]?.intValue else {
                throw WireError(.badFrame, "hello needs an integer member \"protocol\" (this hub speaks \(syncProtocolVersion))")
            }
            guard let app = members["app"]?.stringValue else {
                throw WireError(.badFrame, "hello needs a string member \"app\" naming the app, e.g. \"counter\"")
            }
            let fingerprint = try Self.optionalString(members, "fingerprint")
            let name = try Self.optionalString(members, "name")
            self = .hello(protocolVersion: version, app: app, fingerprint: fingerprint, name: name)
        case "dispatch":
            guard let rawID = members["id"], let id = DispatchID(json: rawID) else {
                throw WireError(.badFrame, "dispatch needs a member \"id\" that is a string or an integer within ±(2^53 − 1)")
            }
            guard let action = members["action"] else {
                throw WireError(.badFrame, "dispatch needs a member \"action\"")
            }
            self = .dispatch(id: id, action: action)
        case "status":
            self = .status
        default:
            throw WireError(.unknownType, "unknown message type \"\(type)\"; a client sends hello, dispatch or status")
        }
    }

    private static func optionalString(_ members: [String: JSON], _ key: String) throws(WireError) -> String? {
        guard let value = members[key], !value.isNull else { return nil }
        guard let string = value.stringValue else {
            throw WireError(.badFrame, "hello member \"\(key)\" must be a string, not \(value.kindName)")
        }
        return string
    }

    /// The wire form.
    public var json: JSON {
        switch self {
        case .hello(let version, let app, let fingerprint, let name):
            var members: [String: JSON] = ["type": "hello", "protocol": JSON(version), "app": .string(app)]
            if let fingerprint { members["fingerprint"] = .string(fingerprint) }
            if let name { members["name"] = .string(name) }
            return .object(members)
        case .dispatch(let id, let action):
            return ["type": "dispatch", "id": id.json, "action": action]
        case .status:
            return ["type": "status"]
        }
    }
}

/// One attached replica, as listed in a status message.
public struct ReplicaInfo: Sendable, Equatable {
    /// The replica id the hub assigned.
    public let replica: Int
    /// The name from its hello, or "".
    public let name: String

    /// Creates an entry.
    ///
    /// - Parameters:
    ///   - replica: The id.
    ///   - name: The name.
    public init(replica: Int, name: String) {
        self.replica = replica
        self.name = name
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
    public init(protocolVersion: Int, app: String, fingerprint: String, hub: String, seq: UInt64,
                digest: String, replicas: [ReplicaInfo]) {
        self.protocolVersion = protocolVersion
        self.app = app
        self.fingerprint = fingerprint
        self.hub = hub
        self.seq = seq
        self.digest = digest
        self.replicas = replicas
    }
}

/// A message the hub sends to a client.
public enum HubMessage: Sendable, Equatable {
    /// Attached: the state as of `seq`, and this replica's id.
    case welcome(hub: String, replica: Int, seq: UInt64, state: JSON, digest: String)
    /// A sequenced action, sent to every attached replica including its origin.
    case action(seq: UInt64, origin: Int, id: DispatchID, action: JSON)
    /// The origin's dispatch `id` was refused; nothing was sequenced.
    case reject(id: DispatchID, error: WireError)
    /// A fatal error; the hub closes the connection after it.
    case error(WireError)
    /// The answer to `status`.
    case status(HubStatus)

    /// The wire form.
    public var json: JSON {
        switch self {
        case .welcome(let hub, let replica, let seq, let state, let digest):
            return ["type": "welcome", "protocol": JSON(syncProtocolVersion), "hub": .string(hub),
                    "replica": JSON(replica), "seq": JSON(seq), "state": state, "digest": .string(digest)]
        case .action(let seq, let origin, let id, let action):
            return ["type": "action", "seq": JSON(seq), "origin": JSON(origin), "id": id.json, "action": action]
        case .reject(let id, let error):
            return ["type": "reject", "id": id.json, "error": error.json]
        case .error(let error):
            return ["type": "error", "error": error.json]
        case .status(let status):
            return ["type": "status", "protocol": JSON(status.protocolVersion), "app": .string(status.app),
                    "fingerprint": .string(status.fingerprint), "hub": .string(status.hub),
                    "seq": JSON(status.seq), "digest": .string(status.digest),
                    "replicas": .array(status.replicas.map { ["replica": JSON($0.replica), "name": .string($0.name)] })]
        }
    }

    /// Reads a hub message.
    ///
    /// - Parameter json: The parsed frame payload.
    /// - Returns: The message.
    /// - Throws: ``WireError`` (`bad-json`, `unknown-type` or `bad-frame`) describing what is missing.
    public init(json: JSON) throws(WireError) {
        guard case .object(let m) = json, let type = m["type"]?.stringValue else {
            throw WireError(.badJSON, "a hub message must be a JSON object with a string \"type\"")
        }
        func int(_ key: String) throws(WireError) -> Int {
            guard let value = m[key]?.intValue else { throw WireError(.badFrame, "\(type) needs an integer \"\(key)\"") }
            return value
        }
        func seq(_ key: String) throws(WireError) -> UInt64 {
            let value = try int(key)
            guard value >= 0 else { throw WireError(.badFrame, "\(type) member \"\(key)\" must not be negative") }
            return UInt64(value)
        }
        func string(_ key: String) throws(WireError) -> String {
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
        switch type {
        case "welcome":
            guard let state = m["state"] else { throw WireError(.badFrame, "welcome needs a \"state\"") }
            self = .welcome(hub: try string("hub"), replica: try int("replica"), seq: try seq("seq"),
                            state: state, digest: try string("digest"))
        case "action":
            guard let action = m["action"] else { throw WireError(.badFrame, "action needs an \"action\"") }
            self = .action(seq: try seq("seq"), origin: try int("origin"), id: try id(), action: action)
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
                replicas.append(ReplicaInfo(replica: replica, name: entry["name"]?.stringValue ?? ""))
            }
            self = .status(HubStatus(protocolVersion: try int("protocol"), app: try string("app"),
                                     fingerprint: try string("fingerprint"), hub: try string("hub"),
                                     seq: try seq("seq"), digest: try string("digest"), replicas: replicas))
        default:
            throw WireError(.unknownType, "unknown hub message type \"\(type)\"")
        }
    }
}

extension Frame {
    /// Encodes a hub message as one frame (header and canonical JSON payload).
    ///
    /// - Parameter message: The message.
    /// - Returns: The frame's bytes.
    public static func encode(_ message: HubMessage) -> [UInt8] { encode(message.json) }

    /// Encodes a client message as one frame.
    ///
    /// - Parameter message: The message.
    /// - Returns: The frame's bytes.
    public static func encode(_ message: ClientMessage) -> [UInt8] { encode(message.json) }

    /// Appends one `action` frame to `buffer`, writing the envelope directly (no intermediate `JSON`).
    ///
    /// This is the hub's hot path: the envelope is encoded once and the same bytes go to
    /// every replica. The payload is `{"type":"action","seq":…,"origin":…,"id":…,"action":…}`.
    ///
    /// - Parameters:
    ///   - seq: The sequence number.
    ///   - origin: The dispatching replica.
    ///   - id: The origin's dispatch id.
    ///   - action: The action JSON.
    ///   - buffer: Where the frame goes.
    public static func appendActionEnvelope(seq: UInt64, origin: Int, id: DispatchID, action: JSON,
                                            to buffer: inout [UInt8]) {
        let start = buffer.count
        buffer.append(contentsOf: [0, 0, 0, 0])
        buffer.append(contentsOf: #"{"type":"action","seq":"#.utf8)
        JSON(seq).writeCanonical(into: &buffer)
        buffer.append(contentsOf: #","origin":"#.utf8)
        JSON(origin).writeCanonical(into: &buffer)
        buffer.append(contentsOf: #","id":"#.utf8)
        id.json.writeCanonical(into: &buffer)
        buffer.append(contentsOf: #","action":"#.utf8)
        action.writeCanonical(into: &buffer)
        buffer.append(UInt8(ascii: "}"))
        let length = UInt32(truncatingIfNeeded: buffer.count - start - Frame.headerSize)
        buffer[start] = UInt8(truncatingIfNeeded: length >> 24)
        buffer[start + 1] = UInt8(truncatingIfNeeded: length >> 16)
        buffer[start + 2] = UInt8(truncatingIfNeeded: length >> 8)
        buffer[start + 3] = UInt8(truncatingIfNeeded: length)
    }
}
