/// An action as the hub holds it between a `dispatch` and the frames and records it writes:
/// either a parsed ``JSON`` value, or the bytes of its canonical form (RFC 8785), which are
/// written out as they are, never parsed and re-encoded.
///
/// Two wire actions are equal when their canonical bytes are.
public struct WireAction: Sendable, Equatable {
    @usableFromInline enum Storage: Sendable {
        case tree(JSON)
        case canonical([UInt8])
    }

    @usableFromInline let storage: Storage

    /// An action held as a parsed value.
    ///
    /// - Parameter json: The action.
    public init(_ json: JSON) { storage = .tree(json) }

    /// An action held as its canonical bytes.
    ///
    /// - Parameter bytes: Exactly the canonical form of one JSON value (see
    ///   ``JSON/isCanonical(_:maxDepth:)``); nothing checks it here.
    public init(canonical bytes: [UInt8]) { storage = .canonical(bytes) }

    /// The action as a `JSON` value (parsed from the canonical bytes when it is held as bytes).
    public var json: JSON {
        switch storage {
        case .tree(let json): json
        // Canonical bytes are valid JSON; only a nesting deeper than any frame carries can fail
        // the default limit, so the parse is retried without it before giving up.
        case .canonical(let bytes): (try? JSON(parsing: bytes)) ?? (try? JSON(parsing: bytes, maxDepth: Int.max)) ?? .string(String(decoding: bytes, as: UTF8.self))
        }
    }

    /// Its canonical bytes.
    public var canonicalBytes: [UInt8] {
        switch storage {
        case .tree(let json): json.canonicalBytes
        case .canonical(let bytes): bytes
        }
    }

    /// Appends its canonical bytes to `buffer` (a copy when it is held as bytes).
    ///
    /// - Parameter buffer: Where the bytes go.
    @inlinable public func writeCanonical(into buffer: inout [UInt8]) {
        switch storage {
        case .tree(let json): json.writeCanonical(into: &buffer)
        case .canonical(let bytes): buffer.append(contentsOf: bytes)
        }
    }

    /// Calls `body` with the canonical bytes when the action is held as bytes.
    ///
    /// - Parameter body: Reads the bytes.
    /// - Returns: What `body` returned, or `nil` when the action is held as a parsed value.
    @inlinable public func withCanonicalBytes<Result>(_ body: (UnsafeRawBufferPointer) -> Result) -> Result? {
        guard case .canonical(let bytes) = storage else { return nil }
        return bytes.withUnsafeBytes(body)
    }

    public static func == (lhs: WireAction, rhs: WireAction) -> Bool {
        lhs.canonicalBytes == rhs.canonicalBytes
    }
}

extension JSON {
    /// Whether `bytes` are exactly the canonical form (RFC 8785, as ``canonicalBytes`` writes
    /// it) of one JSON value nested at most `maxDepth` deep — for a common subset only, so a
    /// `false` may also mean "not sure": strings of printable ASCII (with `"` and `\` escaped as
    /// `\"` and `\\`), integers of at most 15 digits (no `-0`), `true`, `false`, `null`, and
    /// arrays and objects of those with members in strictly increasing name order. When it
    /// answers `true`, `JSON(parsing: bytes).canonicalBytes == bytes` (a fuzz target checks it).
    ///
    /// - Parameters:
    ///   - bytes: The bytes.
    ///   - maxDepth: The deepest nesting accepted (`[]` has depth 1).
    /// - Returns: Whether the bytes are canonical JSON of the subset.
    public static func isCanonical(_ bytes: UnsafeRawBufferPointer, maxDepth: Int = 512) -> Bool {
        var scanner = CanonicalScanner(bytes: bytes, maxDepth: maxDepth)
        return scanner.value(depth: 0) && scanner.cursor == bytes.count
    }
}

/// The checker behind ``JSON/isCanonical(_:maxDepth:)``: it recurses at most `maxDepth` deep
/// (512 by default, a few hundred bytes of stack each).
private struct CanonicalScanner {
    let bytes: UnsafeRawBufferPointer
    let maxDepth: Int
    var cursor = 0

