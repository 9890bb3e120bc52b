import Testing
@testable import SyncProtocol

private func parse(_ text: String, maxDepth: Int = 512) throws(JSONParseError) -> JSON {
    try JSON(parsing: text, maxDepth: maxDepth)
}

private func parseError(_ bytes: [UInt8], maxDepth: Int = 512) -> JSONParseError? {
    do {
        _ = try JSON(parsing: bytes, maxDepth: maxDepth)
        return nil
    } catch {
        return error
    }
}

private func parseError(_ text: String, maxDepth: Int = 512) -> JSONParseError? {
    parseError(Array(text.utf8), maxDepth: maxDepth)
}

@Suite struct JSONParserTests {
    @Test func scalars() throws {
        #expect(try parse("null") == .null)
        #expect(try parse("true") == .bool(true))
        #expect(try parse("false") == .bool(false))
        #expect(try parse("\"hi\"") == .string("hi"))
        #expect(try parse("42") == .number(42))
        #expect(try parse(" \t\r\n[1, 2]\n ") == [1, 2])
    }

    @Test func containers() throws {
        let value = try parse(#"{"a": [1, {"b": null}, []], "c": {}, "d": "x"}"#)
        #expect(value == ["a": [1, ["b": nil], []], "c": [:], "d": "x"])
        #expect(try parse("[]") == .array([]))
        #expect(try parse("{ }") == .object([:]))
        #expect(try parse("[[[]]]") == [[[]]])
    }

    @Test func allInputForms() throws {
        let text = #"{"k":[true,1.5]}"#
        let bytes = Array(text.utf8)
        let fromString = try JSON(parsing: text)
        let fromArray = try JSON(parsing: bytes)
        let fromRaw = try bytes.withUnsafeBytes { raw throws(JSONParseError) in try JSON(parsing: raw) }
        #expect(fromString == fromArray)
        #expect(fromArray == fromRaw)
    }

    @Test func numbers() throws {
        #expect(try parse("0") == .number(0))
        #expect(try parse("9007199254740992").numberValue == 9_007_199_254_740_992)
        #expect(try parse("-9007199254740992").numberValue == -9_007_199_254_740_992)
        #expect(try parse("9007199254740993").numberValue == 9_007_199_254_740_992)  // rounds to even
        #expect(try parse("123456789012345").numberValue == 123_456_789_012_345)
        #expect(try parse("1e2").numberValue == 100)
        #expect(try parse("1E+2").numberValue == 100)
        #expect(try parse("2.5e-3").numberValue == 0.0025)
        #expect(try parse("0.1").numberValue == 0.1)
        #expect(try parse("-0.5").numberValue == -0.5)
        #expect(try parse("1e-400").numberValue == 0)
        #expect(try parse("1.7976931348623157e308").numberValue == 1.7976931348623157e308)
        #expect(try parse("5e-324").numberValue == Double(bitPattern: 1))
        #expect(try parse("333333333.33333329").numberValue == 333_333_333.333_333_3)
        #expect(try parse("0.30000000000000004").numberValue == 0.1 + 0.2)
        #expect(try parse("123456789.123456789e-5").numberValue == 1234.56789123456789)
        let negativeZero = try #require(try parse("-0").numberValue)
        #expect(negativeZero == 0 && negativeZero.sign == .minus)
        #expect(try parse("-0").canonicalString == "0")
        #expect(try parse("-0.0").numberValue?.sign == .minus)
    }

    @Test func numbersMatchStandardLibrary() throws {
        let samples = [
            "0.1", "1.5", "3.14159", "2.718281828459045", "1e22", "1e23", "4.35", "0.000001",
            "123.456e10", "-98765.4321", "1.0e-22", "8.5e-22", "12345678901234567890",
            "0.1234567890123456789", "9.007199254740993e15", "2.2250738585072011e-308",
            "2.2250738585072014e-308", "4.9406564584124654e-324", "1.7976931348623158e308",
        ]
        for sample in samples {
            #expect(try parse(sample).numberValue == Double(sample), "\(sample)")
        }
    }

    @Test func stringEscapes() throws {
        #expect(try parse(#""a\"b\\c\/d\b\f\n\r\t""#) == .string("a\"b\\c/d\u{8}\u{C}\n\r\t"))
        #expect(try parse(#""\u0041\u00e9\u20AC""#) == .string("Aé€"))
        #expect(try parse(#""\u0000""#) == .string("\u{0}"))
        #expect(try parse(#""\uD83D\uDE00""#) == .string("😀"))
        #expect(try parse(#""x\ud83d\ude00y""#).stringValue?.unicodeScalars.count == 3)
        #expect(try parse("\"é€😀 plain\"") == .string("é€😀 plain"))
        #expect(try parse("\"\u{7F}\u{2028}\"") == .string("\u{7F}\u{2028}"))
        // Long strings exercise the eight-bytes-at-a-time scan, including the tail.
        let long = String(repeating: "abcdefghij", count: 20)
        #expect(try parse("\"\(long)\"") == .string(long))
        #expect(try parse("\"\(long)\\n\(long)é\"") == .string(long + "\n" + long + "é"))
        for length in 0..<20 {
            let text = String(repeating: "x", count: length)
            #expect(try parse("[\"\(text)\",\"\(text)\\t\"]") == [.string(text), .string(text + "\t")])
        }
    }

    @Test func rejectsTrailingCommas() {
        #expect(parseError("[1,]")?.reason == "trailing comma in array")
        #expect(parseError(#"{"a":1,}"#)?.reason == "trailing comma in object")
        #expect(parseError("[1,,2]") != nil)
        #expect(parseError("[,]") != nil)
    }

    @Test func rejectsBadNumbers() {
        for bad in ["01", "-01", "00", "+1", ".5", "1.", "1.e5", "-", "-a", "1e", "1e+", "--1",
                    "NaN", "Infinity", "-Infinity", "0x10", "1e400", "-1e400", "1_000"] {
            #expect(parseError(bad) != nil, "\(bad)")
        }
        #expect(parseError("01")?.reason == "leading zeros are not allowed in numbers")
        #expect(parseError("1e400")?.reason == "number out of range")
    }

    @Test func rejectsControlCharactersInStrings() {
        for byte: UInt8 in 0..<0x20 {
            #expect(parseError([0x22, byte, 0x22]) != nil, "byte \(byte)")
        }
        #expect(parseError("\"a\tb\"")?.offset == 2)
    }

    @Test func rejectsInvalidUTF8() {
        let cases: [[UInt8]] = [
            [0x22, 0xC0, 0xAF, 0x22],              // overlong '/'
            [0x22, 0xC1, 0xBF, 0x22],              // overlong
            [0x22, 0xE0, 0x80, 0xAF, 0x22],        // overlong 3-byte
            [0x22, 0xF0, 0x80, 0x80, 0xAF, 0x22],  // overlong 4-byte
            [0x22, 0xED, 0xA0, 0x80, 0x22],        // encoded high surrogate U+D800
            [0x22, 0xED, 0xBF, 0xBF, 0x22],        // encoded low surrogate U+DFFF
            [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22],  // above U+10FFFF
            [0x22, 0xF5, 0x80, 0x80, 0x80, 0x22],  // invalid lead byte
            [0x22, 0xFF, 0x22],
            [0x22, 0x80, 0x22],                    // lone continuation
            [0x22, 0xE2, 0x82, 0x22],              // truncated €
            [0x22, 0xE2, 0x82],                    // truncated at end of input
            [0x22, 0xC3],
            [0x22, 0x61, 0x61, 0x61, 0x61, 0x61, 0x61, 0x61, 0x61, 0x61, 0xC3, 0x28, 0x22],
        ]
        for bytes in cases {
            #expect(parseError(bytes) != nil, "\(bytes)")
        }
        // Valid boundary scalars are accepted.
        let valid: [[UInt8]] = [
            [0x22, 0xC2, 0x80, 0x22], [0x22, 0xDF, 0xBF, 0x22], [0x22, 0xE0, 0xA0, 0x80, 0x22],
            [0x22, 0xED, 0x9F, 0xBF, 0x22], [0x22, 0xEE, 0x80, 0x80, 0x22], [0x22, 0xEF, 0xBF, 0xBF, 0x22],
            [0x22, 0xF0, 0x90, 0x80, 0x80, 0x22], [0x22, 0xF4, 0x8F, 0xBF, 0xBF, 0x22],
        ]
        for bytes in valid {
            #expect(parseError(bytes) == nil, "\(bytes)")
        }
    }

    @Test func rejectsUnpairedSurrogateEscapes() {
        for bad in [#""\uD83D""#, #""\uD83Dx""#, #""\uD83D\n""#, #""\uD83D\u0041""#, #""\uDE00""#,
                    #""\uDE00\uD83D""#, #""\uD83D\uD83D""#, #""\uD83D\u""#] {
            #expect(parseError(bad) != nil, "\(bad)")
        }
        #expect(parseError(#""\uDE00""#)?.reason == "unpaired low surrogate escape")
    }

    @Test func rejectsBadEscapes() {
        for bad in [#""\x""#, #""\u12""#, #""\u12G4""#, #""\'""#, "\"\\", #""\U0041""#] {
            #expect(parseError(bad) != nil, "\(bad)")
        }
    }

    @Test func rejectsDuplicateKeys() {
        let error = parseError(#"{"k": 1, "k": 2}"#)
        #expect(error?.reason == "duplicate key \"k\"")
        #expect(error?.offset == 9)
        #expect(parseError(#"{"a": {"k": 1, "j": {}, "k": 2}}"#)?.reason == "duplicate key \"k\"")
        // An escaped spelling of the same key is still a duplicate.
        #expect(parseError(#"{"k": 1, "\u006b": 2}"#) != nil)
        #expect(parseError(#"[{"k": 1}, {"k": 2}]"#) == nil)
    }

    @Test func rejectsStructuralErrors() {
        for bad in ["", " ", "[", "]", "{", "}", "[1", "[1 2]", #"{"a" 1}"#, #"{"a":}"#, #"{a:1}"#,
                    #"{"a":1 "b":2}"#, "1 2", "[] []", "nul", "tru", "falsey", "\"abc", "[1]x",
                    "\u{FEFF}1", "\u{A0}1", "\u{B}1", "{,}", #"{"a":1,,"b":2}"#, "'a'"] {
            #expect(parseError(bad) != nil, "\(bad)")
        }
        #expect(parseError(#"{"a" 1}"#) == JSONParseError(offset: 5, reason: "expected ':' after object key"))
        #expect(parseError(#"{"a" 1}"#)?.description == "invalid JSON at byte 5: expected ':' after object key")
    }

    @Test func nestingLimit() throws {
        let ok = String(repeating: "[", count: 512) + String(repeating: "]", count: 512)
        #expect(parseError(ok) == nil)
        let tooDeep = String(repeating: "[", count: 513) + String(repeating: "]", count: 513)
        #expect(parseError(tooDeep)?.reason == "nesting deeper than 512 levels")
        #expect(parseError("[[1]]", maxDepth: 1) != nil)
        #expect(parseError("[1]", maxDepth: 1) == nil)
        #expect(parseError(#"{"a":{"b":1}}"#, maxDepth: 1) != nil)
        #expect(parseError("1", maxDepth: 0) == nil)
        #expect(parseError("[]", maxDepth: 0) != nil)
        let deeper = String(repeating: "[", count: 2_000) + String(repeating: "]", count: 2_000)
        #expect(parseError(deeper, maxDepth: 2_000) == nil)
        #expect(parseError(deeper)?.offset == 512)
        // The parser does not recurse, so a huge limit on a very deep input is safe for the
        // parser itself (this input fails at its end, so no deep value is built or destroyed).
        let deep = String(repeating: "[", count: 1_000_000) + "x"
        #expect(parseError(deep, maxDepth: 2_000_000)?.offset == 1_000_000)
    }

    @Test func roundTripThroughCanonicalForm() throws {
        let values: [JSON] = [
            .null, true, false, 0, -1, 1.5, -2.25e-10, 1e300, 9_007_199_254_740_992, 0.1,
            "", "plain", "quote\" backslash\\ slash/ controls\u{0}\u{1F}\u{7F} é € 😀 \u{2028}",
            [], [:], [1, "two", [3], ["four": 4]],
            ["a": 1, "b": [true, nil], "é": "x", "😀": ["nested": ["deep": [[], [:]]]], "\u{FB33}": 2,
             "": "empty key", "\n": "newline key"],
            .number(Double(bitPattern: 1)), .number(.greatestFiniteMagnitude), .number(-.leastNormalMagnitude),
            .number(1.2345678901234568e20), .number(0.000001), .number(1e-7), .number(1e21),
        ]
        for value in values {
            let bytes = value.canonicalBytes
            let reparsed = try JSON(parsing: bytes)
            #expect(reparsed == value, "\(value.canonicalString)")
            #expect(reparsed.canonicalBytes == bytes)
            #expect(try JSON(parsing: value.prettyString) == value)
        }
    }

    @Test func errorDescription() {
        let error = JSONParseError(offset: 12, reason: "expected ':' after object key")
        #expect(error.description == "invalid JSON at byte 12: expected ':' after object key")
    }
}
