/// Where an `action` frame written the hub's way holds its parts: the envelope's integers and
/// the byte range of the action's value, found without parsing anything (see
/// ``HubMessage/actionEnvelope(_:)``).
public struct ActionEnvelope: Sendable, Equatable {
    /// The action's seq.
    public var seq: UInt64
    /// The dispatching replica.
    public var origin: Int
    /// The dispatcher's id (an integer on this path).
    public var id: Int
    /// When it was sequenced (milliseconds since the Unix epoch), when the frame says.
    public var time: Int64?
    /// Where the origin's name is in the payload (the string's bytes, without quotes), when
    /// the frame has one; read it with ``stamp(in:)``, only when it is needed.
    public var originName: Range<Int>?
    /// Where the action's value is in the payload: up to, not including, the closing `}`.
    /// Whether it is exactly one JSON value is not checked here.
    public var action: Range<Int>

    /// The stamp: the time, and the origin's name decoded from the payload.
    ///
    /// - Parameter payload: The frame's payload this envelope was found in.
    /// - Returns: The stamp (a name that is not valid UTF-8 is left out).
    public func stamp(in payload: UnsafeRawBufferPointer) -> ActionStamp {
        let name = originName.flatMap { range -> String? in
            guard range.lowerBound >= 0, range.upperBound <= payload.count else { return nil }
            return String(validating: UnsafeRawBufferPointer(rebasing: payload[range]), as: UTF8.self)
        }
        return ActionStamp(time: time, originName: name)
    }
}

