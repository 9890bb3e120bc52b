/// FNV-1a 64-bit hashing of bytes and of canonical JSON, used to compare states cheaply.
///
/// FNV-1a is fast and well distributed but not cryptographic: it detects divergence, it does
/// not authenticate.
public enum Digest {
    /// The FNV-1a 64-bit offset basis, the hash of empty input.
    public static let offsetBasis: UInt64 = 0xcbf2_9ce4_8422_2325
    /// The FNV-1a 64-bit prime.
    public static let prime: UInt64 = 0x0000_0100_0000_01b3

    /// The FNV-1a 64-bit hash of a byte sequence.
    /// - Parameter bytes: The bytes to hash; contiguous storage is hashed in a tight loop.
    /// - Returns: The 64-bit hash (``offsetBasis`` for empty input).
    public static func fnv1a64<Bytes: Sequence>(_ bytes: Bytes) -> UInt64 where Bytes.Element == UInt8 {
        if let hash = bytes.withContiguousStorageIfAvailable({ fnv1a64(buffer: $0) }) {
            return hash
        }
        var hash = offsetBasis
        for byte in bytes {
            hash = (hash ^ UInt64(byte)) &* prime
        }
        return hash
    }

    /// The FNV-1a 64-bit hash of a contiguous buffer.
    @inline(__always)
    static func fnv1a64(buffer: UnsafeBufferPointer<UInt8>) -> UInt64 {
        var hash = offsetBasis
        for byte in buffer {
            hash = (hash ^ UInt64(byte)) &* prime
        }
        return hash
    }

    /// Formats a 64-bit value as 16 lowercase hexadecimal digits, zero padded.
    /// - Parameter value: The value to format.
    /// - Returns: A 16-character string such as `"00000000000000ff"`.
    public static func hex(_ value: UInt64) -> String {
        String(unsafeUninitializedCapacity: 16) { characters in
            let digits: StaticString = "0123456789abcdef"
            let table = digits.utf8Start
            var rest = value
            var position = 15
            while position >= 0 {
                characters[position] = table[Int(rest & 0xF)]
                rest >>= 4
                position -= 1
            }
            return 16
        }
    }

    /// The digest of a JSON value: the hex FNV-1a 64 hash of its RFC 8785 canonical bytes.
    /// - Parameter value: The value to digest; equal values always give equal digests.
    /// - Returns: 16 lowercase hexadecimal digits.
    public static func of(_ value: JSON) -> String {
        hex(fnv1a64(value.canonicalBytes))
    }
}
