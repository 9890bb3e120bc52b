// libFuzzer target: FrameDecoder fed a byte stream in chunks of varying sizes.
//
// Input layout:
//   byte 0  configuration: bits 0-2 the decoder's maxPayloadBytes (see `limits`), bits 3-4 the
//           largest chunk (1, 3, 16 or 4096 bytes), bits 5-6 how often the stream is repeated
//           (1, 2, 7 or 64 times, so short inputs still reach the decoder's 4096-byte
//           compaction), bit 7 set: only `nextFrame()` is used; clear: the reading API
//           (`nextFrame`, `withNextFrame`, a throwing `withNextFrame` body, `decodeNext`) and the
//           `append` overload are picked per call
//   byte 1  seed of the chunk sizes (a small PRNG; a chunk may be empty)
//   rest    the stream: 4-byte big-endian lengths and payloads
//
// A reference decoder splits the whole stream at once. After every append, frames are read
// until the decoder answers "need more" or throws, and:
//   * the payloads are exactly the reference's, in order, whatever the chunking and API;
//   * "need more" only when the next frame (or a bad header) really is incomplete;
//   * a bad header throws the reference's error as soon as its 4 bytes have arrived, and keeps
//     throwing it (the header is not consumed);
//   * `bufferedByteCount` always equals the bytes fed minus the bytes returned as frames;
//   * nothing traps.

private struct SplitMix {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

private let limits = [Frame.defaultMaxPayloadBytes, Int(UInt32.max), 0, 1, 2, 16, 100, 4096]
private let chunkCaps = [1, 3, 16, 4096]
private let repeatCounts = [1, 2, 7, 64]
/// Keeps one execution cheap: a repeated stream is cut at this many bytes.
private let maxStreamBytes = 1 << 16

private struct Reference {
    var frames: [Range<Int>] = []
    /// The bad header's error and the stream offset of that header.
    var error: (FrameError, at: Int)?

    init(_ stream: [UInt8], limit: Int) {
        var position = 0
        while stream.count - position >= 4 {
            let length = Int(stream[position]) << 24 | Int(stream[position + 1]) << 16
                | Int(stream[position + 2]) << 8 | Int(stream[position + 3])
            if length == 0 {
                error = (.emptyFrame, position)
                return
            }
            if length > limit {
                error = (.tooLarge(length: length, limit: limit), position)
                return
            }
            guard stream.count - position - 4 >= length else { return }
            frames.append((position + 4)..<(position + 4 + length))
            position += 4 + length
        }
    }
}

private struct BodyError: Error {}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 2 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let config = data[0]
    let limit = limits[Int(config & 7)]
    let chunkCap = chunkCaps[Int((config >> 3) & 3)]
    let repeats = repeatCounts[Int((config >> 5) & 3)]
    let onlyNextFrame = config & 0x80 != 0
    var rng = SplitMix(state: UInt64(data[1]) &* 0x1000_0000_01B3 &+ UInt64(config))

    var stream: [UInt8] = []
    let body = input[2...]
    for _ in 0..<repeats where stream.count < maxStreamBytes {
        stream.append(contentsOf: body)
    }
    if stream.count > maxStreamBytes { stream.removeSubrange(maxStreamBytes...) }

    let reference = Reference(stream, limit: limit)
    var decoder = FrameDecoder(maxPayloadBytes: limit)
    var fed = 0
    var consumed = 0
    var frameIndex = 0

    func fail(_ what: String) -> Never {
        fuzzFail("\(what) [limit \(limit), chunk cap \(chunkCap), repeats \(repeats), stream \(stream.count) bytes, "
                 + "fed \(fed), consumed \(consumed), frame #\(frameIndex) of \(reference.frames.count)]",
                 [("input", input)])
    }

    /// Reads one frame with the API picked by `mode`; the payload, nil for "need more", or the error.
    func pull(_ mode: UInt64) -> Result<[UInt8]?, FrameError> {
        do {
            switch mode {
            case 0:
                return .success(try decoder.nextFrame())
            case 1:
                return .success(try decoder.withNextFrame { Array($0) })
            case 2:
                // The frame is consumed even when the body throws.
                var copy: [UInt8]?
                do {
                    let result: Void? = try decoder.withNextFrame { payload in
                        copy = Array(payload)
                        throw BodyError()
                    }
                    guard result == nil else { fail("withNextFrame returned although its body threw") }
                    return .success(nil)
                } catch is BodyError {
                    guard let copy else { fail("withNextFrame threw the body's error without a frame") }
                    return .success(copy)
                }
            default:
                return .success(try decoder.decodeNext { Array($0) })
            }
        } catch let error as FrameError {
            return .failure(error)
        } catch {
            fail("unexpected error type \(error)")
        }
    }

    while true {
        // Read until the decoder needs more bytes.
        while true {
            guard decoder.bufferedByteCount == fed - consumed else {
                fail("bufferedByteCount \(decoder.bufferedByteCount), expected \(fed - consumed)")
            }
            let mode = onlyNextFrame ? 0 : rng.next() % 4
            switch pull(mode) {
            case .failure(let error):
                guard frameIndex == reference.frames.count, let expected = reference.error else {
                    fail("unexpected \(error) (mode \(mode))")
                }
                guard expected.at == consumed, fed - consumed >= 4, error == expected.0 else {
                    fail("threw \(error), expected \(expected.0) for the header at \(expected.at) (mode \(mode))")
                }
                // The bad header stays: every later call throws the same error and keeps the bytes.
                for again in 0..<4 as Range<UInt64> {
                    guard case .failure(let repeated) = pull(again), repeated == error else {
                        fail("a second read after \(error) did not throw it again (mode \(again))")
                    }
                }
                guard decoder.bufferedByteCount == fed - consumed else {
                    fail("a bad header changed bufferedByteCount to \(decoder.bufferedByteCount)")
                }
                return 0
            case .success(nil):
                if frameIndex < reference.frames.count {
                    guard fed < reference.frames[frameIndex].upperBound else {
                        fail("need-more although frame \(reference.frames[frameIndex]) is complete (mode \(mode))")
                    }
                } else if let expected = reference.error {
                    guard fed < expected.at + 4 else {
                        fail("need-more although the bad header at \(expected.at) is complete (mode \(mode))")
                    }
                }
            case .success(let payload?):
                guard frameIndex < reference.frames.count else {
                    fail("a frame of \(payload.count) bytes that the reference does not have (mode \(mode))")
                }
                let range = reference.frames[frameIndex]
                guard payload.elementsEqual(stream[range]) else {
                    fail("frame payload differs from the stream's bytes \(range) (mode \(mode))")
                }
                consumed = range.upperBound
                frameIndex += 1
                continue
            }
            break
        }
        if fed == stream.count { break }

        // Feed the next chunk.
        let count = min(Int(rng.next() % UInt64(chunkCap + 1)), stream.count - fed)
        if onlyNextFrame || rng.next() & 1 == 0 {
            decoder.append(Array(stream[fed..<(fed + count)]))
        } else {
            stream.withUnsafeBytes { raw in
                decoder.append(UnsafeRawBufferPointer(rebasing: raw[fed..<(fed + count)]))
            }
        }
        fed += count
    }

    guard frameIndex == reference.frames.count else {
        fail("stream ended with \(reference.frames.count - frameIndex) reference frames unread")
    }
    guard decoder.bufferedByteCount == stream.count - consumed else {
        fail("bufferedByteCount \(decoder.bufferedByteCount) at the end, expected \(stream.count - consumed)")
    }
    return 0
}
