extension HubMessage {
    /// Reads an `action` frame the way the hub writes it —
    /// `{"type":"action","seq":S,"origin":O,"id":I,"action":A}`, members in that order, integer
    /// `seq`/`origin`/`id` — without building a `JSON` object for the envelope: only the
    /// action's own value is parsed. The replica's hot path.
    ///
    /// Any other frame (another type, other member order or spelling, a string id, an extra
    /// member) returns `nil`, and the caller reads it with ``init(json:)``: this is a fast path,
    /// never a second protocol.
    ///
    /// - Parameter payload: A frame's payload.
    /// - Returns: The message, or `nil` when the fast path does not apply.
    public static func fastAction(_ payload: UnsafeRawBufferPointer) -> HubMessage? {
        var cursor = 0
        func expect(_ literal: StaticString) -> Bool {
            let count = literal.utf8CodeUnitCount
            guard payload.count - cursor >= count else { return false }
            let matches = literal.withUTF8Buffer { text in
                for index in 0..<count where payload[cursor + index] != text[index] { return false }
                return true
            }
            if matches { cursor += count }
            return matches
        }
        /// A non-negative decimal integer without leading zeros, at most 2^53 − 1.
        func integer() -> Int? {
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
        guard expect(#"{"type":"action","seq":"#), let seq = integer(),
              expect(#","origin":"#), let origin = integer(),
              expect(#","id":"#), let id = integer(),
              expect(#","action":"#),
              payload.count - cursor >= 2, payload[payload.count - 1] == UInt8(ascii: "}") else { return nil }
        // The action is everything up to the closing brace; an extra member after it makes
        // this slice fail to parse as one value, and the frame takes the general path.
        let slice = UnsafeRawBufferPointer(rebasing: payload[cursor..<(payload.count - 1)])
        guard let action = try? JSON(parsing: slice) else { return nil }
        return .action(seq: UInt64(seq), origin: origin, id: .number(id), action: action)
    }
}
