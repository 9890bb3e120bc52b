extension JSON {
    /// Appends the RFC 8785 (JSON Canonicalization Scheme) form of this value to `buffer`.
    ///
    /// Object members are sorted by the UTF-16 code units of their keys, there is no whitespace,
    /// strings escape only `"`, `\` and control characters below U+0020 (with the short forms
    /// `\b \t \n \f \r` where they exist, otherwise lowercase `\u00xx`), and numbers are written
    /// as ECMAScript's `Number.prototype.toString` would (shortest round-trip digits, `-0` as `0`).
    /// A non-finite number, which the parser never produces, is written as `null`.
    /// - Parameter buffer: The buffer to append the UTF-8 bytes to.
    public func writeCanonical(into buffer: inout [UInt8]) {
        switch self {
        case .null:
            _JSONWriter.appendStatic("null", to: &buffer)
        case .bool(let value):
            _JSONWriter.appendStatic(value ? "true" : "false", to: &buffer)
        case .number(let value):
            _JSONWriter.writeNumber(value, into: &buffer)
        case .string(let value):
            _JSONWriter.writeString(value, into: &buffer)
        case .array(let elements):
            buffer.append(UInt8(ascii: "["))
            var first = true
            for element in elements {
                if !first { buffer.append(UInt8(ascii: ",")) }
                first = false
                element.writeCanonical(into: &buffer)
            }
            buffer.append(UInt8(ascii: "]"))
        case .object(let members):
            buffer.append(UInt8(ascii: "{"))
            var first = true
            for (key, value) in _JSONWriter.sortedMembers(members) {
                if !first { buffer.append(UInt8(ascii: ",")) }
                first = false
                _JSONWriter.writeString(key.string, into: &buffer)
                buffer.append(UInt8(ascii: ":"))
                value.writeCanonical(into: &buffer)
            }
            buffer.append(UInt8(ascii: "}"))
        }
    }

    /// The RFC 8785 canonical UTF-8 bytes of this value; equal values give equal bytes.
    ///
    /// See ``writeCanonical(into:)`` for the rules. A non-finite number is written as `null`.
    public var canonicalBytes: [UInt8] {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(64)
        writeCanonical(into: &buffer)
        return buffer
    }

    /// The RFC 8785 canonical text of this value, as a `String`.
    ///
    /// See ``writeCanonical(into:)`` for the rules. A non-finite number is written as `null`.
    public var canonicalString: String {
        String(decoding: canonicalBytes, as: UTF8.self)
    }

    /// A human-readable rendering for command-line tools: two-space indentation, `": "` after keys,
    /// object members sorted like the canonical form, and the canonical string and number rules.
    ///
    /// Empty arrays and objects print as `[]` and `{}`. A non-finite number is written as `null`.
    public var prettyString: String {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(128)
        writePretty(into: &buffer, indent: 0)
        return String(decoding: buffer, as: UTF8.self)
    }

    private func writePretty(into buffer: inout [UInt8], indent: Int) {
        switch self {
        case .null, .bool, .number, .string:
            writeCanonical(into: &buffer)
        case .array(let elements):
            guard !elements.isEmpty else {
                _JSONWriter.appendStatic("[]", to: &buffer)
                return
            }
            buffer.append(UInt8(ascii: "["))
            var first = true
            for element in elements {
                if !first { buffer.append(UInt8(ascii: ",")) }
                first = false
                _JSONWriter.newline(indent: indent + 1, into: &buffer)
                element.writePretty(into: &buffer, indent: indent + 1)
            }
            _JSONWriter.newline(indent: indent, into: &buffer)
            buffer.append(UInt8(ascii: "]"))
        case .object(let members):
            guard !members.isEmpty else {
                _JSONWriter.appendStatic("{}", to: &buffer)
                return
            }
            buffer.append(UInt8(ascii: "{"))
            var first = true
            for (key, value) in _JSONWriter.sortedMembers(members) {
                if !first { buffer.append(UInt8(ascii: ",")) }
                first = false
                _JSONWriter.newline(indent: indent + 1, into: &buffer)
                _JSONWriter.writeString(key.string, into: &buffer)
                _JSONWriter.appendStatic(": ", to: &buffer)
                value.writePretty(into: &buffer, indent: indent + 1)
            }
            _JSONWriter.newline(indent: indent, into: &buffer)
            buffer.append(UInt8(ascii: "}"))
        }
    }
}

