import CSyncCRC

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as iSCSI, ext4 and many logs use:
/// it detects every burst error of up to 32 bits and a torn or flipped record with
/// probability 1 − 2⁻³².
///
/// Computed by the processor's CRC-32C instruction where there is one (SSE 4.2 on x86-64,
/// the CRC extension on arm64), else byte by byte from a table (`CSyncCRC`): the journal
/// checksums every record when it writes and when it recovers, and the table cost about
/// 6 cycles a byte.
enum CRC32C {
    /// The checksum of `bytes`, continuing from `seed` (the checksum of what came before).
    ///
    /// - Parameters:
    ///   - bytes: The data.
    ///   - seed: A previous result to continue from; 0 to start.
    /// - Returns: The CRC-32C.
    static func checksum(_ bytes: UnsafeRawBufferPointer, seed: UInt32 = 0) -> UInt32 {
        guard let base = bytes.baseAddress else { return seed }
        return ~csynccrc_crc32c_update(~seed, base, bytes.count)
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

    /// ``checksum(_:seed:)`` by the table, whatever the processor has (tests compare the two).
    static func tableChecksum(_ bytes: UnsafeRawBufferPointer, seed: UInt32 = 0) -> UInt32 {
        guard let base = bytes.baseAddress else { return seed }
        return ~csynccrc_crc32c_update_table(~seed, base, bytes.count)
    }

    /// Whether this machine computes it with a processor instruction.
    static var isHardware: Bool { csynccrc_crc32c_is_hardware() != 0 }
}
