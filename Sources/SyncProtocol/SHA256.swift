/// SHA-256 as specified in FIPS 180-4, computed incrementally.
///
/// Feed the message with ``update(_:)`` as it arrives, in pieces of any size, then call
/// ``finalize()`` for the 32-byte digest; ``hash(_:)`` does both for a message already in hand.
/// Whole 64-byte blocks are compressed straight from the caller's storage, and only the tail
/// of a message that does not fill a block is copied, into a fixed buffer held inline.
public struct SHA256: Sendable {
    /// The size of a digest in bytes.
    public static let digestByteCount = 32
    /// The size of the blocks the message is compressed in, in bytes.
    public static let blockByteCount = 64

    /// The eight working hash values H0 through H7.
    private var state = State()
    /// Bytes of a block not yet full, held until the next update or the final padding.
    private var pending = zeroBlock
    /// How many bytes of ``pending`` are in use, always less than 64 between calls.
    private var pendingCount = 0
    /// The message length so far in bytes; it wraps, as the length field of the padding does.
    private var byteCount: UInt64 = 0

    /// Creates a hash of the empty message, ready to be fed.
    public init() {}

    /// Adds bytes to the message.
    ///
    /// - Parameter bytes: The next bytes of the message; contiguous storage (an array, a slice,
    ///   `String.UTF8View` of a native string) is read in place, anything else a block at a time.
    public mutating func update<Bytes: Sequence>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        let handled: Void? = bytes.withContiguousStorageIfAvailable { buffer in
            update(UnsafeRawBufferPointer(buffer))
        }
        if handled != nil { return }
        var iterator = bytes.makeIterator()
        var chunk = Self.zeroBlock
        while true {
            let filled = withUnsafeMutableBytes(of: &chunk) { raw in
                var count = 0
                while count < raw.count, let byte = iterator.next() {
                    raw[count] = byte
                    count += 1
                }
                return count
            }
            withUnsafeBytes(of: chunk) { raw in
                update(UnsafeRawBufferPointer(rebasing: raw[0..<filled]))
            }
            if filled < Self.blockByteCount { return }
        }
    }

    /// Adds the bytes of a raw buffer to the message.
    ///
    /// - Parameter buffer: The next bytes of the message; it is not retained.
    public mutating func update(_ buffer: UnsafeRawBufferPointer) {
        guard !buffer.isEmpty else { return }
        byteCount &+= UInt64(truncatingIfNeeded: buffer.count)
        var offset = 0

        if pendingCount > 0 {
            let start = pendingCount
            let taken = Swift.min(Self.blockByteCount - start, buffer.count)
            withUnsafeMutableBytes(of: &pending) { raw in
                UnsafeMutableRawBufferPointer(rebasing: raw[start..<(start + taken)])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: buffer[0..<taken]))
            }
            pendingCount = start + taken
            offset = taken
            guard pendingCount == Self.blockByteCount else { return }
            withUnsafeBytes(of: pending) { raw in
                Self.compress(&state, blocks: raw)
            }
            pendingCount = 0
        }

        let wholeBlocks = (buffer.count - offset) / Self.blockByteCount * Self.blockByteCount
        if wholeBlocks > 0 {
            Self.compress(&state, blocks: UnsafeRawBufferPointer(rebasing: buffer[offset..<(offset + wholeBlocks)]))
            offset += wholeBlocks
        }

        let rest = buffer.count - offset
        if rest > 0 {
            withUnsafeMutableBytes(of: &pending) { raw in
                UnsafeMutableRawBufferPointer(rebasing: raw[0..<rest])
                    .copyMemory(from: UnsafeRawBufferPointer(rebasing: buffer[offset...]))
            }
            pendingCount = rest
        }
    }

    /// Pads the message and returns its digest.
    ///
    /// The padding is a 1 bit, zeros, then the message length in bits as a 64-bit big-endian
    /// number, taken modulo 2^64 as FIPS 180-4 allows no longer message.
    ///
    /// - Returns: The 32-byte digest, H0 through H7 each written big-endian.
    public consuming func finalize() -> [UInt8] {
        var state = self.state
        var block = pending
        let start = pendingCount
        let bitCount = byteCount &<< 3
        withUnsafeMutableBytes(of: &block) { raw in
            raw[start] = 0x80
            var used = start + 1
            if used > Self.blockByteCount - 8 {
                for index in used..<Self.blockByteCount { raw[index] = 0 }
                Self.compress(&state, blocks: UnsafeRawBufferPointer(raw))
                used = 0
            }
            for index in used..<(Self.blockByteCount - 8) { raw[index] = 0 }
            raw.storeBytes(of: bitCount.bigEndian, toByteOffset: Self.blockByteCount - 8, as: UInt64.self)
            Self.compress(&state, blocks: UnsafeRawBufferPointer(raw))
        }
        return [UInt8](unsafeUninitializedCapacity: Self.digestByteCount) { digest, count in
            let raw = UnsafeMutableRawBufferPointer(digest)
            raw.storeBytes(of: state.h0.bigEndian, toByteOffset: 0, as: UInt32.self)
            raw.storeBytes(of: state.h1.bigEndian, toByteOffset: 4, as: UInt32.self)
            raw.storeBytes(of: state.h2.bigEndian, toByteOffset: 8, as: UInt32.self)
            raw.storeBytes(of: state.h3.bigEndian, toByteOffset: 12, as: UInt32.self)
            raw.storeBytes(of: state.h4.bigEndian, toByteOffset: 16, as: UInt32.self)
            raw.storeBytes(of: state.h5.bigEndian, toByteOffset: 20, as: UInt32.self)
            raw.storeBytes(of: state.h6.bigEndian, toByteOffset: 24, as: UInt32.self)
            raw.storeBytes(of: state.h7.bigEndian, toByteOffset: 28, as: UInt32.self)
            count = Self.digestByteCount
        }
    }

    /// The SHA-256 digest of a whole message.
    ///
    /// - Parameter bytes: The message.
    /// - Returns: The 32-byte digest.
    public static func hash<Bytes: Sequence>(_ bytes: Bytes) -> [UInt8] where Bytes.Element == UInt8 {
        var hasher = SHA256()
        hasher.update(bytes)
        return hasher.finalize()
    }

    /// Formats bytes as lowercase hexadecimal, two digits a byte.
    ///
    /// ``Digest/hex(_:)`` formats a single 64-bit value; this formats a digest of any length.
    ///
    /// - Parameter bytes: The bytes to format, usually a digest or an authentication code.
    /// - Returns: A string of `2 * bytes.count` characters, such as `"00ff"` for `[0, 255]`.
    public static func hex(_ bytes: [UInt8]) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { characters in
            let digits: StaticString = "0123456789abcdef"
            let table = digits.utf8Start
            var position = 0
            for byte in bytes {
                characters[position] = table[Int(byte &>> 4)]
                characters[position + 1] = table[Int(byte & 0x0F)]
                position += 2
            }
            return position
        }
    }
}

