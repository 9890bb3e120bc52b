import Testing
@testable import SyncProtocol

@Suite struct DigestTests {
    @Test func knownVectors() {
        #expect(Digest.fnv1a64([UInt8]()) == 0xcbf2_9ce4_8422_2325)
        #expect(Digest.fnv1a64([UInt8]()) == Digest.offsetBasis)
        #expect(Digest.fnv1a64("a".utf8) == 0xaf63_dc4c_8601_ec8c)
        #expect(Digest.fnv1a64("foobar".utf8) == 0x8594_4171_f739_67e8)
        #expect(Digest.hex(Digest.fnv1a64("a".utf8)) == "af63dc4c8601ec8c")
        #expect(Digest.hex(Digest.fnv1a64("foobar".utf8)) == "85944171f73967e8")
    }

    @Test func contiguousAndNonContiguousAgree() {
        let bytes = Array("the quick brown fox".utf8)
        let lazyBytes = bytes.lazy.map { $0 }
        #expect(Digest.fnv1a64(bytes) == Digest.fnv1a64(lazyBytes))
        #expect(Digest.fnv1a64(bytes[4...]) == Digest.fnv1a64(Array(bytes[4...])))
    }

    @Test func hexFormatting() {
        #expect(Digest.hex(0) == "0000000000000000")
        #expect(Digest.hex(0xff) == "00000000000000ff")
        #expect(Digest.hex(.max) == "ffffffffffffffff")
        #expect(Digest.hex(0x0123_4567_89ab_cdef) == "0123456789abcdef")
    }

    @Test func digestOfJSON() throws {
        let value: JSON = ["count": 0]
        #expect(Digest.of(value) == Digest.hex(Digest.fnv1a64("{\"count\":0}".utf8)))
        // Equal values digest equally whatever their member order or number spelling.
        let a = try JSON(parsing: #"{"b": 1.0, "a": [1e2, -0]}"#)
        let b = try JSON(parsing: #"{"a":[100,0],"b":1}"#)
        #expect(Digest.of(a) == Digest.of(b))
        #expect(Digest.of(a) != Digest.of(["a": [100, 0], "b": 2]))
        #expect(Digest.of(a).count == 16)
    }
}