    init(bytes: UnsafeRawBufferPointer, maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    mutating func value(depth: Int) -> Bool {
        guard cursor < bytes.count else { return false }
        switch bytes[cursor] {
        case UInt8(ascii: "\""): return string() != nil
        case UInt8(ascii: "{"): return object(depth: depth + 1)
        case UInt8(ascii: "["): return array(depth: depth + 1)
        case UInt8(ascii: "t"): return literal("true")
        case UInt8(ascii: "f"): return literal("false")
        case UInt8(ascii: "n"): return literal("null")
        default: return integer()
        }
    }

    private mutating func literal(_ text: StaticString) -> Bool {
        let count = text.utf8CodeUnitCount
        guard bytes.count - cursor >= count else { return false }
        for index in 0..<count where bytes[cursor + index] != text.utf8Start[index] { return false }
        cursor += count
        return true
    }

    /// `-`? then `0` or 1–15 digits without a leading zero; never `-0`.
    private mutating func integer() -> Bool {
        let negative = bytes[cursor] == UInt8(ascii: "-")
        if negative { cursor += 1 }
        let start = cursor
        while cursor < bytes.count, bytes[cursor] >= UInt8(ascii: "0"), bytes[cursor] <= UInt8(ascii: "9") { cursor += 1 }
        let digits = cursor - start
        guard digits >= 1, digits <= 15 else { return false }
        if bytes[start] == UInt8(ascii: "0") { return digits == 1 && !negative }
        return true
    }

    /// A string of printable ASCII, `"` and `\` escaped; returns where its content lies.
    private mutating func string() -> Range<Int>? {
        cursor += 1
        let start = cursor
        cursor = skipPlainASCIIWords(bytes, from: cursor)
        while cursor < bytes.count {
            let byte = bytes[cursor]
            switch byte {
            case UInt8(ascii: "\""):
                cursor += 1
                return start..<(cursor - 1)
            case UInt8(ascii: "\\"):
                guard cursor + 1 < bytes.count,
                      bytes[cursor + 1] == UInt8(ascii: "\"") || bytes[cursor + 1] == UInt8(ascii: "\\") else { return nil }
                cursor += 2
            case 0x20..<0x7F:
                cursor += 1
            default:
                return nil
            }
        }
        return nil
    }

    private mutating func array(depth: Int) -> Bool {
        guard depth <= maxDepth else { return false }
        cursor += 1
        if cursor < bytes.count, bytes[cursor] == UInt8(ascii: "]") {
            cursor += 1
            return true
        }
        while true {
            guard value(depth: depth), cursor < bytes.count else { return false }
            let byte = bytes[cursor]
            cursor += 1
            if byte == UInt8(ascii: "]") { return true }
            guard byte == UInt8(ascii: ",") else { return false }
        }
    }

    private mutating func object(depth: Int) -> Bool {
        guard depth <= maxDepth else { return false }
        cursor += 1
        if cursor < bytes.count, bytes[cursor] == UInt8(ascii: "}") {
            cursor += 1
            return true
        }
        var previous: Range<Int>?
        while true {
            guard cursor < bytes.count, bytes[cursor] == UInt8(ascii: "\""), let name = string() else { return false }
            // Names of printable ASCII: byte order is RFC 8785's UTF-16 order. An escape in a
            // name makes its bytes differ from its value: not in the subset.
            guard !bytes[name].contains(UInt8(ascii: "\\")) else { return false }
            if let previous, !bytes[previous].lexicographicallyPrecedes(bytes[name]) { return false }
            previous = name
            guard cursor < bytes.count, bytes[cursor] == UInt8(ascii: ":") else { return false }
            cursor += 1
            guard value(depth: depth), cursor < bytes.count else { return false }
            let byte = bytes[cursor]
            cursor += 1
            if byte == UInt8(ascii: "}") { return true }
            guard byte == UInt8(ascii: ",") else { return false }
        }
    }
}

extension ClientMessage {
    /// Finds a `dispatch` written canonically — `{"action":A,"id":I,"type":"dispatch"}`, as the
    /// library and any RFC 8785 writer send it — with an integer id or a string id of printable
    /// ASCII without escapes, and an action that ``JSON/isCanonical(_:maxDepth:)`` accepts
    /// (at most 511 deep inside the frame): the hub's per-dispatch fast path, which parses
    /// nothing. Anything else returns `nil`, and the frame is read with ``init(json:)``.
    ///
    /// - Parameter payload: A frame's payload.
    /// - Returns: The id and the action's byte range, or `nil`.
    public static func canonicalDispatch(_ payload: UnsafeRawBufferPointer) -> (id: DispatchID, action: Range<Int>)? {
        let prefix: StaticString = #"{"action":"#
        let suffix: StaticString = #","type":"dispatch"}"#
        guard payload.count > prefix.utf8CodeUnitCount + suffix.utf8CodeUnitCount,
              matches(prefix, payload, at: 0),
              matches(suffix, payload, at: payload.count - suffix.utf8CodeUnitCount) else { return nil }
        // The id is the last member before "type": scan back from the suffix for `,"id":`.
        let idEnd = payload.count - suffix.utf8CodeUnitCount
        let idKey: StaticString = #","id":"#
        var keyStart = idEnd - 1
        let id: DispatchID
        if payload[keyStart] == UInt8(ascii: "\"") {
            // A string id: no `"` or `\` inside, so the opening quote is the previous `"`.
            var open = keyStart - 1
            while open > 0, payload[open] != UInt8(ascii: "\"") {
                guard payload[open] >= 0x20, payload[open] < 0x7F, payload[open] != UInt8(ascii: "\\") else { return nil }
                open -= 1
            }
            guard open > 0, idEnd - open - 2 <= maxIDBytes else { return nil }
            id = .string(String(decoding: UnsafeRawBufferPointer(rebasing: payload[(open + 1)..<keyStart]), as: UTF8.self))
            keyStart = open
        } else {
            var value = 0, scale = 1, digits = 0
            while keyStart > 0, payload[keyStart] >= UInt8(ascii: "0"), payload[keyStart] <= UInt8(ascii: "9") {
                guard digits < 16 else { return nil }
                value += Int(payload[keyStart] - UInt8(ascii: "0")) * scale
                scale *= 10
                digits += 1
                keyStart -= 1
            }
            guard digits > 0, value <= DispatchID.maxInteger else { return nil }
            // No leading zero ("0" alone is fine).
            if digits > 1, payload[keyStart + 1] == UInt8(ascii: "0") { return nil }
            if payload[keyStart] == UInt8(ascii: "-") {
                guard value != 0 else { return nil }
                value = -value
            } else {
                keyStart += 1
            }
            id = .number(value)
        }
        let idKeyStart = keyStart - idKey.utf8CodeUnitCount
        guard idKeyStart > prefix.utf8CodeUnitCount, matches(idKey, payload, at: idKeyStart) else { return nil }
        let action = prefix.utf8CodeUnitCount..<idKeyStart
        guard JSON.isCanonical(UnsafeRawBufferPointer(rebasing: payload[action]), maxDepth: 511) else { return nil }
        return (id, action)
    }

    private static func matches(_ text: StaticString, _ payload: UnsafeRawBufferPointer, at offset: Int) -> Bool {
        guard offset >= 0 else { return false }
        var cursor = offset
        return payload.matches(text, at: &cursor)
    }
}
