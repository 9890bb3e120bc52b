/// The hub's answer to `history` (PROTOCOL.md §4): a page of the sequenced actions still in its
/// resume window, or why there is none.
public struct HistoryReply: Sendable, Equatable {
    /// A page of actions, or a refusal (`history-unavailable`: the connection goes on).
    public enum Outcome: Sendable, Equatable {
        /// The `action` messages from `from` through `to`, in seq order.
        case actions([HubMessage])
        /// Why the hub cannot answer.
        case refused(WireError)
    }

    /// The first seq asked.
    public var from: UInt64
    /// The last seq in the page (a refusal: the last one asked).
    public var to: UInt64
    /// The hub's applied seq when it answered.
    public var seq: UInt64
    /// The request's id, when it gave one.
    public var id: DispatchID?
    /// The page, or the refusal.
    public var outcome: Outcome
    /// The upgrades within the page (`"upgrades"`, absent when none): at each one's seq the
    /// history moved to another app version, and holds no action. A client that predates
    /// upgrades ignores the member (and sees no action at that seq).
    public var upgrades: [UpgradeNotice] = []

    /// Creates a reply.
    ///
    /// - Parameters:
    ///   - from: The first seq asked.
    ///   - to: The last seq in the page.
    ///   - seq: The hub's applied seq.
    ///   - id: The request's id.
    ///   - outcome: The page, or the refusal.
    public init(from: UInt64, to: UInt64, seq: UInt64, id: DispatchID? = nil, outcome: Outcome) {
        self.from = from
        self.to = to
        self.seq = seq
        self.id = id
        self.outcome = outcome
    }

    /// The wire form (members in canonical order; ``payload(from:id:seq:to:actionPayloads:)``
    /// writes the same members in the hub's order).
    public var json: JSON {
        var members: [JSONKey: JSON] = ["type": "history", "from": JSON(from), "seq": JSON(seq), "to": JSON(to)]
        if let id { members["id"] = id.json }
        switch outcome {
        case .actions(let actions): members["actions"] = .array(actions.map(\.json))
        case .refused(let error): members["error"] = error.json
        }
        if !upgrades.isEmpty { members["upgrades"] = .array(upgrades.map(Self.upgradeJSON)) }
        return .object(members)
    }

    /// Reads a reply's members (``HubMessage/init(json:)`` calls it for `"type":"history"`).
    ///
    /// - Parameter members: The message's members.
    /// - Throws: ``WireError`` `bad-frame` when a member is missing or of the wrong type, or an
    ///   item of `actions` is not an `action` message.
    init(members m: [JSONKey: JSON]) throws(WireError) {
        func seq(_ key: JSONKey) throws(WireError) -> UInt64 {
            guard let value = m[key]?.intValue, value >= 0 else {
                throw WireError(.badFrame, "history needs \"\(key)\", an integer ≥ 0")
            }
            return UInt64(value)
        }
        from = try seq("from")
        to = try seq("to")
        self.seq = try seq("seq")
        if let raw = m["id"] {
            guard let id = DispatchID(json: raw) else { throw WireError(.badFrame, "history member \"id\" must be a string or an integer") }
            self.id = id
        }
        if let error = m["error"] {
            guard let code = error["code"]?.stringValue, let message = error["message"]?.stringValue else {
                throw WireError(.badFrame, "history needs an \"error\" object with string \"code\" and \"message\"")
            }
            outcome = .refused(WireError(rawCode: code, message: message))
            return
        }
        guard let items = m["actions"]?.arrayValue else { throw WireError(.badFrame, "history needs \"actions\" or \"error\"") }
        var actions: [HubMessage] = []
        actions.reserveCapacity(items.count)
        for item in items {
            guard let message = try? HubMessage(json: item), case .action = message else {
                throw WireError(.badFrame, "a history reply holds something other than an action: \(ControlCharacters.escaped(String(item.canonicalString.prefix(200))))")
            }
            actions.append(message)
        }
        outcome = .actions(actions)
        for item in m["upgrades"]?.arrayValue ?? [] {
            guard let seq = item["seq"]?.uint64Value, let from = item["from"]?.stringValue, let to = item["to"]?.stringValue,
                  let digest = item["digest"]?.stringValue else {
                throw WireError(.badFrame, "a history reply's upgrades need \"seq\", \"from\", \"to\" and \"digest\"")
            }
            upgrades.append(UpgradeNotice(seq: seq, from: from, to: to, digest: digest))
        }
    }

    /// One item of `upgrades`: `{"digest":…,"from":…,"seq":…,"to":…}`.
    static func upgradeJSON(_ notice: UpgradeNotice) -> JSON {
        ["seq": JSON(notice.seq), "from": .string(notice.from), "to": .string(notice.to), "digest": .string(notice.digest)]
    }

    /// A page's payload as the hub writes it: `{"type":"history","from":F[,"id":I],"seq":S,
    /// "to":T,"actions":[…]}`, the actions being the hub's own `action` frame payloads copied
    /// as they are (the backlog's bytes, never parsed). ``HubMessage/init(json:)`` reads it
    /// as ``json`` writes it.
    ///
    /// - Parameters:
    ///   - from: The first seq asked.
    ///   - id: The request's id.
    ///   - seq: The hub's applied seq.
    ///   - to: The last seq in the page.
    ///   - actionPayloads: The `action` payloads, already separated by commas.
    ///   - upgrades: The upgrades within the page (written as `"upgrades"` when there are any).
    /// - Returns: The payload (without a frame header).
    public static func payload(from: UInt64, id: DispatchID?, seq: UInt64, to: UInt64, actionPayloads: [UInt8],
                               upgrades: [UpgradeNotice] = []) -> [UInt8] {
        var payload = head(from: from, id: id, seq: seq, to: to)
        payload.append(contentsOf: #","actions":["#.utf8)
        payload.append(contentsOf: actionPayloads)
        payload.append(UInt8(ascii: "]"))
        if !upgrades.isEmpty {
            payload.append(contentsOf: #","upgrades":"#.utf8)
            JSON.array(upgrades.map(upgradeJSON)).writeCanonical(into: &payload)
        }
        payload.append(UInt8(ascii: "}"))
        return payload
    }

    /// A refusal's payload as the hub writes it: `{"type":"history","from":F[,"id":I],"seq":S,
    /// "to":T,"error":{"code":"history-unavailable","message":M}}`.
    ///
    /// - Parameters:
    ///   - from: The first seq asked.
    ///   - id: The request's id.
    ///   - seq: The hub's applied seq.
    ///   - to: The last seq asked.
    ///   - message: Why, and what to do.
    /// - Returns: The payload (without a frame header).
    public static func refusalPayload(from: UInt64, id: DispatchID?, seq: UInt64, to: UInt64, message: String) -> [UInt8] {
        var payload = head(from: from, id: id, seq: seq, to: to)
        payload.append(contentsOf: #","error":"#.utf8)
        WireError(.historyUnavailable, message).json.writeCanonical(into: &payload)
        payload.append(UInt8(ascii: "}"))
        return payload
    }

    private static func head(from: UInt64, id: DispatchID?, seq: UInt64, to: UInt64) -> [UInt8] {
        var head = Array(#"{"type":"history","from":"#.utf8)
        head.append(contentsOf: String(from).utf8)
        if let id {
            head.append(contentsOf: #","id":"#.utf8)
            id.json.writeCanonical(into: &head)
        }
        head.append(contentsOf: #","seq":"#.utf8)
        head.append(contentsOf: String(seq).utf8)
        head.append(contentsOf: #","to":"#.utf8)
        head.append(contentsOf: String(to).utf8)
        return head
    }
}
