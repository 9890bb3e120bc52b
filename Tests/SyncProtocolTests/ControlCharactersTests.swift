import Testing
@testable import SyncProtocol

/// The one escaping helper: every class of scalar that can drive a terminal, forge a log
/// line or reorder what a line shows is escaped; everything else passes as it is.
@Suite struct ControlCharactersTests {
    /// One scalar of each class that must be escaped, with its escape.
    static let dangerous: [(Unicode.Scalar, String)] = [
        ("\u{0}", "\\u0000"), ("\u{7}", "\\u0007"), ("\u{1B}", "\\u001b"), ("\u{1F}", "\\u001f"),   // C0
        ("\u{7F}", "\\u007f"),                                                                       // DEL
        ("\u{80}", "\\u0080"), ("\u{9B}", "\\u009b"), ("\u{9D}", "\\u009d"), ("\u{9F}", "\\u009f"), // C1 (CSI, OSC)
        ("\u{2028}", "\\u2028"), ("\u{2029}", "\\u2029"),                                           // separators
        ("\u{202A}", "\\u202a"), ("\u{202E}", "\\u202e"), ("\u{2066}", "\\u2066"), ("\u{2069}", "\\u2069"),
        ("\u{200E}", "\\u200e"), ("\u{200F}", "\\u200f"), ("\u{061C}", "\\u061c"),                  // bidi
    ]

    @Test func everyDangerousClassIsEscapedForATerminal() {
        for (scalar, escape) in Self.dangerous {
            let text = "a" + String(Character(scalar)) + "b"
            #expect(ControlCharacters.terminalSafe(text, keepingNewlines: false) == "a\(escape)b", "U+\(String(scalar.value, radix: 16))")
            #expect(ControlCharacters.escaped(text) == "a\(escape)b")
        }
    }

    @Test func everyScalarUpToU3000IsDecidedTheSameByBytesAndByScalars() {
        for value in UInt32(0)...0x3000 {
            guard let scalar = Unicode.Scalar(value), scalar != "\n", scalar != "\t" else { continue }
            let text = "x" + String(Character(scalar))
            let changed = ControlCharacters.terminalSafe(text) != text
            #expect(changed == ControlCharacters.needsEscape(scalar), "U+\(String(value, radix: 16))")
        }
    }

    @Test func plainTextAndOtherUnicodePassUnchanged() {
        for text in ["plain", "naïve café", "日本語", "emoji 🎉", "arabic العربية", "backslash \\ stays", "\"quoted\""] {
            #expect(ControlCharacters.terminalSafe(text) == text)
        }
    }

    @Test func newlinesStayInTextAndAreEscapedInALogLine() {
        #expect(ControlCharacters.terminalSafe("one\ntwo\tx") == "one\ntwo\tx")
        #expect(ControlCharacters.terminalSafe("one\ntwo\r", keepingNewlines: false) == "one\\ntwo\\r")
        #expect(ControlCharacters.escaped("a\\b\nc") == "a\\\\b\\nc")
    }

    @Test func jsonStaysValidAndKeepsItsValue() throws {
        // An action type holding a forged log line, an OSC and a right-to-left override.
        let value: JSON = ["type": .string("x\nhubd: replica 7 (admin) attached\u{1B}]0;owned\u{7}\u{9B}2J\u{202E}txt\u{85}")]
        let canonical = value.canonicalString
        let shown = ControlCharacters.terminalSafe(canonical, keepingNewlines: false)
        #expect(!shown.unicodeScalars.contains { ControlCharacters.needsEscape($0) })
        #expect(try JSON(parsing: Array(shown.utf8)) == value)
    }
}
