/// Why and where a byte sequence is not a valid JSON text.
///
/// The parser is strict RFC 8259 (plus I-JSON's rules on duplicate keys, surrogates and
/// number range), so the first violation stops it and is reported here.
public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The zero-based byte offset in the input at which the problem was found.
    public let offset: Int
    /// A short human-readable explanation, such as `expected ':' after object key`.
    public let reason: String

    /// Creates a parse error.
    /// - Parameters:
    ///   - offset: The zero-based byte offset of the problem.
    ///   - reason: A short human-readable explanation.
    public init(offset: Int, reason: String) {
        self.offset = offset
        self.reason = reason
    }

    /// The error as one line, for example `invalid JSON at byte 12: expected ':' after object key`.
    public var description: String { "invalid JSON at byte \(offset): \(reason)" }
}

extension JSON {
    /// Parses exactly one JSON value from UTF-8 bytes, with optional surrounding whitespace.
    ///
    /// The parser is strict: it rejects trailing commas, leading zeros, `+1`, `.5`, `1.`,
    /// `NaN`/`Infinity`, unescaped control characters in strings, invalid UTF-8 (overlong forms,
    /// encoded surrogates, truncated sequences), unpaired `\u` surrogate escapes, duplicate object
    /// keys, nesting deeper than `maxDepth` and numbers that overflow a `Double`. Whitespace means
    /// space, tab, line feed and carriage return only. It does not recurse, so any `maxDepth`
    /// is safe for the call stack.
    /// - Parameters:
    ///   - bytes: The UTF-8 encoded JSON text.
    ///   - maxDepth: The largest number of nested arrays and objects accepted; a scalar at the
    ///     top level has depth 0 and `[]` has depth 1.
    /// - Throws: ``JSONParseError`` describing the first violation and its byte offset.
    public init(parsing bytes: UnsafeRawBufferPointer, maxDepth: Int = 512) throws(JSONParseError) {
        guard let base = bytes.baseAddress, bytes.count > 0 else {
            throw JSONParseError(offset: 0, reason: "unexpected end of input, expected a JSON value")
        }
        var parser = _JSONByteParser(
            base: base.assumingMemoryBound(to: UInt8.self),
            count: bytes.count,
            maxDepth: maxDepth
        )
        self = try parser.parseDocument()
    }

    /// Parses exactly one JSON value from an array of UTF-8 bytes.
    ///
    /// The accepted grammar is that of the `UnsafeRawBufferPointer` overload.
    /// - Parameters:
    ///   - bytes: The UTF-8 encoded JSON text.
    ///   - maxDepth: The largest number of nested arrays and objects accepted.
    /// - Throws: ``JSONParseError`` describing the first violation and its byte offset.
    public init(parsing bytes: [UInt8], maxDepth: Int = 512) throws(JSONParseError) {
        let result = bytes.withUnsafeBytes { raw in
            Result { () throws(JSONParseError) -> JSON in try JSON(parsing: raw, maxDepth: maxDepth) }
        }
        self = try result.get()
    }

    /// Parses exactly one JSON value from a string (its UTF-8 form is parsed).
    ///
    /// The accepted grammar is that of the `UnsafeRawBufferPointer` overload.
    /// - Parameters:
    ///   - text: The JSON text.
    ///   - maxDepth: The largest number of nested arrays and objects accepted.
    /// - Throws: ``JSONParseError`` describing the first violation and its UTF-8 byte offset.
    public init(parsing text: String, maxDepth: Int = 512) throws(JSONParseError) {
        var text = text
        let result = text.withUTF8 { utf8 in
            Result { () throws(JSONParseError) -> JSON in
                try JSON(parsing: UnsafeRawBufferPointer(utf8), maxDepth: maxDepth)
            }
        }
        self = try result.get()
    }
}

// MARK: - Implementation

