/// Text from other processes made safe for a terminal or one line of a log: the one escaping
/// helper every human-facing output and every log line goes through.
///
/// A client chooses its `hello` name, its session, its dispatch ids and its actions; a hub
/// chooses the text of its answers; another NATS client can store anything. Printed as they
/// are, a newline would forge a line of a log, an escape sequence (ESC, or the C1 controls
/// that some terminals act on) would drive the terminal that shows it, and a bidirectional
/// override would make a line read differently from what it holds. Every such scalar
/// (``needsEscape(_:)``) is written as a JSON escape, `\uXXXX` (or `\n`, `\r`, `\t`), which is
/// still valid JSON and still the same value when the text is JSON.
public enum ControlCharacters {
    /// Whether a scalar is written escaped: the C0 controls, DEL and the C1 controls
    /// (U+0000–U+001F, U+007F–U+009F), the line and paragraph separators (U+2028, U+2029), and
    /// the bidirectional formatting characters (U+061C, U+200E, U+200F, U+202A–U+202E,
    /// U+2066–U+2069).
    ///
    /// - Parameter scalar: A Unicode scalar.
    /// - Returns: `true` for the scalars above.
    @inlinable
    public static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        let value = scalar.value
        switch value {
        case 0..<0x20, 0x7F...0x9F, 0x061C, 0x200E, 0x200F, 0x2028...0x202E, 0x2066...0x2069: return true
        default: return false
        }
    }

    /// Text from another process for a message or a log: every scalar of ``needsEscape(_:)``
    /// escaped, and a backslash doubled, so that what is printed reads back as exactly what
    /// was sent.
    ///
    /// - Parameter text: Text from another process.
    /// - Returns: The text, unchanged when it holds nothing to escape.
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { needsEscape($0) || $0 == "\\" }) else { return text }
        return rewrite(text, doublingBackslashes: true, keepingNewlines: false)
    }

    /// A line (or lines) as a terminal or a log may show it: every scalar of
    /// ``needsEscape(_:)`` escaped as in JSON, backslashes left as they are.
    ///
    /// JSON text stays valid JSON with the same value (the scalars escaped can stand only
    /// inside its strings, and `\uXXXX` is one of JSON's own escapes); other text shows each
    /// such scalar visibly instead of acting on it. This is the last step before bytes reach
    /// a terminal or a log, whatever built the text.
    ///
    /// - Parameters:
    ///   - text: The text.
    ///   - keepingNewlines: Whether a line feed (and a tab) stays as it is: `true` for text
    ///     of several lines (help, a pretty-printed state); `false` for one line of a log.
    /// - Returns: The text, unchanged (and not copied) when it holds nothing to escape.
    public static func terminalSafe(_ text: String, keepingNewlines: Bool = true) -> String {
        guard needsRewrite(text, keepingNewlines: keepingNewlines) else { return text }
        return rewrite(text, doublingBackslashes: false, keepingNewlines: keepingNewlines)
    }

    /// Whether ``terminalSafe(_:keepingNewlines:)`` changes `text`, read from its UTF-8 bytes
    /// (the common case, plain text, costs one pass without decoding).
    private static func needsRewrite(_ text: String, keepingNewlines: Bool) -> Bool {
        return text.utf8.withContiguousStorageIfAvailable { bytes in
            scanForEscapes(bytes, keepingNewlines: keepingNewlines)
        } ?? text.unicodeScalars.contains { needsEscape($0) && !(keepingNewlines && ($0 == "\n" || $0 == "\t")) }
    }

    /// Whether UTF-8 `bytes` hold a scalar of ``needsEscape(_:)``.
    private static func scanForEscapes(_ bytes: UnsafeBufferPointer<UInt8>, keepingNewlines: Bool) -> Bool {
        var index = 0
        let count = bytes.count
        while index < count {
            let byte = bytes[index]
            if byte < 0x20 {
                if !(keepingNewlines && (byte == 0x0A || byte == 0x09)) { return true }
            } else if byte == 0x7F {
                return true
            } else if byte >= 0x80 {
                let next = index + 1 < count ? bytes[index + 1] : 0
                let third = index + 2 < count ? bytes[index + 2] : 0
                switch byte {
                case 0xC2 where next >= 0x80 && next <= 0x9F: return true                      // C1
                case 0xD8 where next == 0x9C: return true                                       // U+061C
                case 0xE2 where next == 0x80 && (third == 0x8E || third == 0x8F || (third >= 0xA8 && third <= 0xAE)):
                    return true                                                                 // U+200E/F, U+2028–U+202E
                case 0xE2 where next == 0x81 && third >= 0xA6 && third <= 0xA9: return true    // U+2066–U+2069
                default: break
                }
            }
            index += 1
        }
        return false
    }

    private static func rewrite(_ text: String, doublingBackslashes: Bool, keepingNewlines: Bool) -> String {
        var result = ""
        result.reserveCapacity(text.utf8.count + 16)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\\": result += doublingBackslashes ? "\\\\" : "\\"
            case "\n": result += keepingNewlines ? "\n" : "\\n"
            case "\t": result += keepingNewlines ? "\t" : "\\t"
            case "\r": result += "\\r"
            default:
                if needsEscape(scalar) {
                    result += "\\u"
                    let hex = String(scalar.value, radix: 16, uppercase: false)
                    result += String(repeating: "0", count: max(0, 4 - hex.count)) + hex
                } else {
                    result.unicodeScalars.append(scalar)
                }
            }
        }
        return result
    }
}
