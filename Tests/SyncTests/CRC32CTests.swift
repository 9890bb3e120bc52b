@testable import StoreHub
import Testing

@Suite("CRC-32C")
struct CRC32CTests {
    @Test("the standard check values")
    func checkValues() {
        #expect(CRC32C.checksum(Array("123456789".utf8)) == 0xE306_9283)
        #expect(CRC32C.checksum([UInt8](repeating: 0, count: 32)) == 0x8A91_36AA)
        #expect(CRC32C.checksum([UInt8](repeating: 0xFF, count: 32)) == 0x62A8_AB43)
        #expect(CRC32C.checksum(Array(0..<32)) == 0x46DD_794E)
        #expect(CRC32C.checksum([]) == 0)
    }

    @Test("the processor's instruction and the table agree on every length, alignment and seed")
    func hardwareAgreesWithTable() {
        var bytes: [UInt8] = []
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        for _ in 0..<300 {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            bytes.append(UInt8(truncatingIfNeeded: state >> 56))
        }
        bytes.withUnsafeBytes { all in
            for start in 0..<9 {
                for length in 0...(all.count - start) where length < 40 || length % 17 == 0 {
                    let slice = UnsafeRawBufferPointer(rebasing: all[start..<(start + length)])
                    for seed: UInt32 in [0, 0xDEAD_BEEF] {
                        #expect(CRC32C.checksum(slice, seed: seed) == CRC32C.tableChecksum(slice, seed: seed),
                                "start \(start), length \(length), seed \(seed)")
                    }
                }
            }
            // Continuing from a seed is the checksum of the concatenation.
            let first = UnsafeRawBufferPointer(rebasing: all[0..<123]), rest = UnsafeRawBufferPointer(rebasing: all[123...])
            #expect(CRC32C.checksum(rest, seed: CRC32C.checksum(first)) == CRC32C.checksum(all))
        }
        #if arch(x86_64)
        // Every x86-64 machine this project runs on has SSE 4.2 (2008 on): the fast path is the one tested.
        #expect(CRC32C.isHardware)
        #endif
    }
}