extension HubMessage {
    /// Finds the parts of an `action` frame written the way the hub writes it —
    /// `{"type":"action","seq":S,"origin":O,"id":I,"origin_name":N,"time":T,"action":A}`, members
    /// in that order (`origin_name` and `time` each optional, a name without escapes), integer
    /// `seq`/`origin`/`id`/`time` — without parsing: the replica's hot path. The action's bytes still
    /// have to be read as one value (``fastAction(_:)`` parses them; an app may decode them
    /// directly); if they are not one value (an extra member after the action), the frame is
    /// read with ``init(json:)``.
    ///
    /// - Parameter payload: A frame's payload.
    /// - Returns: The envelope, or `nil` when the frame is not of this shape.
    public static func actionEnvelope(_ payload: UnsafeRawBufferPointer) -> ActionEnvelope? {
        var cursor = 0
        guard expect(#"{"type":"action","seq":"#, in: payload, at: &cursor), let seq = integer(in: payload, at: &cursor),
              expect(#","origin":"#, in: payload, at: &cursor), let origin = integer(in: payload, at: &cursor),
              expect(#","id":"#, in: payload, at: &cursor), let id = integer(in: payload, at: &cursor) else { return nil }
        var originName: Range<Int>?
        var time: Int64?
        if expect(#","origin_name":""#, in: payload, at: &cursor) {
            guard let name = plainString(in: payload, at: &cursor) else { return nil }
            originName = name
        }
        if expect(#","time":"#, in: payload, at: &cursor) {
            guard let value = integer(in: payload, at: &cursor) else { return nil }
            time = Int64(value)
        }
        guard expect(#","action":"#, in: payload, at: &cursor),
              payload.count - cursor >= 2, payload[payload.count - 1] == UInt8(ascii: "}") else { return nil }
        return ActionEnvelope(seq: UInt64(seq), origin: origin, id: id, time: time, originName: originName,
                              action: cursor..<(payload.count - 1))
    }

    /// The seq of an `action` frame written the hub's way, read from its first members only;
    /// `nil` for any other frame (a `checkpoint`).
    ///
    /// Unlike ``actionEnvelope(_:)``, the replica's fast path, which takes only integer ids and
    /// leaves every other frame to the parser, this never looks at the id: the hub answers
    /// `history` from its backlog's frames with it, with no slower path to fall back on.
    ///
    /// - Parameter payload: A frame's payload.
    /// - Returns: The action's seq, or `nil` when the payload is not an `action` frame.
    public static func actionSeq(_ payload: UnsafeRawBufferPointer) -> UInt64? {
        var cursor = 0
        guard expect(#"{"type":"action","seq":"#, in: payload, at: &cursor), let seq = integer(in: payload, at: &cursor),
              cursor < payload.count, payload[cursor] == UInt8(ascii: ",") else { return nil }
        return UInt64(seq)
    }

    /// Reads an `action` frame the way the hub writes it (see ``actionEnvelope(_:)``) without
    /// building a `JSON` object for the envelope: only the action's own value is parsed.
    ///
    /// Any other frame (another type, other member order or spelling, a string id, an extra
    /// member) returns `nil`, and the caller reads it with ``init(json:)``: this is a fast path,
    /// never a second protocol.
    ///
    /// - Parameter payload: A frame's payload.
    /// - Returns: The message, or `nil` when the fast path does not apply.
    public static func fastAction(_ payload: UnsafeRawBufferPointer) -> HubMessage? {
        guard let envelope = actionEnvelope(payload) else { return nil }
        // An extra member after the action makes this slice fail to parse as one value, and the
        // frame takes the general path.
        guard let action = try? JSON(parsing: UnsafeRawBufferPointer(rebasing: payload[envelope.action]), maxDepth: 511) else {
            return nil
        }
        return .action(seq: envelope.seq, origin: envelope.origin, id: .number(envelope.id), action: action,
                       stamp: envelope.stamp(in: payload))
    }

    /// Whether `literal` is at `cursor`; if so the cursor moves past it.
    @inline(__always)
    private static func expect(_ literal: StaticString, in payload: UnsafeRawBufferPointer, at cursor: inout Int) -> Bool {
        payload.matches(literal, at: &cursor)
    }

    /// Where the rest of a JSON string whose opening quote was read lies, when it holds no
    /// escape and no control character (else `nil`: the general path reads it); the cursor
    /// moves past the closing quote. Its UTF-8 is checked when it is decoded.
    private static func plainString(in payload: UnsafeRawBufferPointer, at cursor: inout Int) -> Range<Int>? {
        let start = cursor
        while cursor < payload.count {
            let byte = payload[cursor]
            if byte == UInt8(ascii: "\"") {
                defer { cursor += 1 }
                return start..<cursor
            }
            guard byte >= 0x20, byte != UInt8(ascii: "\\") else { return nil }
            cursor += 1
        }
        return nil
    }

    /// A non-negative decimal integer without leading zeros, at most 2^53 − 1.
    @inline(__always)
    private static func integer(in payload: UnsafeRawBufferPointer, at cursor: inout Int) -> Int? {
        let start = cursor
        var value = 0
        while cursor < payload.count, payload[cursor] >= 0x30, payload[cursor] <= 0x39 {
            guard cursor - start < 16 else { return nil }
            value = value * 10 + Int(payload[cursor] - 0x30)
            cursor += 1
        }
        guard cursor > start, payload[start] != 0x30 || cursor - start == 1, value <= DispatchID.maxInteger else {
            return nil
        }
        return value
    }
}

extension UnsafeRawBufferPointer {
    /// Whether `literal`'s bytes are at `cursor` (compared eight bytes at a time); if so the
    /// cursor moves past them. The fast paths' fixed parts of a message.
    @inline(__always)
    func matches(_ literal: StaticString, at cursor: inout Int) -> Bool {
        let count = literal.utf8CodeUnitCount
        guard cursor >= 0, self.count - cursor >= count, let base = baseAddress else { return false }
        let text = UnsafeRawPointer(literal.utf8Start)
        var index = 0
        while index + 8 <= count {
            guard base.loadUnaligned(fromByteOffset: cursor + index, as: UInt64.self)
                    == text.loadUnaligned(fromByteOffset: index, as: UInt64.self) else { return false }
            index += 8
        }
        while index < count {
            guard base.load(fromByteOffset: cursor + index, as: UInt8.self) == text.load(fromByteOffset: index, as: UInt8.self) else {
                return false
            }
            index += 1
        }
        cursor += count
        return true
    }
}
