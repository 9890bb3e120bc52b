import SyncCore
import SyncPOSIX

/// One sequenced action as the commands print it: `watch`, `history`, `attach --json` and
/// `attach`'s `:history`.
struct SequencedAction: Sendable {
    /// Its seq.
    var seq: UInt64
    /// The replica that dispatched it.
    var origin: Int
    /// The dispatcher's id.
    var id: DispatchID
    /// The action.
    var action: JSON
    /// When the hub sequenced it, and its origin's name.
    var stamp: ActionStamp

    /// Reads an `action` message; `nil` for any other.
    ///
    /// - Parameter message: A message from the hub.
    init?(_ message: HubMessage) {
        guard case .action(let seq, let origin, let id, let action, let stamp) = message else { return nil }
        self.init(seq: seq, origin: origin, id: id, action: action, stamp: stamp)
    }

    init(seq: UInt64, origin: Int, id: DispatchID, action: JSON, stamp: ActionStamp) {
        self.seq = seq
        self.origin = origin
        self.id = id
        self.action = action
        self.stamp = stamp
    }

    /// The JSON line: `{"action":…,"id":…,"origin":…,"origin_name":…,"seq":…,"time":…}`, the
    /// name only when the origin gave one, the time (RFC 3339, UTC, milliseconds) only when the
    /// hub recorded it; with `patch` when given.
    ///
    /// - Parameter patch: The JSON Patch the action made (`--diff`).
    /// - Returns: The line's object.
    func json(patch: [JSON]? = nil) -> JSON {
        var members: [JSONKey: JSON] = ["seq": JSON(seq), "origin": JSON(origin), "id": id.json, "action": action]
        if let name = stamp.originName { members["origin_name"] = .string(name) }
        if let time = stamp.time { members["time"] = .string(LogTimestamp.format(milliseconds: time)) }
        if let patch { members["patch"] = .array(patch) }
        return .object(members)
    }

    /// Who dispatched it, for a human: `replica 3`, `replica 3 (alice)`, `replica 3 (you)` or
    /// `replica 3 (alice, you)`; the name escaped for a terminal.
    ///
    /// - Parameter own: Whether this replica dispatched it.
    /// - Returns: The words.
    func originText(own: Bool) -> String {
        var notes: [String] = []
        if let name = stamp.originName { notes.append(ControlCharacters.escaped(name)) }
        if own { notes.append("you") }
        return "replica \(origin)" + (notes.isEmpty ? "" : " (\(notes.joined(separator: ", ")))")
    }

    /// `attach`'s line for it: `#SEQ from replica N (NAME, you): ACTION`; with `time`, the
    /// sequencing time (UTC) follows the seq (`:history`).
    ///
    /// - Parameters:
    ///   - own: Whether this replica dispatched it.
    ///   - time: Whether to show when it was sequenced.
    /// - Returns: The line.
    func text(own: Bool, time: Bool = false) -> String {
        let when = time ? stamp.time.map { " at " + LogTimestamp.format(milliseconds: $0) } ?? "" : ""
        return "#\(seq)\(when) from \(originText(own: own)): \(action.canonicalString)"
    }
}
