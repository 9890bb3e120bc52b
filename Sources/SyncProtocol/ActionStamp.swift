/// What the hub records about a sequenced action besides its seq, origin and id: when it was
/// sequenced, and the name its origin gave. A reducer never sees it.
///
/// The sequencing hub chooses it once, when it proposes the action; the journal and a shared
/// log's records keep it, so every hub and every restart serves the same stamp for a seq.
/// On the wire it is the `action` message's `time` and `origin_name` members (PROTOCOL.md §4);
/// both are absent for an action sequenced by a hub that did not record them.
public struct ActionStamp: Sendable, Hashable {
    /// When the hub sequenced the action: milliseconds since 1970-01-01T00:00:00Z by the
    /// proposing hub's clock (several hubs' clocks may disagree a little), or `nil` when not
    /// recorded.
    public var time: Int64?
    /// The name the origin replica gave in its `hello`, or `nil` when it gave none.
    public var originName: String?

    /// No stamp: neither time nor name.
    public static let none = ActionStamp()

    /// Creates a stamp.
    ///
    /// - Parameters:
    ///   - time: Milliseconds since the Unix epoch when the action was sequenced.
    ///   - originName: The origin's name; an empty name is kept as `nil`.
    public init(time: Int64? = nil, originName: String? = nil) {
        self.time = time
        self.originName = originName.flatMap { $0.isEmpty ? nil : $0 }
    }

    /// The largest time a stamp carries: JSON's exact integers (2^53 − 1 ms, year 287396).
    public static let maxTime: Int64 = (1 << 53) - 1

    /// Reads the stamp's members from an object (an `action` message, a log record): a member
    /// of another type or out of range is left out, never an error (the extension rule).
    ///
    /// - Parameter members: The object's members.
    /// - Returns: The stamp.
    public static func read(from members: [JSONKey: JSON]) -> ActionStamp {
        var time: Int64?
        if let value = members["time"]?.uint64Value, value <= UInt64(maxTime) { time = Int64(value) }
        return ActionStamp(time: time, originName: members["origin_name"]?.stringValue)
    }

    /// Adds the stamp's members to an object.
    ///
    /// - Parameter members: The object's members.
    public func write(into members: inout [JSONKey: JSON]) {
        if let time { members["time"] = .number(Double(time)) }
        if let originName { members["origin_name"] = .string(originName) }
    }
}