private enum ASCII {
    static let tab: UInt8 = 0x09
    static let lineFeed: UInt8 = 0x0A
    static let carriageReturn: UInt8 = 0x0D
    static let space: UInt8 = 0x20
    static let quote: UInt8 = 0x22
    static let plus: UInt8 = 0x2B
    static let comma: UInt8 = 0x2C
    static let minus: UInt8 = 0x2D
    static let period: UInt8 = 0x2E
    static let slash: UInt8 = 0x2F
    static let zero: UInt8 = 0x30
    static let colon: UInt8 = 0x3A
    static let openBracket: UInt8 = 0x5B
    static let backslash: UInt8 = 0x5C
    static let closeBracket: UInt8 = 0x5D
    static let openBrace: UInt8 = 0x7B
    static let closeBrace: UInt8 = 0x7D
}

/// Exact powers of ten representable in a `Double` (10^0 ... 10^22), for Clinger's fast path.
private let exactPowersOfTen: [Double] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
]

/// An open array or object while parsing: where its elements (and keys) start on the stacks.
private struct _OpenContainer {
    var isObject: Bool
    var valueStart: Int
    var keyStart: Int
}

/// A non-recursive, strict JSON parser over a contiguous byte buffer.
private struct _JSONByteParser {
    let base: UnsafePointer<UInt8>
    let end: Int
    let maxDepth: Int
    var index = 0
    /// Reused buffer for strings that contain escapes.
    var scratch: [UInt8] = []

    init(base: UnsafePointer<UInt8>, count: Int, maxDepth: Int) {
        self.base = base
        self.end = count
        self.maxDepth = maxDepth
    }

    // MARK: Errors

    func fail(_ offset: Int, _ reason: String) -> JSONParseError {
        JSONParseError(offset: offset, reason: reason)
    }

    func describeByte(at offset: Int) -> String {
        guard offset < end else { return "end of input" }
        let byte = base[offset]
        if byte >= 0x21 && byte < 0x7F {
            return "'\(Character(Unicode.Scalar(byte)))'"
        }
        return "byte 0x\(hexByte(byte))"
    }

    func hexByte(_ byte: UInt8) -> String {
        let digits = String(byte, radix: 16, uppercase: true)
        return byte < 0x10 ? "0" + digits : digits
    }

    // MARK: Document

    @inline(__always)
    mutating func skipWhitespace() {
        while index < end {
            let byte = base[index]
            guard byte == ASCII.space || byte == ASCII.lineFeed || byte == ASCII.carriageReturn
                || byte == ASCII.tab else { return }
            index &+= 1
        }
    }

