@testable import SyncProtocol
import Testing

@Suite("Skipping plain ASCII eight bytes at a time")
struct PlainASCIITests {
    /// The byte-by-byte meaning: printable ASCII other than `"` and `\`.
    private static func isPlain(_ byte: UInt8) -> Bool {
        byte >= 0x20 && byte < 0x7F && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\")
    }

    @Test("every byte skipped is plain, and a word is left only for a byte that is not (every byte value, every position)")
    func everyByteEveryPosition() {
        for special in 0...255 {
            for position in 0..<20 {
                var bytes = [UInt8](repeating: UInt8(ascii: "a"), count: 20)
                bytes[position] = UInt8(special)
                for start in 0..<4 {
                    let stop = bytes.withUnsafeBytes { skipPlainASCIIWords($0, from: start) }
                    #expect((start..<stop).allSatisfy { Self.isPlain(bytes[$0]) })
                    // It stops at a whole word: the next word holds a non-plain byte, or fewer than 8 are left.
                    #expect((stop - start) % 8 == 0)
                    if stop + 8 <= bytes.count {
                        #expect(!(stop..<(stop + 8)).allSatisfy { Self.isPlain(bytes[$0]) },
                                "byte \(special) at \(position) from \(start): stopped at \(stop) before a plain word")
                    }
                }
            }
        }
    }

    @Test("isCanonical on strings with an awkward byte anywhere agrees with parsing and re-encoding")
    func canonicalStrings() {
        let awkward: [[UInt8]] = [[0x22], [0x5C, 0x22], [0x5C, 0x5C], [0x5C, 0x6E], [0x1F], [0x7F], [0xC3, 0xA9], [0x20], [0x7E]]
        for insert in awkward {
            for position in 0..<18 {
                var content = [UInt8](repeating: UInt8(ascii: "x"), count: 18)
                content.insert(contentsOf: insert, at: position)
                let bytes = [UInt8(ascii: "\"")] + content + [UInt8(ascii: "\"")]
                let fast = bytes.withUnsafeBytes { JSON.isCanonical($0) }
                let reference = (try? JSON(parsing: bytes)).map { $0.canonicalBytes == bytes } ?? false
                // The subset answers `true` only where the reference does (and for printable ASCII it does).
                if fast { #expect(reference, "\(insert) at \(position)") }
                let inSubset: [[UInt8]] = [[0x20], [0x7E], [0x5C, 0x22], [0x5C, 0x5C]]
                if inSubset.contains(insert) { #expect(fast && reference, "\(insert) at \(position)") }
            }
        }
    }
}
