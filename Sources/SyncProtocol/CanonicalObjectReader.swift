/// The top-level members of a JSON object in canonical form, found without building a tree.
///
/// Byte-level action decoders (`TaggedCases`' on the replica's per-action path) use it to
/// find an action's members and parse only their values. It finds where each value lies; it
/// does not check a value's contents: a caller parses every value it keeps
/// (`JSON(parsing:maxDepth:)`), and treats one it cannot parse as "not for the fast path".
package enum CanonicalObjectReader {
    /// Calls `body` with each member's name and value bytes, in order.
    ///
    /// The bytes must be one object with no whitespace, whose member names are printable ASCII
    /// without escapes, in strictly increasing byte order (so no name appears twice): what the
    /// canonical writer produces for such names. Anything else answers `false` and the caller
    /// takes its general path.
    ///
    /// - Parameters:
    ///   - bytes: The object's bytes.
    ///   - body: Receives a member's name (without quotes) and value bytes; returns `false` to stop.
    /// - Returns: Whether the whole object was read and `body` never stopped it.
    package static func forEachMember(
        in bytes: UnsafeRawBufferPointer,
        _ body: (_ name: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer) -> Bool
    ) -> Bool {
        var cursor = 0
        guard bytes.count >= 2, bytes[0] == UInt8(ascii: "{") else { return false }
        cursor = 1
        if bytes[cursor] == UInt8(ascii: "}") { return bytes.count == 2 }
        var previous: UnsafeRawBufferPointer?
        while true {
            guard cursor < bytes.count, bytes[cursor] == UInt8(ascii: "\"") else { return false }
            let nameStart = cursor + 1
            var nameEnd = nameStart
            while nameEnd < bytes.count, bytes[nameEnd] != UInt8(ascii: "\"") {
                let byte = bytes[nameEnd]
                guard byte >= 0x20, byte < 0x7F, byte != UInt8(ascii: "\\") else { return false }
                nameEnd += 1
            }
            guard nameEnd + 1 < bytes.count, bytes[nameEnd + 1] == UInt8(ascii: ":") else { return false }
            let name = UnsafeRawBufferPointer(rebasing: bytes[nameStart..<nameEnd])
            if let previous, !precedes(previous, name) { return false }
            previous = name
            let valueStart = nameEnd + 2
            guard let valueEnd = endOfValue(in: bytes, from: valueStart) else { return false }
            guard body(name, UnsafeRawBufferPointer(rebasing: bytes[valueStart..<valueEnd])) else { return false }
            cursor = valueEnd
            guard cursor < bytes.count else { return false }
            if bytes[cursor] == UInt8(ascii: "}") { return cursor + 1 == bytes.count }
            guard bytes[cursor] == UInt8(ascii: ",") else { return false }
            cursor += 1
        }
    }

    /// Whether `lhs` sorts strictly before `rhs`, byte by byte (a prefix first).
    private static func precedes(_ lhs: UnsafeRawBufferPointer, _ rhs: UnsafeRawBufferPointer) -> Bool {
        for index in 0..<min(lhs.count, rhs.count) where lhs[index] != rhs[index] {
            return lhs[index] < rhs[index]
        }
        return lhs.count < rhs.count
    }

    /// Where the value starting at `start` ends: after its closing quote or bracket, or at the
    /// `,`, `}` or `]` that ends a scalar; `nil` when it does not end. Only the extent is
    /// found (strings' escapes skipped, brackets counted); the caller parses the value.
    ///
    /// - Parameters:
    ///   - bytes: The bytes.
    ///   - start: Where the value starts.
    /// - Returns: The index just past the value, or `nil`.
    package static func endOfValue(in bytes: UnsafeRawBufferPointer, from start: Int) -> Int? {
        var cursor = start
        var depth = 0
        var inString = false
        while cursor < bytes.count {
            let byte = bytes[cursor]
            if inString {
                if byte == UInt8(ascii: "\\") {
                    cursor += 1
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                    if depth == 0 { return cursor + 1 }
                }
            } else {
                switch byte {
                case UInt8(ascii: "\""):
                    inString = true
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    if depth == 0 { return cursor > start ? cursor : nil }
                    depth -= 1
                    if depth == 0 { return cursor + 1 }
                case UInt8(ascii: ","):
                    if depth == 0 { return cursor > start ? cursor : nil }
                default:
                    break
                }
            }
            cursor += 1
        }
        return nil
    }
}
