import SyncCore

/// One sequenced action as a log keeps it: the same canonical JSON body in a journal segment
/// (framed by ``JournalFormat``) and in a replicated log's message.
///
/// The body is `{"action":…,"id":…,"origin":…,"seq":…}`, with `"session"` when the dispatch
/// named one, `"checkpoint"` (the state's digest right after the action) when a checkpoint
/// followed it, and the stamp's `"time"` and `"origin_name"` when it has them; members sorted
/// as RFC 8785 sorts them. A record written before stamps existed has none.
///
/// An upgrade record (``upgrade`` set) takes a seq as an action does and holds no action: its
/// body is `{"digest":…,"from":…,"id":…,"origin":…,"seq":…,"to":…,"upgrade":true}` (with the
/// stamp's members), which has no `"action"` so that no reader of action records takes it
/// for one, and a journal frames it with its own magic (``JournalFormat``).
package struct LogRecord: Sendable, Equatable {
    /// The sequence number.
    package var seq: UInt64
    /// The replica that dispatched it (unique within the history).
    package var origin: Int
    /// The dispatcher's id.
    package var id: DispatchID
    /// The dispatcher's session, if any.
    package var session: String?
    /// The action, as sequenced: parsed, or the canonical bytes a dispatch came with.
    package var wire: WireAction
    /// The action's JSON, as sequenced (parsed from ``wire`` when that holds bytes).
    package var action: JSON { wire.json }
    /// The state's digest right after this action, when a checkpoint followed it.
    package var checkpoint: String?
    /// When it was sequenced and its origin's name (chosen once, by the proposing hub).
    package var stamp: ActionStamp
    /// For an upgrade record: the versions and the migrated state's digest (``wire`` is then
    /// `null` and never applied).
    package var upgrade: LogUpgrade? {
        get { upgradeBox?.value }
        set { upgradeBox = newValue.map(UpgradeBox.init) }
    }
    /// Where ``upgrade`` is kept: one reference (8 bytes) in every record, not three strings
    /// (48), since recovery holds every record after the snapshot, upgrade or not.
    private var upgradeBox: UpgradeBox?

    /// Creates an upgrade record.
    ///
    /// - Parameters:
    ///   - seq: Its seq.
    ///   - origin: Who asked (0: the hub itself, or a client that is not attached).
    ///   - id: The request's id.
    ///   - upgrade: The versions and the migrated digest.
    ///   - stamp: When it was sequenced, and the asker's name.
    package init(seq: UInt64, origin: Int, id: DispatchID, upgrade: LogUpgrade, stamp: ActionStamp = .none) {
        self.init(seq: seq, origin: origin, id: id, wire: WireAction(.null), stamp: stamp)
        self.upgrade = upgrade
    }

    package init(seq: UInt64, origin: Int, id: DispatchID, session: String? = nil, action: JSON,
                 checkpoint: String? = nil, stamp: ActionStamp = .none) {
        self.init(seq: seq, origin: origin, id: id, session: session, wire: WireAction(action), checkpoint: checkpoint, stamp: stamp)
    }

    package init(seq: UInt64, origin: Int, id: DispatchID, session: String? = nil, wire: WireAction,
                 checkpoint: String? = nil, stamp: ActionStamp = .none) {
        self.seq = seq
        self.origin = origin
        self.id = id
        self.session = session
        self.wire = wire
        self.checkpoint = checkpoint
        self.stamp = stamp
    }

    /// Appends the canonical body to `buffer`, without building a `JSON` object.
    ///
    /// - Parameter buffer: Where the bytes go.
    package func writeBody(into buffer: inout [UInt8]) {
        if upgrade != nil {
            json.writeCanonical(into: &buffer)
            return
        }
        buffer.append(contentsOf: #"{"action":"#.utf8)
        wire.writeCanonical(into: &buffer)
        if let checkpoint {
            buffer.append(contentsOf: #","checkpoint":"#.utf8)
            JSON.string(checkpoint).writeCanonical(into: &buffer)
        }
        buffer.append(contentsOf: #","id":"#.utf8)
        id.json.writeCanonical(into: &buffer)
        buffer.append(contentsOf: #","origin":"#.utf8)
        JSON(origin).writeCanonical(into: &buffer)
        if let name = stamp.originName {
            buffer.append(contentsOf: #","origin_name":"#.utf8)
            JSON.string(name).writeCanonical(into: &buffer)
        }
        buffer.append(contentsOf: #","seq":"#.utf8)
        JSON(seq).writeCanonical(into: &buffer)
        if let session {
            buffer.append(contentsOf: #","session":"#.utf8)
            JSON.string(session).writeCanonical(into: &buffer)
        }
        if let time = stamp.time {
            buffer.append(contentsOf: #","time":"#.utf8)
            JSON.number(Double(time)).writeCanonical(into: &buffer)
        }
        buffer.append(UInt8(ascii: "}"))
    }

    /// The canonical body.
    package var body: [UInt8] {
        var bytes: [UInt8] = []
        writeBody(into: &bytes)
        return bytes
    }

    /// The body as a `JSON` value.
    package var json: JSON {
        if let upgrade {
            var members: [JSONKey: JSON] = ["seq": JSON(seq), "origin": JSON(origin), "id": id.json, "upgrade": true,
                                            "from": .string(upgrade.from), "to": .string(upgrade.to),
                                            "digest": .string(upgrade.digest)]
            stamp.write(into: &members)
            return .object(members)
        }
        var members: [JSONKey: JSON] = ["seq": JSON(seq), "origin": JSON(origin), "id": id.json, "action": wire.json]
        if let session { members["session"] = .string(session) }
        if let checkpoint { members["checkpoint"] = .string(checkpoint) }
        stamp.write(into: &members)
        return .object(members)
    }

    /// Reads a record's body written canonically, as ``writeBody(into:)`` writes it, without a
    /// tree: the action's bytes are kept as they are (the hub and the app decode them as a
    /// dispatch's), the other members parsed one by one. Recovery and a shared log's reader
    /// try it first: a journal of a million records replays in about half the time.
    ///
    /// - Parameter body: The body's bytes.
    /// - Returns: The record, or `nil` when the body is not of that shape (another member order,
    ///   an unknown member, an action outside ``JSON/isCanonical(_:maxDepth:)``'s subset, a
    ///   member of an unexpected type): read it with ``init(json:)``, which decides the same.
    package init?(canonicalBody body: UnsafeRawBufferPointer) {
        var seq: UInt64?, origin: Int?, id: DispatchID?, action: [UInt8]?
        var session: String?, checkpoint: String?, stamp = ActionStamp.none
        func scalar(_ value: UnsafeRawBufferPointer) -> JSON? { try? JSON(parsing: value, maxDepth: 0) }
        let whole = CanonicalObjectReader.forEachMember(in: body) { name, value in
            if Self.name(name, is: "action") {
                // As deep as the whole body may nest (the parser's limit), less the body's own level.
                guard JSON.isCanonical(value, maxDepth: 511) else { return false }
                action = Array(value)
            } else if Self.name(name, is: "checkpoint") {
                guard case .string(let text)? = scalar(value) else { return false }
                checkpoint = text
            } else if Self.name(name, is: "id") {
                guard let json = scalar(value), let parsed = DispatchID(json: json) else { return false }
                id = parsed
            } else if Self.name(name, is: "origin") {
                guard let number = scalar(value)?.intValue else { return false }
                origin = number
            } else if Self.name(name, is: "origin_name") {
                guard case .string(let text)? = scalar(value), !text.isEmpty else { return false }
                stamp.originName = text
            } else if Self.name(name, is: "time") {
                guard let number = scalar(value)?.uint64Value, number <= UInt64(ActionStamp.maxTime) else { return false }
                stamp.time = Int64(number)
            } else if Self.name(name, is: "seq") {
                guard let number = scalar(value)?.intValue, number > 0 else { return false }
                seq = UInt64(number)
            } else if Self.name(name, is: "session") {
                guard case .string(let text)? = scalar(value) else { return false }
                session = text
            } else {
                return false
            }
            return true
        }
        guard whole, let seq, let origin, let id, let action else { return nil }
        self.init(seq: seq, origin: origin, id: id, session: session, wire: WireAction(canonical: action), checkpoint: checkpoint,
                  stamp: stamp)
    }

    /// Whether a member name's bytes are `expected`.
    private static func name(_ name: UnsafeRawBufferPointer, is expected: StaticString) -> Bool {
        name.count == expected.utf8CodeUnitCount
            && name.elementsEqual(UnsafeBufferPointer(start: expected.utf8Start, count: expected.utf8CodeUnitCount))
    }

    /// Reads a record's body.
    ///
    /// - Parameter json: The body.
    /// - Returns: The record, or `nil` when a member is missing or of the wrong type.
    package init?(json: JSON) {
        if json["upgrade"]?.boolValue == true, json["action"] == nil {
            guard let seq = json["seq"]?.intValue, seq > 0, let origin = json["origin"]?.intValue, let rawID = json["id"],
                  let id = DispatchID(json: rawID), let upgrade = LogUpgrade(json: json) else {
                return nil
            }
            self.init(seq: UInt64(seq), origin: origin, id: id, upgrade: upgrade,
                      stamp: json.objectValue.map(ActionStamp.read(from:)) ?? .none)
            return
        }
        guard let seq = json["seq"]?.intValue, seq > 0, let origin = json["origin"]?.intValue,
              let rawID = json["id"], let id = DispatchID(json: rawID), let action = json["action"] else {
            return nil
        }
        self.init(seq: UInt64(seq), origin: origin, id: id, session: json["session"]?.stringValue, action: action,
                  checkpoint: json["checkpoint"]?.stringValue, stamp: json.objectValue.map(ActionStamp.read(from:)) ?? .none)
    }
}

/// What an upgrade record holds: the history moves from one version of its app to the next,
/// and the state migrated at that seq has this digest.
package struct LogUpgrade: Sendable, Equatable {
    /// The fingerprint before.
    package var from: String
    /// The fingerprint after.
    package var to: String
    /// The digest of the migrated state.
    package var digest: String

    package init(from: String, to: String, digest: String) {
        self.from = from
        self.to = to
        self.digest = digest
    }

    /// Whether a text read from storage is a plausible fingerprint (`NAME@VERSION`, at most
    /// 256 bytes, no control characters): what a record written by another process may name.
    package static func isFingerprint(_ text: String) -> Bool {
        text.utf8.count <= 256 && text.contains("@")
            && !text.unicodeScalars.contains { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }
    }

    /// Whether a text read from storage is a digest as the hub writes them: 16 lowercase hex digits.
    package static func isDigest(_ text: String) -> Bool {
        text.utf8.count == 16 && text.utf8.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains($0) }
    }

    /// Reads `from`, `to` and `digest` from a record's body or a `storesync.json` entry, never
    /// trusting what another process wrote: plausible fingerprints, a digest as the hub writes it.
    ///
    /// - Parameter json: The object.
    /// - Returns: The upgrade, or `nil` when a member is missing or malformed.
    package init?(json: JSON) {
        guard let from = json["from"]?.stringValue, let to = json["to"]?.stringValue, let digest = json["digest"]?.stringValue,
              Self.isFingerprint(from), Self.isFingerprint(to), Self.isDigest(digest) else { return nil }
        self.init(from: from, to: to, digest: digest)
    }

    /// The `storesync.json` entry: `{"digest":…,"from":…,"seq":…,"to":…}`.
    package func json(seq: UInt64) -> JSON {
        ["seq": JSON(seq), "from": .string(from), "to": .string(to), "digest": .string(digest)]
    }
}

/// An upgrade kept out of line by ``LogRecord`` (immutable, so sharing it is safe).
private final class UpgradeBox: Sendable, Equatable {
    let value: LogUpgrade

    init(_ value: LogUpgrade) { self.value = value }

    static func == (lhs: UpgradeBox, rhs: UpgradeBox) -> Bool { lhs.value == rhs.value }
}
