// libFuzzer target: NATSParser fed what a hostile NATS server might send, in chunks of varying
// sizes, and the JetStream reply subjects and server versions in it read.
//
// Input layout:
//   byte 0  configuration: bits 0-1 the parser's maxPayload (see `limits`), bits 2-3 the largest
//           chunk (1, 3, 16 or 4096 bytes), bits 4-5 how often the stream is repeated (1, 2, 7
//           or 64 times, so a short input still reaches the 64 KiB control-line bound)
//   byte 1  seed of the chunk sizes (a small PRNG; a chunk may be empty)
//   rest    the stream
//
// A reference parser is given the whole stream at once. The chunked parser must then:
//   * return exactly the reference's operations, in order, whatever the chunking;
//   * fail where the reference fails, with the same error, or both not at all;
//   * never return a payload larger than its maxPayload;
//   * and nothing traps: reading every reply subject as a JetStream acknowledgement subject
//     (`$JS.ACK.…`, both forms) and every INFO's `version` as a server version.

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

private let limits = [64 << 20, 0, 16, 4096]
private let chunkCaps = [1, 3, 16, 4096]
private let repeatCounts = [1, 2, 7, 64]
/// Keeps one execution cheap: a repeated stream is cut at this many bytes.
private let maxStreamBytes = 1 << 18

/// Every operation the parser returns from `stream`, and the error it stopped at, if any.
private func parseAll(_ chunks: [ArraySlice<UInt8>], maxPayload: Int) -> (ops: [NATSServerOp], error: NATSProtocolError?) {
    var parser = NATSParser(maxPayload: maxPayload)
    var ops: [NATSServerOp] = []
    for chunk in chunks {
        parser.append(chunk)
        while true {
            do throws(NATSProtocolError) {
                guard let op = try parser.next() else { break }
                ops.append(op)
            } catch {
                return (ops, error)
            }
        }
    }
    return (ops, nil)
}

/// Reads what a hub reads from an operation; nothing may trap.
private func exercise(_ op: NATSServerOp, maxPayload: Int) {
    switch op {
    case .message(let message):
        if message.payload.count > maxPayload {
            fuzzFail("a payload of \(message.payload.count) bytes passed a maxPayload of \(maxPayload)")
        }
        if let reply = message.reply, let ack = JetStreamAckSubject(reply) {
            _ = ack.stream
            _ = ack.streamSequence.addingReportingOverflow(ack.pending)
        }
        _ = message.headers?.status
        _ = message.headers?["Nats-Consumer-Stalled"]
    case .info(let json):
        if let version = json["version"]?.stringValue { _ = NATSServerVersion(version) }
    default:
        break
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size >= 2 else { return 0 }
    let config = data[0]
    let maxPayload = limits[Int(config & 3)]
    let chunkCap = chunkCaps[Int((config >> 2) & 3)]
    let repeats = repeatCounts[Int((config >> 4) & 3)]
    let body = Array(UnsafeBufferPointer(start: data + 2, count: size - 2))
    var stream: [UInt8] = []
    for _ in 0..<repeats where stream.count < maxStreamBytes { stream.append(contentsOf: body) }
    if stream.count > maxStreamBytes { stream.removeLast(stream.count - maxStreamBytes) }

    let reference = parseAll([stream[...]], maxPayload: maxPayload)
    var random = SplitMix(state: UInt64(data[1]))
    var chunks: [ArraySlice<UInt8>] = []
    var position = 0
    while position < stream.count {
        let length = Int(random.next() % UInt64(chunkCap + 1))
        let end = min(stream.count, position + length)
        chunks.append(stream[position..<end])
        position = end
    }
    let chunked = parseAll(chunks, maxPayload: maxPayload)
    if chunked.ops != reference.ops || chunked.error != reference.error {
        fuzzFail("chunking changed the result: \(chunked.ops.count) ops (error \(String(describing: chunked.error))) against \(reference.ops.count) (error \(String(describing: reference.error))) [maxPayload \(maxPayload), chunk cap \(chunkCap), repeats \(repeats)]",
                 [("stream", stream)])
    }
    for op in reference.ops { exercise(op, maxPayload: maxPayload) }
    return 0
}