/// Serialisation helpers shared by the canonical and pretty writers.
enum _JSONWriter {
    @inline(__always)
    static func appendStatic(_ text: StaticString, to buffer: inout [UInt8]) {
        buffer.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    static func newline(indent: Int, into buffer: inout [UInt8]) {
        buffer.append(UInt8(ascii: "\n"))
        buffer.append(contentsOf: repeatElement(UInt8(ascii: " "), count: indent * 2))
    }

    // MARK: Member order

    /// The members ordered by the UTF-16 code units of their keys (RFC 8785 §3.2.3).
    static func sortedMembers(_ members: [JSONKey: JSON]) -> [(key: JSONKey, value: JSON)] {
        var entries = Array(members)
        if entries.count > 1 {
            entries.sort { utf16Precedes($0.key.string, $1.key.string) }
        }
        return entries
    }

    /// Whether `lhs` sorts before `rhs` when both are compared as sequences of UTF-16 code units.
    static func utf16Precedes(_ lhs: String, _ rhs: String) -> Bool {
        // `withUTF8` reaches small (inline) strings too; it copies only non-UTF-8 storage.
        var left = lhs, right = rhs
        return left.withUTF8 { l in right.withUTF8 { r in utf16Precedes(utf8: l, r) } }
    }

    /// UTF-16 order on valid UTF-8: UTF-8 byte order is scalar order, which agrees with UTF-16
    /// order except that a supplementary scalar (4-byte UTF-8, surrogate pair in UTF-16) sorts
    /// before U+E000...U+FFFF (UTF-8 lead byte 0xEE or 0xEF) in UTF-16.
    static func utf16Precedes(utf8 lhs: UnsafeBufferPointer<UInt8>, _ rhs: UnsafeBufferPointer<UInt8>) -> Bool {
        let common = min(lhs.count, rhs.count)
        var position = 0
        while position < common && lhs[position] == rhs[position] { position &+= 1 }
        if position == common { return lhs.count < rhs.count }
        var scalarStart = position
        while scalarStart > 0 && lhs[scalarStart] & 0xC0 == 0x80 { scalarStart &-= 1 }
        if scalarStart == position {
            let left = lhs[position]
            let right = rhs[position]
            if left >= 0xF0 && (right == 0xEE || right == 0xEF) { return true }
            if right >= 0xF0 && (left == 0xEE || left == 0xEF) { return false }
        }
        return lhs[position] < rhs[position]
    }

    // MARK: Strings

    /// Writes `text` as a quoted JSON string with the RFC 8785 escapes.
    static func writeString(_ text: String, into buffer: inout [UInt8]) {
        buffer.append(UInt8(ascii: "\""))
        // `withUTF8` reaches small (inline) strings too; it copies only non-UTF-8 storage.
        var text = text
        text.withUTF8 { bytes in writeEscaped(bytes, into: &buffer) }
        buffer.append(UInt8(ascii: "\""))
    }

    private static let hexDigits: StaticString = "0123456789abcdef"

    static func writeEscaped(_ bytes: UnsafeBufferPointer<UInt8>, into buffer: inout [UInt8]) {
        var runStart = 0
        var position = 0
        let count = bytes.count
        while position < count {
            let byte = bytes[position]
            if byte >= 0x20 && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\") {
                position &+= 1
                continue
            }
            if runStart < position {
                buffer.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<position]))
            }
            buffer.append(UInt8(ascii: "\\"))
            switch byte {
            case UInt8(ascii: "\""): buffer.append(UInt8(ascii: "\""))
            case UInt8(ascii: "\\"): buffer.append(UInt8(ascii: "\\"))
            case 0x08: buffer.append(UInt8(ascii: "b"))
            case 0x09: buffer.append(UInt8(ascii: "t"))
            case 0x0A: buffer.append(UInt8(ascii: "n"))
            case 0x0C: buffer.append(UInt8(ascii: "f"))
            case 0x0D: buffer.append(UInt8(ascii: "r"))
            default:
                let digits = hexDigits.utf8Start
                buffer.append(UInt8(ascii: "u"))
                buffer.append(UInt8(ascii: "0"))
                buffer.append(UInt8(ascii: "0"))
                buffer.append(digits[Int(byte >> 4)])
                buffer.append(digits[Int(byte & 0x0F)])
            }
            position &+= 1
            runStart = position
        }
        if runStart == 0 {
            buffer.append(contentsOf: bytes)
        } else if runStart < count {
            buffer.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<count]))
        }
    }

    // MARK: Numbers

    /// Writes `value` as ECMAScript `Number::toString` does (RFC 8785 §3.2.2.3); non-finite as `null`.
    static func writeNumber(_ value: Double, into buffer: inout [UInt8]) {
        guard value.isFinite else {
            appendStatic("null", to: &buffer)
            return
        }
        if value == 0 {
            buffer.append(UInt8(ascii: "0"))
            return
        }
        let magnitude = value.magnitude
        if magnitude < 9_007_199_254_740_992, magnitude.rounded(.towardZero) == magnitude {
            if value < 0 { buffer.append(UInt8(ascii: "-")) }
            writeInteger(UInt64(magnitude), into: &buffer)
            return
        }
        writeShortest(value, into: &buffer)
    }

    static func writeInteger(_ value: UInt64, into buffer: inout [UInt8]) {
        if value < 10 {
            buffer.append(UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: value))
            return
        }
        // Digits laid out backwards in a stack buffer, then appended at once (appending
        // placeholder zeros and overwriting them cost three times as much).
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var position = 20
            var remaining = value
            repeat {
                position &-= 1
                digits[position] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: remaining % 10)
                remaining /= 10
            } while remaining != 0
            buffer.append(contentsOf: UnsafeBufferPointer(rebasing: digits[position..<20]))
        }
    }

    /// Lays out the shortest round-trip digits of `Double.description` by the ECMAScript rules.
    static func writeShortest(_ value: Double, into buffer: inout [UInt8]) {
        var description = value.magnitude.description
        description.withUTF8 { text in
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: text.count) { digits in
                // Parse "ddd.ddd" or "d.ddde±xx" into significant digits and a decimal exponent n,
                // such that the value is 0.d1d2...dk × 10^n.
                var digitCount = 0
                var pointPosition = -1
                var position = 0
                var leadingZeros = 0
                while position < text.count {
                    let byte = text[position]
                    if byte == UInt8(ascii: ".") {
                        pointPosition = digitCount &+ leadingZeros
                    } else if byte &- UInt8(ascii: "0") < 10 {
                        if digitCount == 0 && byte == UInt8(ascii: "0") {
                            leadingZeros &+= 1
                        } else {
                            digits[digitCount] = byte
                            digitCount &+= 1
                        }
                    } else {
                        break
                    }
                    position &+= 1
                }
                if pointPosition < 0 { pointPosition = digitCount &+ leadingZeros }
                var exponent = 0
                if position < text.count && text[position] | 0x20 == UInt8(ascii: "e") {
                    position &+= 1
                    var negativeExponent = false
                    if position < text.count && (text[position] == UInt8(ascii: "-") || text[position] == UInt8(ascii: "+")) {
                        negativeExponent = text[position] == UInt8(ascii: "-")
                        position &+= 1
                    }
                    while position < text.count {
                        let digit = text[position] &- UInt8(ascii: "0")
                        guard digit < 10 else { break }
                        exponent = exponent &* 10 &+ Int(digit)
                        position &+= 1
                    }
                    if negativeExponent { exponent = -exponent }
                }
                while digitCount > 1 && digits[digitCount &- 1] == UInt8(ascii: "0") { digitCount &-= 1 }
                guard digitCount > 0 else {
                    buffer.append(UInt8(ascii: "0"))
                    return
                }
                let n = pointPosition &- leadingZeros &+ exponent
                let k = digitCount
                let significant = UnsafeBufferPointer(rebasing: digits[0..<k])

                if value < 0 { buffer.append(UInt8(ascii: "-")) }
                if k <= n && n <= 21 {
                    buffer.append(contentsOf: significant)
                    buffer.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: n &- k))
                } else if 0 < n && n <= 21 {
                    buffer.append(contentsOf: UnsafeBufferPointer(rebasing: significant[0..<n]))
                    buffer.append(UInt8(ascii: "."))
                    buffer.append(contentsOf: UnsafeBufferPointer(rebasing: significant[n..<k]))
                } else if -6 < n && n <= 0 {
                    buffer.append(UInt8(ascii: "0"))
                    buffer.append(UInt8(ascii: "."))
                    buffer.append(contentsOf: repeatElement(UInt8(ascii: "0"), count: -n))
                    buffer.append(contentsOf: significant)
                } else {
                    buffer.append(significant[0])
                    if k > 1 {
                        buffer.append(UInt8(ascii: "."))
                        buffer.append(contentsOf: UnsafeBufferPointer(rebasing: significant[1..<k]))
                    }
                    buffer.append(UInt8(ascii: "e"))
                    let e = n &- 1
                    buffer.append(e < 0 ? UInt8(ascii: "-") : UInt8(ascii: "+"))
                    writeInteger(UInt64(e.magnitude), into: &buffer)
                }
            }
        }
    }
}
