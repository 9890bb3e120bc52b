/// Text from clients made safe for one line of a log or a terminal.
///
/// A client chooses its `hello` name, its session and its dispatch ids; printed as they are,
/// a newline in one would forge a line of the hub's log, and an escape sequence would drive
/// the terminal that shows it. ``escaped(_:)`` writes every control character (C0, DEL, C1,
/// and the line and paragraph separators U+2028 and U+2029) as a visible escape, and a
/// backslash as two, so what is printed always reads back as exactly what was sent.
public enum ControlCharacters {
    /// Whether a scalar is written escaped.
    ///
    /// - Parameter scalar: A Unicode scalar.
    /// - Returns: `true` for control characters and line or paragraph separators.
    public static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        let value = scalar.value
        return value < 0x20 || (0x7F...0x9F).contains(value) || value == 0x2028 || value == 0x2029
    }

    /// The text with control characters escaped (`\n`, `\r`, `\t`, `\u{1B}`) and backslashes doubled.
    ///
    /// - Parameter text: Text from a client.
    /// - Returns: The text, unchanged when it holds nothing to escape.
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { needsEscape($0) || $0 == "\\" }) else { return text }
        var result = ""
        result.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            default:
                if needsEscape(scalar) {
                    result += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
                } else {
                    result.unicodeScalars.append(scalar)
                }
            }
        }
        return result
    }
}
