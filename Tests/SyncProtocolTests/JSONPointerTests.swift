import Testing
@testable import SyncProtocol

@Suite("JSONPointer")
struct JSONPointerTests {
    /// The document of RFC 6901 §5.
    static let rfcDocument: JSON = [
        "foo": ["bar", "baz"],
        "": 0,
        "a/b": 1,
        "c%d": 2,
        "e^f": 3,
        "g|h": 4,
        "i\\j": 5,
        "k\"l": 6,
        " ": 7,
        "m~n": 8,
    ]

    /// RFC 6901 §5: each pointer (JSON string form) and the value it refers to.
    static let rfcExamples: [(String, JSON)] = [
        ("", rfcDocument),
        ("/foo", ["bar", "baz"]),
        ("/foo/0", "bar"),
        ("/", 0),
        ("/a~1b", 1),
        ("/c%d", 2),
        ("/e^f", 3),
        ("/g|h", 4),
        ("/i\\j", 5),
        ("/k\"l", 6),
        ("/ ", 7),
        ("/m~0n", 8),
    ]

    @Test("RFC 6901 §5 examples resolve", arguments: rfcExamples)
    func rfcExample(text: String, expected: JSON) throws {
        let pointer = try JSONPointer(text)
        #expect(JSONPointerTests.rfcDocument.value(at: pointer) == expected)
        #expect(pointer.description == text)
    }

    @Test("tokens are unescaped")
    func tokens() throws {
        #expect(try JSONPointer("").tokens == [])
        #expect(try JSONPointer("/").tokens == [""])
        #expect(try JSONPointer("//").tokens == ["", ""])
        #expect(try JSONPointer("/a/").tokens == ["a", ""])
        #expect(try JSONPointer("/a~1b/m~0n").tokens == ["a/b", "m~n"])
        // "~01" is "~" then "1", never "/": unescape ~1 before ~0 would be wrong.
        #expect(try JSONPointer("/~01").tokens == ["~1"])
        #expect(try JSONPointer("/~10").tokens == ["/0"])
        #expect(try JSONPointer("/é/日本/🎉").tokens == ["é", "日本", "🎉"])
        // A combining mark after "/" must not hide the separator.
        #expect(try JSONPointer("/a/\u{301}").tokens == ["a", "\u{301}"])
        #expect(try JSONPointer("/0/-/01").tokens == ["0", "-", "01"])
    }

    @Test("root")
    func root() throws {
        #expect(JSONPointer.root.tokens.isEmpty)
        #expect(JSONPointer.root.description == "")
        #expect(try JSONPointer("") == .root)
        #expect(JSONPointerTests.rfcDocument.value(at: .root) == JSONPointerTests.rfcDocument)
    }

    @Test("description re-escapes and round-trips")
    func descriptionRoundTrip() throws {
        let pointer = JSONPointer(tokens: ["a/b", "~", "~1", "/~", "", "x y", "é"])
        #expect(pointer.description == "/a~1b/~0/~01/~1~0//x y/é")
        #expect(try JSONPointer(pointer.description) == pointer)
        for text in ["", "/", "//", "/a~1b", "/m~0n", "/~0~1~0", "/a/0/-"] {
            #expect(try JSONPointer(text).description == text)
        }
    }

    @Test("bad pointers are rejected with a reason", arguments: [
        "a", "a/b", " /a", "~0", "#/a", "/~", "/a~", "/~2", "/a~x/b", "/~a", "/~/", "/a/~~0",
    ])
    func badPointer(text: String) {
        let error = #expect(throws: JSONPointerError.self) { try JSONPointer(text) }
        #expect(error?.pointer == text)
        #expect(error?.reason.isEmpty == false)
        #expect(error?.description.contains(text) == true)
    }

    @Test("array indexes must be canonical and in range")
    func arrayIndexes() throws {
        let document: JSON = ["a": [10, 11, 12]]
        #expect(document.value(at: try JSONPointer("/a/0")) == 10)
        #expect(document.value(at: try JSONPointer("/a/2")) == 12)
        for text in ["/a/3", "/a/-", "/a/01", "/a/00", "/a/+1", "/a/-1", "/a/1.0", "/a/ 1", "/a/",
                     "/a/99999999999999999999999", "/a/x"] {
            #expect(document.value(at: try JSONPointer(text)) == nil, "\(text)")
        }
        #expect(JSONPointer.arrayIndex("0") == 0)
        #expect(JSONPointer.arrayIndex("12") == 12)
        #expect(JSONPointer.arrayIndex("9223372036854775807") == Int.max)
        #expect(JSONPointer.arrayIndex("9223372036854775808") == nil)
        #expect(JSONPointer.arrayIndex("") == nil)
        #expect(JSONPointer.arrayIndex("٣") == nil)
    }

    @Test("missing members and scalars resolve to nil")
    func missing() throws {
        let document: JSON = ["a": ["b": "c"], "n": nil, "s": "str", "x": 1]
        #expect(document.value(at: try JSONPointer("/a/b")) == "c")
        #expect(document.value(at: try JSONPointer("/n")) == .null)
        #expect(document.value(at: try JSONPointer("/a/z")) == nil)
        #expect(document.value(at: try JSONPointer("/z")) == nil)
        #expect(document.value(at: try JSONPointer("/a/b/c")) == nil)
        #expect(document.value(at: try JSONPointer("/n/0")) == nil)
        #expect(document.value(at: try JSONPointer("/s/0")) == nil)
        #expect(document.value(at: try JSONPointer("/x/0")) == nil)
        #expect(JSON.number(3).value(at: try JSONPointer("/0")) == nil)
    }

    @Test("pointers are hashable by tokens")
    func hashable() throws {
        let set: Set<JSONPointer> = [try JSONPointer("/a~1b"), JSONPointer(tokens: ["a/b"]), .root]
        #expect(set.count == 2)
        #expect(try JSONPointer("/a~1b") != JSONPointer("/a/b"))
    }
}
