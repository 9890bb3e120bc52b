import Testing
@testable import SyncProtocol

/// JSON strings and member names are sequences of Unicode scalars (RFC 8259, RFC 8785):
/// Swift's canonical equivalence must never merge two that differ.
@Suite("JSON equality by Unicode scalars")
struct ScalarEqualityTests {
    static let precomposed = "\u{E9}"          // é, one scalar
    static let decomposed = "e\u{301}"         // e + combining acute, two scalars

    @Test("Swift itself considers the pair equal, which is the trap")
    func swiftMergesThem() {
        #expect(Self.precomposed == Self.decomposed)
    }

    @Test("keys that differ only in normalization are two members, not a duplicate")
    func twoKeys() throws {
        let text = #"{"\#(Self.precomposed)":1,"\#(Self.decomposed)":2}"#
        let value = try JSON(parsing: text)
        let members = try #require(value.objectValue)
        #expect(members.count == 2)
        #expect(value[Self.precomposed] == 1)
        #expect(value[Self.decomposed] == 2)
        // Canonical form keeps both, sorted by UTF-16 code units: "e" (0x65) before "é" (0xE9).
        #expect(value.canonicalString == #"{"\#(Self.decomposed)":2,"\#(Self.precomposed)":1}"#)
    }

    @Test("a true duplicate (same scalars) is still refused")
    func realDuplicate() {
        #expect(throws: JSONParseError.self) { try JSON(parsing: #"{"\#(Self.decomposed)":1,"\#(Self.decomposed)":2}"#) }
    }

    @Test("== on JSON agrees with canonical-bytes equality")
    func equalityMatchesCanonicalBytes() throws {
        let pairs: [(JSON, JSON)] = [
            (.string(Self.precomposed), .string(Self.decomposed)),
            (.object([JSONKey(Self.precomposed): 1]), .object([JSONKey(Self.decomposed): 1])),
            (["a": .string("\u{212B}")], ["a": .string("\u{C5}")]),   // Angstrom sign vs Å
            (["\u{1E9B}\u{323}": 1], ["\u{1E9B}\u{323}": 1]),
            (1, 1.0), (.number(-0.0), 0), (.number(.nan), .null), (.number(.infinity), .null),
            ([1, "x"], [1, "x"]), ([true], [false]), ("a", "a"), (nil, false),
        ]
        for (a, b) in pairs {
            #expect((a == b) == (a.canonicalBytes == b.canonicalBytes), "\(a.canonicalString) vs \(b.canonicalString)")
            if a == b { #expect(a.hashValue == b.hashValue) }
        }
        #expect(JSON.string(Self.precomposed) != JSON.string(Self.decomposed))
        #expect(Set<JSON>([.string(Self.precomposed), .string(Self.decomposed)]).count == 2)
    }

    @Test("JSONKey compares and hashes by scalars and sorts as RFC 8785 does")
    func keys() {
        #expect(JSONKey(Self.precomposed) != JSONKey(Self.decomposed))
        #expect(Set([JSONKey(Self.precomposed), JSONKey(Self.decomposed)]).count == 2)
        // RFC 8785 §3.2.3's sorting example: by UTF-16 code units, so U+1F600 (surrogates
        // D83D DE00) sorts before U+FB33 and after U+20AC.
        let sorted = ["\u{20AC}", "\r", "\u{FB33}", "1", "\u{1F600}", "\u{80}", "\u{F6}"].map { JSONKey($0) }.sorted()
        #expect(sorted.map(\.string) == ["\r", "1", "\u{80}", "\u{F6}", "\u{20AC}", "\u{1F600}", "\u{FB33}"])
    }

    @Test("pointer lookups and edits keep the two keys apart")
    func pointersAndEdits() throws {
        var document: JSON = [:]
        try JSONEdit.set(try JSONPointer("/\(Self.precomposed)"), 1).apply(to: &document)
        try JSONEdit.set(try JSONPointer("/\(Self.decomposed)"), 2).apply(to: &document)
        #expect(document.objectValue?.count == 2)
        #expect(document.value(at: try JSONPointer("/\(Self.precomposed)")) == 1)
        #expect(document.value(at: try JSONPointer("/\(Self.decomposed)")) == 2)
        try JSONEdit.remove(try JSONPointer("/\(Self.decomposed)")).apply(to: &document)
        #expect(document == .object([JSONKey(Self.precomposed): 1]))
    }
}
