/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as iSCSI, ext4 and many logs use:
/// it detects every burst error of up to 32 bits and a torn or flipped record with
/// probability 1 − 2⁻³².
enum CRC32C {
    /// The byte-wise lookup table.
    private static let table: [UInt32] = (0..<256).map { index -> UInt32 in
        var crc = UInt32(index)
        for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
        return crc
    }

    /// The checksum of `bytes`, continuing from `seed` (the checksum of what came before).
    ///
    /// - Parameters:
    ///   - bytes: The data.
    ///   - seed: A previous result to continue from; 0 to start.
    /// - Returns: The CRC-32C.
    static func checksum(_ bytes: UnsafeRawBufferPointer, seed: UInt32 = 0) -> UInt32 {
        var crc = ~seed
        table.withUnsafeBufferPointer { table in
            for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        }
        return ~crc
    }

    /// The checksum of an array's bytes.
    ///
    /// - Parameters:
    ///   - bytes: The data.
    ///   - seed: A previous result to continue from; 0 to start.
    /// - Returns: The CRC-32C.
    static func checksum(_ bytes: [UInt8], seed: UInt32 = 0) -> UInt32 {
        bytes.withUnsafeBytes { checksum($0, seed: seed) }
    }
}
