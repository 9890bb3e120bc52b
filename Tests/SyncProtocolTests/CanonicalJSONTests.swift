import Testing
@testable import SyncProtocol

private func canonical(_ bits: UInt64) -> String {
    JSON.number(Double(bitPattern: bits)).canonicalString
}

@Suite struct CanonicalJSONTests {
    @Test func rfc8785Sample() throws {
        let input = #"""
        {
          "numbers": [333333333.33333329, 1E30, 4.50,
                      2e-3, 0.000000000000000000000000001],
          "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
          "literals": [null, true, false]
        }
        """#
        let value = try JSON(parsing: input)
        let expected = #"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        #expect(value.canonicalString == expected)
        #expect(value.canonicalBytes == Array(expected.utf8))
    }

    @Test func rfc8785SortingExample() throws {
        let input = #"""
        {
          "\u20ac": "Euro Sign",
          "\r": "Carriage Return",
          "\ufb33": "Hebrew Letter Dalet With Dagesh",
          "1": "One",
          "\ud83d\ude00": "Emoji: Grinning Face",
          "\u0080": "Control",
          "\u00f6": "Latin Small Letter O With Diaeresis"
        }
        """#
        let value = try JSON(parsing: input)
        let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\","
            + "\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\","
            + "\"😀\":\"Emoji: Grinning Face\",\"\u{FB33}\":\"Hebrew Letter Dalet With Dagesh\"}"
        #expect(value.canonicalString == expected)
    }

    @Test func utf16KeyOrder() {
        let keys = ["\u{FB33}", "😀", "€", "ö", "\u{80}", "1", "\r", "", "a", "ab", "b", "\u{E000}", "\u{FFFF}",
                    "\u{10000}", "\u{10FFFF}", "\u{D7FF}", "aé", "a😀", "a\u{FB33}"]
        let sorted = keys.sorted { _JSONWriter.utf16Precedes($0, $1) }
        let reference = keys.sorted { $0.utf16.lexicographicallyPrecedes($1.utf16) }
        #expect(sorted == reference)
        #expect(_JSONWriter.utf16Precedes("😀", "\u{FB33}"))
        #expect(!_JSONWriter.utf16Precedes("\u{FB33}", "😀"))
        #expect("\u{FB33}" < "😀")  // Swift's own order differs, which is why it is not used.
    }

    @Test func stringEscaping() {
        var controls = ""
        for value in 0..<0x20 { controls.unicodeScalars.append(Unicode.Scalar(UInt8(value))) }
        let expected = #""\u0000\u0001\u0002\u0003\u0004\u0005\u0006\u0007\b\t\n\u000b\f\r\u000e\u000f"#
            + #"\u0010\u0011\u0012\u0013\u0014\u0015\u0016\u0017\u0018\u0019\u001a\u001b\u001c\u001d\u001e\u001f""#
        #expect(JSON.string(controls).canonicalString == expected)
        #expect(JSON.string("a\"b\\c/d").canonicalString == #""a\"b\\c/d""#)
        #expect(JSON.string("\u{7F}é\u{2028}😀").canonicalString == "\"\u{7F}é\u{2028}😀\"")
        #expect(JSON.string("").canonicalString == #""""#)
        #expect(JSON.string("tail\n").canonicalString == #""tail\n""#)
    }

    @Test func structureHasNoWhitespace() {
        let value: JSON = ["b": [1, 2, ["c": nil]], "a": true, "empty": [:], "list": []]
        #expect(value.canonicalString == #"{"a":true,"b":[1,2,{"c":null}],"empty":{},"list":[]}"#)
    }