    mutating func parseDocument() throws(JSONParseError) -> JSON {
        var values: [JSON] = []
        var keys: [String] = []
        var keyOffsets: [Int] = []
        var open: [_OpenContainer] = []
        var result: JSON
        skipWhitespace()
        if index < end && (base[index] == ASCII.openBrace || base[index] == ASCII.openBracket) {
            // Typical messages are small objects: size the stacks once instead of regrowing them.
            values.reserveCapacity(16)
            keys.reserveCapacity(16)
            keyOffsets.reserveCapacity(16)
            open.reserveCapacity(8)
        }

        outer: while true {
            // A value starts here.
            skipWhitespace()
            guard index < end else {
                throw fail(index, "unexpected end of input, expected a JSON value")
            }
            var value: JSON
            switch base[index] {
            case ASCII.quote:
                index &+= 1
                value = .string(try parseString())
            case ASCII.openBrace:
                guard open.count < maxDepth else {
                    throw fail(index, "nesting deeper than \(maxDepth) levels")
                }
                index &+= 1
                skipWhitespace()
                if index < end && base[index] == ASCII.closeBrace {
                    index &+= 1
                    value = .object([:])
                } else {
                    open.append(_OpenContainer(isObject: true, valueStart: values.count, keyStart: keys.count))
                    try parseMemberKey(into: &keys, offsets: &keyOffsets, afterComma: false)
                    continue outer
                }
            case ASCII.openBracket:
                guard open.count < maxDepth else {
                    throw fail(index, "nesting deeper than \(maxDepth) levels")
                }
                index &+= 1
                skipWhitespace()
                if index < end && base[index] == ASCII.closeBracket {
                    index &+= 1
                    value = .array([])
                } else {
                    open.append(_OpenContainer(isObject: false, valueStart: values.count, keyStart: keys.count))
                    continue outer
                }
            case UInt8(ascii: "t"):
                try expectLiteral("true")
                value = .bool(true)
            case UInt8(ascii: "f"):
                try expectLiteral("false")
                value = .bool(false)
            case UInt8(ascii: "n"):
                try expectLiteral("null")
                value = .null
            case ASCII.minus, ASCII.zero...UInt8(ascii: "9"):
                value = .number(try parseNumber())
            case ASCII.plus, ASCII.period:
                throw fail(index, "a number must start with '-' or a digit")
            default:
                throw fail(index, "unexpected \(describeByte(at: index)), expected a JSON value")
            }

            // A value is complete: attach it to its container, closing containers as they end.
            while true {
                guard let top = open.last else {
                    result = value
                    break outer
                }
                values.append(value)
                skipWhitespace()
                guard index < end else {
                    throw fail(index, "unexpected end of input inside \(top.isObject ? "object" : "array")")
                }
                let byte = base[index]
                if top.isObject {
                    if byte == ASCII.comma {
                        index &+= 1
                        try parseMemberKey(into: &keys, offsets: &keyOffsets, afterComma: true)
                        continue outer
                    } else if byte == ASCII.closeBrace {
                        index &+= 1
                        value = try closeObject(top, values: &values, keys: &keys, keyOffsets: &keyOffsets)
                        open.removeLast()
                    } else {
                        throw fail(index, "expected ',' or '}' after object member, found \(describeByte(at: index))")
                    }
                } else {
                    if byte == ASCII.comma {
                        index &+= 1
                        skipWhitespace()
                        if index < end && base[index] == ASCII.closeBracket {
                            throw fail(index, "trailing comma in array")
                        }
                        continue outer
                    } else if byte == ASCII.closeBracket {
                        index &+= 1
                        value = .array(Array(values[top.valueStart...]))
                        values.removeSubrange(top.valueStart...)
                        open.removeLast()
                    } else {
                        throw fail(index, "expected ',' or ']' after array element, found \(describeByte(at: index))")
                    }
                }
            }
        }

        skipWhitespace()
        guard index == end else {
            throw fail(index, "unexpected \(describeByte(at: index)) after the JSON value")
        }
        return result
    }

    /// Parses `"key"` and the following `:` of an object member.
    mutating func parseMemberKey(
        into keys: inout [String], offsets: inout [Int], afterComma: Bool
    ) throws(JSONParseError) {
        skipWhitespace()
        guard index < end else { throw fail(index, "unexpected end of input inside object") }
        let byte = base[index]
        guard byte == ASCII.quote else {
            if afterComma && byte == ASCII.closeBrace { throw fail(index, "trailing comma in object") }
            throw fail(index, "expected string key, found \(describeByte(at: index))")
        }
        let keyOffset = index
        index &+= 1
        keys.append(try parseString())
        offsets.append(keyOffset)
        skipWhitespace()
        guard index < end, base[index] == ASCII.colon else {
            throw fail(index, "expected ':' after object key")
        }
        index &+= 1
    }

    func closeObject(
        _ container: _OpenContainer, values: inout [JSON], keys: inout [String], keyOffsets: inout [Int]
    ) throws(JSONParseError) -> JSON {
        let count = values.count - container.valueStart
        var members = [JSONKey: JSON](minimumCapacity: count)
        var position = 0
        while position < count {
            let key = keys[container.keyStart + position]
            if members.updateValue(values[container.valueStart + position], forKey: JSONKey(key)) != nil {
                throw fail(keyOffsets[container.keyStart + position], "duplicate key \"\(key)\"")
            }
            position += 1
        }
        values.removeSubrange(container.valueStart...)
        keys.removeSubrange(container.keyStart...)
        keyOffsets.removeSubrange(container.keyStart...)
        return .object(members)
    }

