import Testing
@testable import SyncProtocol

@Suite struct SHA256Tests {
    /// The hex digest of an ASCII message.
    func hexDigest(_ message: String) -> String {
        SHA256.hex(SHA256.hash(message.utf8))
    }

    @Test func nistExamples() {
        #expect(hexDigest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(hexDigest("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(
            hexDigest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")
                == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        #expect(
            hexDigest(
                "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"
            ) == "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1")
    }

    @Test func oneMillionA() {
        let expected = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"
        #expect(SHA256.hex(SHA256.hash([UInt8](repeating: 0x61, count: 1_000_000))) == expected)
        // Fed in pieces that straddle block boundaries, and through the non-contiguous path.
        var hasher = SHA256()
        let piece = [UInt8](repeating: 0x61, count: 1000)
        for _ in 0..<1000 { hasher.update(piece) }
        #expect(SHA256.hex(hasher.finalize()) == expected)
        #expect(SHA256.hex(SHA256.hash(repeatElement(UInt8(0x61), count: 1_000_000))) == expected)
    }

    @Test(arguments: [
        (55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"),
        (56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"),
        (63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"),
        (64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"),
        (65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"),
        (119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"),
        (120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"),
        (128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e"),
    ])
    func paddingBoundaries(length: Int, expected: String) {
        // Expected values from Python's hashlib.sha256(b"a" * length).
        #expect(SHA256.hex(SHA256.hash([UInt8](repeating: 0x61, count: length))) == expected)
    }

    @Test func incrementalUpdatesAtEveryOffset() {
        let message = (0..<200).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
        let expected = "2c7e18c942ef065b526a2d4e5546283749cd3ddfb51d8fc71f42717363685f46"
        #expect(SHA256.hex(SHA256.hash(message)) == expected)
        for split in 0...message.count {
            var hasher = SHA256()
            hasher.update(message[..<split])
            hasher.update(message[split...])
            #expect(SHA256.hex(hasher.finalize()) == expected, "split at \(split)")
        }
        // Byte by byte, and as three pieces through the raw-buffer entry point.
        var bytewise = SHA256()
        for byte in message { bytewise.update(CollectionOfOne(byte)) }
        #expect(SHA256.hex(bytewise.finalize()) == expected)
        var raw = SHA256()
        message.withUnsafeBytes { buffer in
            raw.update(UnsafeRawBufferPointer(rebasing: buffer[0..<1]))
            raw.update(UnsafeRawBufferPointer(rebasing: buffer[1..<130]))
            raw.update(UnsafeRawBufferPointer(rebasing: buffer[130...]))
        }
        #expect(SHA256.hex(raw.finalize()) == expected)
    }

    @Test func contiguousAndNonContiguousAgree() {
        let bytes = (0..<300).map { UInt8(truncatingIfNeeded: $0) }
        #expect(SHA256.hash(bytes) == SHA256.hash(bytes.lazy.map { $0 }))
        #expect(SHA256.hash(bytes[5...]) == SHA256.hash(Array(bytes[5...])))
        #expect(SHA256.hash(bytes).count == SHA256.digestByteCount)
    }

    @Test func hexFormatting() {
        #expect(SHA256.hex([]) == "")
        #expect(SHA256.hex([0x00, 0xff, 0x0a, 0xa0]) == "00ff0aa0")
    }
}

@Suite struct HMACSHA256Tests {
    @Test(arguments: [
        // RFC 4231, 4.2 to 4.8, except 4.6 (case 5, truncated), checked in its own test.
        ([UInt8](repeating: 0x0b, count: 20), Array("Hi There".utf8),
         "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
        (Array("Jefe".utf8), Array("what do ya want for nothing?".utf8),
         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        ([UInt8](repeating: 0xaa, count: 20), [UInt8](repeating: 0xdd, count: 50),
         "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"),
        ((1...25).map { UInt8($0) }, [UInt8](repeating: 0xcd, count: 50),
         "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"),
        ([UInt8](repeating: 0xaa, count: 131), Array("Test Using Larger Than Block-Size Key - Hash Key First".utf8),
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
        ([UInt8](repeating: 0xaa, count: 131), Array(
            ("This is a test using a larger than block-size key and a larger than block-size data. "
                + "The key needs to be hashed before being used by the HMAC algorithm.").utf8),
         "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"),
    ])
    func rfc4231(key: [UInt8], data: [UInt8], expected: String) {
        let code = HMACSHA256.authenticationCode(for: data, key: key)
        #expect(SHA256.hex(code) == expected)
        #expect(HMACSHA256.isValid(code, for: data, key: key))
        // The same code when the message arrives in pieces.
        var authenticator = HMACSHA256(key: key)
        let middle = data.count / 2
        authenticator.update(data[..<middle])
        authenticator.update(data[middle...])
        #expect(authenticator.finalize() == code)
    }

    @Test func rfc4231TruncatedOutput() {
        // Test case 5: only the leftmost 128 bits are specified.
        let code = HMACSHA256.authenticationCode(
            for: "Test With Truncation".utf8, key: [UInt8](repeating: 0x0c, count: 20))
        #expect(SHA256.hex(Array(code.prefix(16))) == "a3b6167473100ee06e0c796c2955552b")
        // A truncated code is not accepted by isValid.
        #expect(!HMACSHA256.isValid(code.prefix(16), for: "Test With Truncation".utf8,
                                    key: [UInt8](repeating: 0x0c, count: 20)))
    }

    @Test func keyOfExactlyOneBlockIsNotHashed() {
        let key = [UInt8](repeating: 0x42, count: 64)
        let hashedKey = SHA256.hash(key)
        #expect(HMACSHA256.authenticationCode(for: "m".utf8, key: key)
            != HMACSHA256.authenticationCode(for: "m".utf8, key: hashedKey))
        // One byte more, and the key is replaced by its digest.
        let longKey = [UInt8](repeating: 0x42, count: 65)
        #expect(HMACSHA256.authenticationCode(for: "m".utf8, key: longKey)
            == HMACSHA256.authenticationCode(for: "m".utf8, key: SHA256.hash(longKey)))
    }

    @Test func isValidRejectsAlteredCodes() {
        let key = Array("key".utf8)
        var code = HMACSHA256.authenticationCode(for: "message".utf8, key: key)
        #expect(HMACSHA256.isValid(code, for: "message".utf8, key: key))
        #expect(!HMACSHA256.isValid(code, for: "messagf".utf8, key: key))
        code[31] ^= 1
        #expect(!HMACSHA256.isValid(code, for: "message".utf8, key: key))
    }

    @Test func constantTimeEquals() {
        #expect(HMACSHA256.constantTimeEquals([], []))
        #expect(HMACSHA256.constantTimeEquals([1, 2, 3], [1, 2, 3]))
        #expect(!HMACSHA256.constantTimeEquals([1, 2, 3], [0, 2, 3]))
        #expect(!HMACSHA256.constantTimeEquals([1, 2, 3], [1, 2, 4]))
        #expect(!HMACSHA256.constantTimeEquals([1, 2, 3], [1, 2]))
        #expect(!HMACSHA256.constantTimeEquals([1, 2], [1, 2, 3]))
        #expect(!HMACSHA256.constantTimeEquals([], [0]))
        #expect(!HMACSHA256.constantTimeEquals([0x80], [0x00]))
    }
}
