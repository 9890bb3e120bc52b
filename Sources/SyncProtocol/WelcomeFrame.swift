extension Welcome {
    /// A full welcome's frame as the hub writes it, around the state's bytes, which it keeps
    /// serialised once per seq and sends without copying them into the frame: the length
    /// header and the members before the state, and what closes the object after it.
    ///
    /// Members, in the hub's order: `type`, `protocol`, `hub`, `history`, `replica`, `seq`,
    /// `resumed` (false), `digest`, `fingerprint` (when given), `max_frame_bytes`, `state`. ``HubMessage/init(json:)`` reads
    /// the frame's payload as ``HubMessage/welcome(_:)`` with these values (`WelcomeFrameTests`).
    ///
    /// - Parameters:
    ///   - hub: The hub's run id.
    ///   - history: The history id.
    ///   - replica: The replica id given to the connection.
    ///   - seq: The seq the state was taken at.
    ///   - digest: The state's digest.
    ///   - fingerprint: The app version the state is of.
    ///   - maxFrameBytes: The hub's frame limit for clients.
    ///   - stateByteCount: How many bytes the state's JSON takes.
    /// - Returns: The bytes before the state (header included) and after it.
    /// - Throws: ``FrameError/tooLarge(length:limit:)`` when the payload would not fit a frame.
    public static func frame(hub: String, history: String, replica: Int, seq: UInt64, digest: String, fingerprint: String? = nil,
                             maxFrameBytes: Int, stateByteCount: Int) throws(FrameError) -> (prefix: [UInt8], suffix: [UInt8]) {
        var members: [UInt8] = []
        members.reserveCapacity(256)
        members.append(contentsOf: #"{"type":"welcome","protocol":"#.utf8)
        JSON(syncProtocolVersion).writeCanonical(into: &members)
        members.append(contentsOf: #","hub":"#.utf8)
        JSON.string(hub).writeCanonical(into: &members)
        members.append(contentsOf: #","history":"#.utf8)
        JSON.string(history).writeCanonical(into: &members)
        members.append(contentsOf: #","replica":"#.utf8)
        JSON(replica).writeCanonical(into: &members)
        members.append(contentsOf: #","seq":"#.utf8)
        JSON(seq).writeCanonical(into: &members)
        members.append(contentsOf: #","resumed":false"#.utf8)
        members.append(contentsOf: #","digest":"#.utf8)
        JSON.string(digest).writeCanonical(into: &members)
        if let fingerprint {
            members.append(contentsOf: #","fingerprint":"#.utf8)
            JSON.string(fingerprint).writeCanonical(into: &members)
        }
        members.append(contentsOf: #","max_frame_bytes":"#.utf8)
        JSON(maxFrameBytes).writeCanonical(into: &members)
        members.append(contentsOf: #","state":"#.utf8)
        let (length, overflow) = stateByteCount.addingReportingOverflow(members.count + 1)
        guard !overflow, length <= Frame.maxPayloadBytes else {
            throw FrameError.tooLarge(length: overflow ? Int.max : length, limit: Frame.maxPayloadBytes)
        }
        var prefix: [UInt8] = []
        prefix.reserveCapacity(Frame.headerSize + members.count)
        try Frame.appendHeader(length: length, to: &prefix)
        prefix.append(contentsOf: members)
        return (prefix, [UInt8(ascii: "}")])
    }
}