    mutating func expectLiteral(_ literal: StaticString) throws(JSONParseError) {
        let length = literal.utf8CodeUnitCount
        let start = literal.utf8Start
        let literalStart = index
        var offset = 0
        while offset < length {
            guard index < end, base[index] == start[offset] else {
                throw fail(literalStart, "invalid literal, expected '\(literal)'")
            }
            index &+= 1
            offset &+= 1
        }
    }

    // MARK: Strings

    /// Parses a string body; `index` is just past the opening quote and ends just past the closing one.
    mutating func parseString() throws(JSONParseError) -> String {
        let start = index
        try skipPlainStringBytes()
        guard index < end else { throw fail(start &- 1, "unterminated string") }
        if base[index] == ASCII.quote {
            let text = String(decoding: UnsafeBufferPointer(start: base + start, count: index &- start), as: UTF8.self)
            index &+= 1
            return text
        }
        return try parseEscapedString(start: start)
    }

    /// The slow path: the string contains a backslash at `index`.
    mutating func parseEscapedString(start: Int) throws(JSONParseError) -> String {
        scratch.removeAll(keepingCapacity: true)
        scratch.append(contentsOf: UnsafeBufferPointer(start: base + start, count: index &- start))
        while true {
            guard index < end else { throw fail(start &- 1, "unterminated string") }
            let byte = base[index]
            if byte == ASCII.quote {
                index &+= 1
                return String(decoding: scratch, as: UTF8.self)
            }
            if byte == ASCII.backslash {
                try parseEscape()
            } else {
                let runStart = index
                try skipPlainStringBytes()
                scratch.append(contentsOf: UnsafeBufferPointer(start: base + runStart, count: index &- runStart))
            }
        }
    }

    /// Decodes one escape sequence at `index` (a backslash) into `scratch`.
    mutating func parseEscape() throws(JSONParseError) {
        let escapeStart = index
        guard index &+ 1 < end else { throw fail(escapeStart, "unterminated escape sequence") }
        let kind = base[index &+ 1]
        index &+= 2
        switch kind {
        case ASCII.quote: scratch.append(ASCII.quote)
        case ASCII.backslash: scratch.append(ASCII.backslash)
        case ASCII.slash: scratch.append(ASCII.slash)
        case UInt8(ascii: "b"): scratch.append(0x08)
        case UInt8(ascii: "f"): scratch.append(0x0C)
        case UInt8(ascii: "n"): scratch.append(ASCII.lineFeed)
        case UInt8(ascii: "r"): scratch.append(ASCII.carriageReturn)
        case UInt8(ascii: "t"): scratch.append(ASCII.tab)
        case UInt8(ascii: "u"):
            var scalar = try parseHex4(at: index)
            index &+= 4
            if scalar >= 0xD800 && scalar <= 0xDBFF {
                guard index &+ 6 <= end, base[index] == ASCII.backslash, base[index &+ 1] == UInt8(ascii: "u")
                else { throw fail(escapeStart, "unpaired high surrogate escape") }
                let low = try parseHex4(at: index &+ 2)
                guard low >= 0xDC00 && low <= 0xDFFF else {
                    throw fail(escapeStart, "unpaired high surrogate escape")
                }
                index &+= 6
                scalar = 0x10000 &+ ((scalar &- 0xD800) << 10) &+ (low &- 0xDC00)
            } else if scalar >= 0xDC00 && scalar <= 0xDFFF {
                throw fail(escapeStart, "unpaired low surrogate escape")
            }
            appendUTF8(scalar)
        default:
            throw fail(escapeStart, "invalid escape sequence '\\\(describeByte(at: escapeStart &+ 1))'")
        }
    }