extension SHA256 {
    /// The working hash values, initially the first 32 bits of the fractional parts of the
    /// square roots of the first eight primes (FIPS 180-4, 5.3.3).
    struct State: Sendable {
        var h0: UInt32 = 0x6a09_e667
        var h1: UInt32 = 0xbb67_ae85
        var h2: UInt32 = 0x3c6e_f372
        var h3: UInt32 = 0xa54f_f53a
        var h4: UInt32 = 0x510e_527f
        var h5: UInt32 = 0x9b05_688c
        var h6: UInt32 = 0x1f83_d9ab
        var h7: UInt32 = 0x5be0_cd19
    }

    /// Sixty-four bytes held inline, so that buffering a partial block never allocates.
    typealias Block = (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64)

    /// A block of zero bytes.
    static let zeroBlock: Block = (0, 0, 0, 0, 0, 0, 0, 0)

    /// The round constants: the first 32 bits of the fractional parts of the cube roots of the
    /// first sixty-four primes (FIPS 180-4, 4.2.2).
    static let roundConstants: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]

    /// Rotates a word right by `count` bits, `count` being in 1...31.
    @inline(__always)
    static func rotateRight(_ word: UInt32, _ count: UInt32) -> UInt32 {
        (word &>> count) | (word &<< (32 &- count))
    }

    /// One round of the compression function (FIPS 180-4, 6.2.2 step 3), written for the
    /// caller to rotate the roles of the eight working variables rather than move their values.
    ///
    /// The arguments are the working variables in the roles `a` through `h`; only `d` and `h`
    /// change: `d` becomes `d + T1`, the next round's `e`, and `h` becomes `T1 + T2`, the next
    /// round's `a`. The last argument is the round constant plus the schedule word, `K[t] + W[t]`.
    @inline(__always)
    static func round(
        _ a: UInt32, _ b: UInt32, _ c: UInt32, _ d: inout UInt32,
        _ e: UInt32, _ f: UInt32, _ g: UInt32, _ h: inout UInt32,
        _ constantPlusWord: UInt32
    ) {
        let bigSigma1 = rotateRight(e, 6) ^ rotateRight(e, 11) ^ rotateRight(e, 25)
        let choose = g ^ (e & (f ^ g))
        let t1 = h &+ bigSigma1 &+ choose &+ constantPlusWord
        let bigSigma0 = rotateRight(a, 2) ^ rotateRight(a, 13) ^ rotateRight(a, 22)
        let majority = (a & b) | (c & (a | b))
        d &+= t1
        h = t1 &+ bigSigma0 &+ majority
    }

    /// Runs the compression function over every whole block of `blocks`, in order.
    ///
    /// The message schedule lives in a 64-word stack allocation made once per call.
    ///
    /// - Parameters:
    ///   - state: The working hash values, updated in place.
    ///   - blocks: A multiple of 64 bytes, any alignment; a trailing partial block is ignored.
    static func compress(_ state: inout State, blocks: UnsafeRawBufferPointer) {
        let blockCount = blocks.count / blockByteCount
        guard blockCount > 0 else { return }
        roundConstants.withUnsafeBufferPointer { constants in
            withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 64) { schedule in
                for block in 0..<blockCount {
                    let base = block * blockByteCount
                    for t in 0..<16 {
                        let word = blocks.loadUnaligned(fromByteOffset: base + t * 4, as: UInt32.self)
                        schedule[t] = UInt32(bigEndian: word)
                    }
                    for t in 16..<64 {
                        let w15 = schedule[t - 15]
                        let w2 = schedule[t - 2]
                        let sigma0 = rotateRight(w15, 7) ^ rotateRight(w15, 18) ^ (w15 &>> 3)
                        let sigma1 = rotateRight(w2, 17) ^ rotateRight(w2, 19) ^ (w2 &>> 10)
                        schedule[t] = sigma1 &+ schedule[t - 7] &+ sigma0 &+ schedule[t - 16]
                    }

                    var a = state.h0, b = state.h1, c = state.h2, d = state.h3
                    var e = state.h4, f = state.h5, g = state.h6, h = state.h7
                    // Eight rounds at a time, renaming the variables instead of shifting them.
                    var t = 0
                    while t < 64 {
                        round(a, b, c, &d, e, f, g, &h, constants[t] &+ schedule[t])
                        round(h, a, b, &c, d, e, f, &g, constants[t + 1] &+ schedule[t + 1])
                        round(g, h, a, &b, c, d, e, &f, constants[t + 2] &+ schedule[t + 2])
                        round(f, g, h, &a, b, c, d, &e, constants[t + 3] &+ schedule[t + 3])
                        round(e, f, g, &h, a, b, c, &d, constants[t + 4] &+ schedule[t + 4])
                        round(d, e, f, &g, h, a, b, &c, constants[t + 5] &+ schedule[t + 5])
                        round(c, d, e, &f, g, h, a, &b, constants[t + 6] &+ schedule[t + 6])
                        round(b, c, d, &e, f, g, h, &a, constants[t + 7] &+ schedule[t + 7])
                        t += 8
                    }
                    state.h0 &+= a
                    state.h1 &+= b
                    state.h2 &+= c
                    state.h3 &+= d
                    state.h4 &+= e
                    state.h5 &+= f
                    state.h6 &+= g
                    state.h7 &+= h
                }
            }
        }
    }
}
