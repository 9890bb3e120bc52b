import Testing
@testable import SyncProtocol

private func frames(_ payloads: [[UInt8]]) throws -> [UInt8] {
    var stream: [UInt8] = []
    for payload in payloads { try Frame.append(payload: payload, to: &stream) }
    return stream
}

private func drain(_ decoder: inout FrameDecoder) throws -> [[UInt8]] {
    var out: [[UInt8]] = []
    while let payload = try decoder.nextFrame() { out.append(payload) }
    return out
}

@Suite struct FrameTests {
    @Test func headerIsBigEndian() throws {
        var buffer: [UInt8] = []
        try Frame.append(payload: [UInt8](repeating: 7, count: 300), to: &buffer)
        #expect(Array(buffer.prefix(4)) == [0x00, 0x00, 0x01, 0x2C])
        #expect(buffer.count == 304)
        var header: [UInt8] = []
        try Frame.appendHeader(length: 0x0102_0304, to: &header)
        #expect(header == [1, 2, 3, 4])
        var raw: [UInt8] = []
        try [UInt8]([9, 8]).withUnsafeBytes { try Frame.append(payload: $0, to: &raw) }
        #expect(raw == [0, 0, 0, 2, 9, 8])
    }

    @Test func encodeUsesCanonicalBytes() throws {
        let json: JSON = ["count": 0, "a": [true]]
        let canonical = Array(#"{"a":[true],"count":0}"#.utf8)
        let encoded = try Frame.encode(json)
        #expect(encoded == [0, 0, 0, UInt8(canonical.count)] + canonical)
    }

    @Test func splitAtEveryByteBoundary() throws {
        let payloads: [[UInt8]] = [[1], Array("hello".utf8), [UInt8](repeating: 0xAB, count: 300), [0, 0, 0, 0]]
        let stream = try frames(payloads)
        for split in 0...stream.count {
            var decoder = FrameDecoder()
            decoder.append(Array(stream[..<split]))
            var got = try drain(&decoder)
            decoder.append(Array(stream[split...]))
            got += try drain(&decoder)
            #expect(got == payloads, "split at \(split)")
            #expect(decoder.bufferedByteCount == 0)
        }
    }

    @Test func oneByteAtATime() throws {
        let payloads: [[UInt8]] = (1...40).map { [UInt8](repeating: UInt8($0), count: $0 * 7) }
        let stream = try frames(payloads)
        var decoder = FrameDecoder()
        var got: [[UInt8]] = []
        for byte in stream {
            [byte].withUnsafeBytes { decoder.append($0) }
            got += try drain(&decoder)
        }
        #expect(got == payloads)
        #expect(decoder.bufferedByteCount == 0)
    }

    @Test func manyFramesInOneAppend() throws {
        let payloads: [[UInt8]] = (0..<20_000).map { [UInt8(truncatingIfNeeded: $0), 1, 2] }
        let stream = try frames(payloads)
        var decoder = FrameDecoder()
        decoder.append(stream)
        #expect(decoder.bufferedByteCount == stream.count)
        let got = try drain(&decoder)
        #expect(got == payloads)
        #expect(decoder.bufferedByteCount == 0)
    }

    @Test func interleavedPartialReadsCompact() throws {
        // Chunks that never align with frames keep a partial frame buffered across compactions.
        let payloads: [[UInt8]] = (0..<5_000).map { [UInt8](repeating: UInt8(truncatingIfNeeded: $0), count: 1 + $0 % 37) }
        let stream = try frames(payloads)
        var decoder = FrameDecoder()
        var got: [[UInt8]] = []
        var position = 0
        while position < stream.count {
            let end = min(stream.count, position + 997)
            decoder.append(Array(stream[position..<end]))
            got += try drain(&decoder)
            #expect(decoder.bufferedByteCount < 4 + 37)
            position = end
        }
        #expect(got == payloads)
    }

    @Test func zeroLengthIsRejected() {
        var decoder = FrameDecoder()
        decoder.append([0, 0, 0])
        #expect(throws: Never.self) { try decoder.nextFrame() }
        decoder.append([0, 9])
        #expect(throws: FrameError.emptyFrame) { try decoder.nextFrame() }
        #expect(throws: FrameError.emptyFrame) { try decoder.nextFrame() }
    }

    @Test func oversizedLengthIsRejectedFromHeaderAlone() throws {
        var decoder = FrameDecoder(maxPayloadBytes: 100)
        decoder.append([0, 0, 0])
        #expect(try decoder.nextFrame() == nil)
        decoder.append([101])
        #expect(throws: FrameError.tooLarge(length: 101, limit: 100)) { try decoder.nextFrame() }
        var huge = FrameDecoder()
        huge.append([0xFF, 0xFF, 0xFF, 0xFF])
        #expect(throws: FrameError.tooLarge(length: 0xFFFF_FFFF, limit: Frame.defaultMaxPayloadBytes)) {
            try huge.nextFrame()
        }
        #expect(throws: FrameError.self) { try huge.withNextFrame { $0.count } }
    }

    @Test func exactMaximumIsAccepted() throws {
        let payload = [UInt8](repeating: 3, count: 100)
        var decoder = FrameDecoder(maxPayloadBytes: 100)
        decoder.append(try frames([payload]))
        #expect(try decoder.nextFrame() == payload)
        var defaultLimit = FrameDecoder()
        let big = [UInt8](repeating: 1, count: Frame.defaultMaxPayloadBytes)
        defaultLimit.append(try frames([big]))
        #expect(try defaultLimit.nextFrame() == big)
    }

    @Test func zeroCopyVariant() throws {
        let payloads: [[UInt8]] = [[1, 2, 3], [4], [5, 6]]
        var decoder = FrameDecoder()
        decoder.append(try frames(payloads))
        decoder.append([0, 0])
        var got: [[UInt8]] = []
        while let payload = try decoder.withNextFrame({ Array($0) }) { got.append(payload) }
        #expect(got == payloads)
        #expect(decoder.bufferedByteCount == 2)

        struct Boom: Error {}
        var throwing = FrameDecoder()
        throwing.append(try frames([[1], [2]]))
        #expect(throws: Boom.self) { try throwing.withNextFrame { _ in throw Boom() } }
        #expect(try throwing.nextFrame() == [2])  // the frame was consumed even though body threw
    }

    @Test func jsonRoundTripThroughFrames() throws {
        let values: [JSON] = [["type": "hello", "id": 1], [1, 2, 3], "é😀", nil]
        var stream: [UInt8] = []
        for value in values { stream += try Frame.encode(value) }
        var decoder = FrameDecoder()
        decoder.append(stream)
        var decoded: [JSON] = []
        while let json = try decoder.withNextFrame({ raw in try JSON(parsing: raw) }) { decoded.append(json) }
        #expect(decoded == values)
    }

    @Test func errorDescriptions() {
        #expect(FrameError.emptyFrame.description == "invalid frame: zero-length payload")
        #expect(FrameError.tooLarge(length: 5, limit: 4).description
            == "invalid frame: payload of 5 bytes exceeds the limit of 4 bytes")
    }
}