    func parseHex4(at offset: Int) throws(JSONParseError) -> UInt32 {
        guard offset &+ 4 <= end else { throw fail(offset &- 2, "truncated \\u escape") }
        var value: UInt32 = 0
        for position in offset..<(offset &+ 4) {
            let byte = base[position]
            let digit: UInt8
            switch byte {
            case ASCII.zero...UInt8(ascii: "9"): digit = byte &- ASCII.zero
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte &- UInt8(ascii: "a") &+ 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte &- UInt8(ascii: "A") &+ 10
            default: throw fail(offset &- 2, "invalid \\u escape, expected 4 hex digits")
            }
            value = value << 4 | UInt32(digit)
        }
        return value
    }

    mutating func appendUTF8(_ scalar: UInt32) {
        if scalar < 0x80 {
            scratch.append(UInt8(truncatingIfNeeded: scalar))
        } else if scalar < 0x800 {
            scratch.append(UInt8(truncatingIfNeeded: 0xC0 | (scalar >> 6)))
            scratch.append(UInt8(truncatingIfNeeded: 0x80 | (scalar & 0x3F)))
        } else if scalar < 0x10000 {
            scratch.append(UInt8(truncatingIfNeeded: 0xE0 | (scalar >> 12)))
            scratch.append(UInt8(truncatingIfNeeded: 0x80 | ((scalar >> 6) & 0x3F)))
            scratch.append(UInt8(truncatingIfNeeded: 0x80 | (scalar & 0x3F)))
        } else {
            scratch.append(UInt8(truncatingIfNeeded: 0xF0 | (scalar >> 18)))
            scratch.append(UInt8(truncatingIfNeeded: 0x80 | ((scalar >> 12) & 0x3F)))
            scratch.append(UInt8(truncatingIfNeeded: 0x80 | ((scalar >> 6) & 0x3F)))
            scratch.append(UInt8(truncatingIfNeeded: 0x80 | (scalar & 0x3F)))
        }
    }

    /// Advances `index` over string bytes that need no decoding, validating UTF-8, and stops at a
    /// quote, a backslash or the end of input.
    ///
    /// Eight ASCII bytes are checked at a time: a word is plain when it has no byte that is a
    /// quote, a backslash, below 0x20 or at least 0x80. In the flag mask only bytes above a true
    /// hit can be false positives (borrows propagate upwards), so the lowest flag is exact.
    @inline(__always)
    mutating func skipPlainStringBytes() throws(JSONParseError) {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highBits: UInt64 = 0x8080_8080_8080_8080
        let raw = UnsafeRawPointer(base)
        while true {
            while index &+ 8 <= end {
                let word = UInt64(littleEndian: raw.loadUnaligned(fromByteOffset: index, as: UInt64.self))
                let quotes = word ^ (ones &* UInt64(ASCII.quote))
                let backslashes = word ^ (ones &* UInt64(ASCII.backslash))
                let flags = (((quotes &- ones) & ~quotes)
                    | ((backslashes &- ones) & ~backslashes)
                    | ((word &- ones &* 0x20) & ~word)
                    | word) & highBits
                if flags != 0 {
                    index &+= flags.trailingZeroBitCount &>> 3
                    break
                }
                index &+= 8
            }
            guard index < end else { return }
            let byte = base[index]
            if byte >= 0x80 {
                try skipMultibyteScalar(lead: byte)
            } else if byte == ASCII.quote || byte == ASCII.backslash {
                return
            } else if byte < 0x20 {
                throw fail(index, "unescaped control character 0x\(hexByte(byte)) in string")
            } else {
                index &+= 1
            }
        }
    }

