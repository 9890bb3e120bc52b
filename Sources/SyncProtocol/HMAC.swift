/// HMAC with SHA-256 as specified in RFC 2104, computed incrementally.
///
/// The code of a message is `SHA256((K ^ opad) || SHA256((K ^ ipad) || message))`, where `K` is
/// the key padded with zeros to the 64-byte block size, or first hashed when it is longer.
/// Both padded keys are absorbed at initialization, so the key itself is not kept.
public struct HMACSHA256: Sendable {
    /// The size of an authentication code in bytes.
    public static let byteCount = SHA256.digestByteCount

    /// The inner hash, already fed the key XOR `ipad`; the message goes here.
    private var inner = SHA256()
    /// The outer hash, already fed the key XOR `opad`; the inner digest goes here.
    private var outer = SHA256()

    /// Creates an authenticator keyed with `key`.
    ///
    /// - Parameter key: The secret key, of any length; keys longer than 64 bytes are hashed
    ///   first, and RFC 2104 recommends at least 32 bytes.
    public init<Key: Sequence>(key: Key) where Key.Element == UInt8 {
        var block = Array(key)
        if block.count > SHA256.blockByteCount {
            block = SHA256.hash(block)
        }
        block.append(contentsOf: repeatElement(0, count: SHA256.blockByteCount - block.count))
        inner.update(block.map { $0 ^ 0x36 })
        outer.update(block.map { $0 ^ 0x5c })
    }

    /// Adds bytes to the message.
    ///
    /// - Parameter bytes: The next bytes of the message.
    public mutating func update<Bytes: Sequence>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        inner.update(bytes)
    }

    /// Adds the bytes of a raw buffer to the message.
    ///
    /// - Parameter buffer: The next bytes of the message; it is not retained.
    public mutating func update(_ buffer: UnsafeRawBufferPointer) {
        inner.update(buffer)
    }

    /// Completes the message and returns its authentication code.
    ///
    /// - Returns: The 32-byte code.
    public consuming func finalize() -> [UInt8] {
        let innerDigest = inner.finalize()
        var outer = self.outer
        outer.update(innerDigest)
        return outer.finalize()
    }

    /// The authentication code of a whole message.
    ///
    /// - Parameters:
    ///   - bytes: The message.
    ///   - key: The secret key.
    /// - Returns: The 32-byte code.
    public static func authenticationCode<Bytes: Sequence, Key: Sequence>(
        for bytes: Bytes,
        key: Key
    ) -> [UInt8] where Bytes.Element == UInt8, Key.Element == UInt8 {
        var authenticator = HMACSHA256(key: key)
        authenticator.update(bytes)
        return authenticator.finalize()
    }

    /// Whether `code` is the authentication code of a message, compared in constant time.
    ///
    /// Only a full 32-byte code is accepted: a truncated code is always invalid here.
    ///
    /// - Parameters:
    ///   - code: The code that came with the message.
    ///   - bytes: The message.
    ///   - key: The secret key.
    /// - Returns: `true` when `code` equals the message's code.
    public static func isValid<Code: Sequence, Bytes: Sequence, Key: Sequence>(
        _ code: Code,
        for bytes: Bytes,
        key: Key
    ) -> Bool where Code.Element == UInt8, Bytes.Element == UInt8, Key.Element == UInt8 {
        constantTimeEquals(Array(code), authenticationCode(for: bytes, key: key))
    }

    /// Whether two byte arrays are equal, in time that does not depend on where they differ.
    ///
    /// Every byte is compared even after a difference is found, so the time taken reveals only
    /// the lengths, which are not secret; arrays of different lengths are unequal.
    ///
    /// - Parameters:
    ///   - a: A byte array, such as a received code.
    ///   - b: Another byte array, such as the expected code.
    /// - Returns: `true` when the arrays have the same length and the same bytes.
    public static func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices {
            difference |= a[index] ^ b[index]
        }
        return difference == 0
    }
}
