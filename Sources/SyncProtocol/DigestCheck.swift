/// What a replica last found when it compared its own state's digest with the hub's: the
/// `checked` member of a `status` request, which the hub shows back in that replica's entry of
/// `status.replicas` (PROTOCOL.md §3, §4, §12).
///
/// A replica compares digests at a `checkpoint` that follows the last action it applied, and
/// at a `status` reply whose seq is its own. It reports the newest such comparison with the
/// next `status` it sends; the hub keeps only the last report of each attached connection and
/// never acts on it: it is what the replica says, shown to an operator, not a proof.
public struct DigestCheck: Sendable, Hashable {
    /// The seq the replica compared at: its state right after that action.
    public var seq: UInt64
    /// Whether its digest equalled the hub's.
    public var agreed: Bool
    /// How many times, over its life, the client has found its state differing from the
    /// hub's and re-hydrated it from a full `welcome` (`nil`: it does not say).
    public var divergences: Int?

    /// Creates a report.
    ///
    /// - Parameters:
    ///   - seq: The seq compared at.
    ///   - agreed: Whether the digests were equal.
    ///   - divergences: How many times the client re-hydrated after a difference, if it says.
    public init(seq: UInt64, agreed: Bool, divergences: Int? = nil) {
        self.seq = seq
        self.agreed = agreed
        self.divergences = divergences
    }

    /// Reads a report as the hub does, strictly: `{"seq":integer ≥ 0,"agreed":boolean}`, with
    /// an optional integer `"divergences"` ≥ 0; other members are ignored.
    ///
    /// - Parameter json: The member's value (not `null`).
    /// - Throws: ``WireError`` `bad-frame` for any other shape.
    public init(json: JSON) throws(WireError) {
        let shape = "status member \"checked\" must be {\"seq\":integer ≥ 0,\"agreed\":boolean} with an optional \"divergences\":integer ≥ 0: the seq this client last compared its state's digest with the hub's at, and whether they were equal"
        guard let seq = json["seq"]?.uint64Value, let agreed = json["agreed"]?.boolValue else {
            throw WireError(.badFrame, shape)
        }
        var divergences: Int?
        if let raw = json["divergences"], !raw.isNull {
            guard let count = raw.uint64Value else { throw WireError(.badFrame, shape) }
            divergences = Int(clamping: count)
        }
        self.init(seq: seq, agreed: agreed, divergences: divergences)
    }

    /// Reads a report as a client does, leniently: `nil` for anything that is not one (the
    /// extension rule, PROTOCOL.md §1).
    ///
    /// - Parameter json: The member's value, if present.
    /// - Returns: The report, or `nil`.
    public static func lenient(_ json: JSON?) -> DigestCheck? {
        guard let json, !json.isNull else { return nil }
        return try? DigestCheck(json: json)
    }

    /// The wire form, `divergences` only when known.
    public var json: JSON {
        var members: [JSONKey: JSON] = ["seq": JSON(seq), "agreed": .bool(agreed)]
        if let divergences { members["divergences"] = JSON(divergences) }
        return .object(members)
    }
}