    @Test func rfc8785NumberTable() {
        let table: [(UInt64, String)] = [
            (0x0000_0000_0000_0000, "0"),
            (0x8000_0000_0000_0000, "0"),
            (0x0000_0000_0000_0001, "5e-324"),
            (0x8000_0000_0000_0001, "-5e-324"),
            (0x7fef_ffff_ffff_ffff, "1.7976931348623157e+308"),
            (0xffef_ffff_ffff_ffff, "-1.7976931348623157e+308"),
            (0x4340_0000_0000_0000, "9007199254740992"),
            (0xc340_0000_0000_0000, "-9007199254740992"),
            (0x4430_0000_0000_0000, "295147905179352830000"),
            (0x44b5_2d02_c7e1_4af5, "9.999999999999997e+22"),
            (0x44b5_2d02_c7e1_4af6, "1e+23"),
            (0x44b5_2d02_c7e1_4af7, "1.0000000000000001e+23"),
            (0x444b_1ae4_d6e2_ef4e, "999999999999999700000"),
            (0x444b_1ae4_d6e2_ef4f, "999999999999999900000"),
            (0x444b_1ae4_d6e2_ef50, "1e+21"),
            (0x3eb0_c6f7_a0b5_ed8c, "9.999999999999997e-7"),
            (0x3eb0_c6f7_a0b5_ed8d, "0.000001"),
            (0x41b3_de43_5555_5553, "333333333.3333332"),
            (0x41b3_de43_5555_5554, "333333333.33333325"),
            (0x41b3_de43_5555_5555, "333333333.3333333"),
            (0x41b3_de43_5555_5556, "333333333.3333334"),
            (0x41b3_de43_5555_5557, "333333333.33333343"),
            (0xbecb_f647_612f_3696, "-0.0000033333333333333333"),
            (0x4314_3ff3_c1cb_0959, "1424953923781206.2"),
            (0x4629_3e59_39a0_8cea, "1e+30"),
            (0x4295_e6b0_d000_0000, "6020138270720"),  // not in the RFC table; an exact integer
        ]
        #expect(Double(bitPattern: 0x4629_3e59_39a0_8cea) == 1e30)
        for (bits, expected) in table {
            #expect(canonical(bits) == expected, "0x\(String(bits, radix: 16))")
        }
    }

    @Test func numberLayout() {
        let cases: [(Double, String)] = [
            (1, "1"), (-1, "-1"), (100, "100"), (4.5, "4.5"), (0.002, "0.002"), (1e-7, "1e-7"),
            (1e-6, "0.000001"), (1.5e-7, "1.5e-7"), (1e21, "1e+21"), (1e20, "100000000000000000000"),
            (1.2345678901234568e20, "123456789012345680000"), (123.456, "123.456"), (-0.5, "-0.5"),
            (1e300, "1e+300"), (2.5e-300, "2.5e-300"), (0.1, "0.1"), (12_345.678, "12345.678"),
            (9_007_199_254_740_991, "9007199254740991"), (-9_007_199_254_740_991, "-9007199254740991"),
            (18_014_398_509_481_984, "18014398509481984"), (1e16, "10000000000000000"),
            (Double(bitPattern: 0x0010_0000_0000_0000), "2.2250738585072014e-308"),
        ]
        for (value, expected) in cases {
            #expect(JSON.number(value).canonicalString == expected, "\(value)")
        }
    }

    @Test func nonFiniteNumbersWriteNull() {
        #expect(JSON.number(.nan).canonicalString == "null")
        #expect(JSON.number(.infinity).canonicalString == "null")
        #expect(JSON.array([.number(-.infinity)]).canonicalString == "[null]")
    }

    @Test func writeCanonicalAppends() {
        var buffer: [UInt8] = Array("prefix:".utf8)
        JSON.array([1, "x"]).writeCanonical(into: &buffer)
        #expect(String(decoding: buffer, as: UTF8.self) == #"prefix:[1,"x"]"#)
    }

    @Test func prettyString() {
        let value: JSON = ["b": [1, ["c": nil]], "a": "x\n", "e": [:], "f": []]
        let expected = """
        {
          "a": "x\\n",
          "b": [
            1,
            {
              "c": null
            }
          ],
          "e": {},
          "f": []
        }
        """
        #expect(value.prettyString == expected)
        #expect(JSON.number(-0.0).prettyString == "0")
        #expect(JSON.string("s").prettyString == "\"s\"")
    }
}