    /// Validates one multi-byte UTF-8 sequence at `index` (Unicode Table 3-7) and skips it.
    @inline(__always)
    mutating func skipMultibyteScalar(lead: UInt8) throws(JSONParseError) {
        let length: Int
        var secondLow: UInt8 = 0x80
        var secondHigh: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; secondLow = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; secondHigh = 0x9F
        case 0xF0: length = 4; secondLow = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; secondHigh = 0x8F
        default:
            throw fail(index, "invalid UTF-8 byte 0x\(hexByte(lead)) in string")
        }
        guard index &+ length <= end else {
            throw fail(index, "truncated UTF-8 sequence in string")
        }
        let second = base[index &+ 1]
        guard second >= secondLow && second <= secondHigh else {
            throw fail(index, "invalid UTF-8 sequence in string")
        }
        var position = index &+ 2
        let stop = index &+ length
        while position < stop {
            guard base[position] & 0xC0 == 0x80 else {
                throw fail(index, "invalid UTF-8 sequence in string")
            }
            position &+= 1
        }
        index = stop
    }

    // MARK: Numbers

    mutating func parseNumber() throws(JSONParseError) -> Double {
        let start = index
        var negative = false
        if base[index] == ASCII.minus {
            negative = true
            index &+= 1
        }
        guard index < end else { throw fail(index, "expected digit after '-'") }

        var mantissa: UInt64 = 0
        var digitCount = 0
        let first = base[index]
        if first == ASCII.zero {
            index &+= 1
            if index < end && base[index] &- ASCII.zero < 10 {
                throw fail(start, "leading zeros are not allowed in numbers")
            }
        } else if first &- ASCII.zero < 10 {
            while index < end {
                let digit = base[index] &- ASCII.zero
                guard digit < 10 else { break }
                if digitCount < 19 { mantissa = mantissa &* 10 &+ UInt64(digit) }
                digitCount &+= 1
                index &+= 1
            }
        } else {
            throw fail(index, "expected digit after '-'")
        }

        var fractionDigits = 0
        var isPlainInteger = true
        if index < end && base[index] == ASCII.period {
            isPlainInteger = false
            index &+= 1
            guard index < end && base[index] &- ASCII.zero < 10 else {
                throw fail(index, "expected digit after decimal point")
            }
            while index < end {
                let digit = base[index] &- ASCII.zero
                guard digit < 10 else { break }
                if digitCount < 19 { mantissa = mantissa &* 10 &+ UInt64(digit) }
                digitCount &+= 1
                fractionDigits &+= 1
                index &+= 1
            }
        }

        var exponent = 0
        if index < end && base[index] | 0x20 == UInt8(ascii: "e") {
            isPlainInteger = false
            index &+= 1
            var negativeExponent = false
            if index < end && (base[index] == ASCII.minus || base[index] == ASCII.plus) {
                negativeExponent = base[index] == ASCII.minus
                index &+= 1
            }
            guard index < end && base[index] &- ASCII.zero < 10 else {
                throw fail(index, "expected digit in exponent")
            }
            while index < end {
                let digit = base[index] &- ASCII.zero
                guard digit < 10 else { break }
                if exponent < 100_000 { exponent = exponent &* 10 &+ Int(digit) }
                index &+= 1
            }
            if negativeExponent { exponent = -exponent }
        }

        // Fast path 1: a short integer is exact.
        if isPlainInteger && digitCount <= 15 {
            let value = Double(mantissa)
            return negative ? -value : value
        }
        // Fast path 2 (Clinger): an exact mantissa times an exact power of ten rounds correctly.
        if digitCount <= 15 {
            let scale = exponent &- fractionDigits
            if scale >= -22 && scale <= 22 {
                let value = scale >= 0
                    ? Double(mantissa) * exactPowersOfTen[scale]
                    : Double(mantissa) / exactPowersOfTen[-scale]
                return negative ? -value : value
            }
        }
        // Slow path: the standard library's correctly rounded conversion of the exact text.
        let text = String(decoding: UnsafeBufferPointer(start: base + start, count: index &- start), as: UTF8.self)
        guard let value = Double(text), value.isFinite else {
            throw fail(start, "number out of range")
        }
        return value
    }
}
