// libFuzzer target: the message decoders `ClientMessage(json:)` and `HubMessage(json:)`, and
// the replica's fast path `HubMessage.fastAction` (it must agree with `HubMessage(json:)`), and
// the hub's `ClientMessage.canonicalDispatch` (it must agree with `ClientMessage(json:)`, and the
// action's bytes it keeps must be the action's canonical form).
//
// Input: a frame payload (arbitrary bytes). It is parsed as JSON, then decoded both as a client
// and as a hub message; a refusal must be a thrown `WireError` (never a trap). What decodes is
// re-encoded and must come back as the same message:
//   * `message.json`'s canonical bytes parse and decode to a message with the same canonical
//     bytes (the canonical bytes of `message.json` determine the message);
//   * `Frame.encode(message)` is the 4-byte length header and exactly those canonical bytes, and
//     a FrameDecoder gives that payload back;
//   * for a hub `action`, the hot-path envelope `Frame.appendActionEnvelope` (members in its own
//     order, not canonical) decodes to the same message.
// Messages are compared by canonical bytes, never by `==` on `JSON`.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    // The replica's fast path must agree with the general decoder whenever it answers.
    if let fast = input.withUnsafeBytes({ HubMessage.fastAction($0) }) {
        guard let general = try? HubMessage(json: try JSON(parsing: input)),
              general.json.canonicalBytes == fast.json.canonicalBytes else {
            fuzzFail("HubMessage.fastAction accepted what the general decoder reads otherwise (or refuses)", [("input", input)])
        }
    }
    // The hub's canonical-dispatch fast path must agree with the general decoder, bytes kept.
    if let (id, range) = input.withUnsafeBytes({ ClientMessage.canonicalDispatch($0) }) {
        guard case .dispatch(let generalID, let action)? = try? ClientMessage(json: try JSON(parsing: input)),
              generalID == id, action.canonicalBytes == Array(input[range]) else {
            fuzzFail("ClientMessage.canonicalDispatch accepted what the general decoder reads otherwise (or refuses)", [("input", input)])
        }
    }
    guard let json = try? JSON(parsing: input) else { return 0 }
    if let message = try? ClientMessage(json: json) {
        checkClient(message, input: input)
    }
    if let message = try? HubMessage(json: json) {
        checkHub(message, input: input)
    }
    return 0
}

private func checkClient(_ message: ClientMessage, input: [UInt8]) {
    let wire = message.json.canonicalBytes
    checkFrame(encodeFrame { () throws(FrameError) in try Frame.encode(message) }, payload: wire, input: input)
    let back: ClientMessage
    do {
        back = try ClientMessage(json: try JSON(parsing: wire))
    } catch {
        fuzzFail("a re-encoded client message does not decode: \(error)", [("input", input), ("re-encoded", wire)])
    }
    let backWire = back.json.canonicalBytes
    guard backWire == wire else {
        fuzzFail("a client message changes on a round trip",
                 [("input", input), ("re-encoded", wire), ("decoded again", backWire)])
    }
}

private func checkHub(_ message: HubMessage, input: [UInt8]) {
    let wire = message.json.canonicalBytes
    checkFrame(encodeFrame { () throws(FrameError) in try Frame.encode(message) }, payload: wire, input: input)
    let back: HubMessage
    do {
        back = try HubMessage(json: try JSON(parsing: wire))
    } catch {
        fuzzFail("a re-encoded hub message does not decode: \(error)", [("input", input), ("re-encoded", wire)])
    }
    let backWire = back.json.canonicalBytes
    guard backWire == wire else {
        fuzzFail("a hub message changes on a round trip",
                 [("input", input), ("re-encoded", wire), ("decoded again", backWire)])
    }

    if case .action(let seq, let origin, let id, let action) = message {
        let envelope = encodeFrame { () throws(FrameError) in
            var buffer: [UInt8] = []
            _ = try Frame.appendActionEnvelope(seq: seq, origin: origin, id: id, action: action, to: &buffer)
            return buffer
        }
        var decoder = FrameDecoder(maxPayloadBytes: Int(UInt32.max))
        decoder.append(envelope)
        let payload: [UInt8]
        do {
            guard let frame = try decoder.nextFrame(), decoder.bufferedByteCount == 0 else {
                fuzzFail("the action envelope is not exactly one frame", [("input", input), ("envelope", envelope)])
            }
            payload = frame
        } catch {
            fuzzFail("the action envelope's header is refused: \(error)", [("input", input), ("envelope", envelope)])
        }
        let fromEnvelope: HubMessage
        do {
            fromEnvelope = try HubMessage(json: try JSON(parsing: payload))
        } catch {
            fuzzFail("the action envelope does not decode: \(error)", [("input", input), ("envelope", envelope)])
        }
        let envelopeWire = fromEnvelope.json.canonicalBytes
        guard envelopeWire == wire else {
            fuzzFail("the action envelope decodes to a different message",
                     [("input", input), ("envelope", envelope), ("canonical", wire), ("from envelope", envelopeWire)])
        }
    }
}

/// Runs an encoder. Frame's encoders gained `throws(FrameError)` (for payloads over 4 GiB); the
/// `try` inside the closures is only a warning where they do not throw, so this file compiles
/// against either. No payload here comes near the limit, so a throw is a failure.
private func encodeFrame(_ encode: () throws(FrameError) -> [UInt8]) -> [UInt8] {
    do {
        return try encode()
    } catch {
        fuzzFail("a frame encoder refused a small payload: \(error)")
    }
}

/// `frame` must be a header announcing `payload.count` bytes followed by `payload`, and a
/// FrameDecoder must give `payload` back.
private func checkFrame(_ frame: [UInt8], payload: [UInt8], input: [UInt8]) {
    let header = encodeFrame { () throws(FrameError) in
        var buffer: [UInt8] = []
        try Frame.appendHeader(length: payload.count, to: &buffer)
        return buffer
    }
    guard frame.count == payload.count + Frame.headerSize,
          frame.prefix(Frame.headerSize).elementsEqual(header),
          frame.dropFirst(Frame.headerSize).elementsEqual(payload) else {
        fuzzFail("Frame.encode is not header + canonical bytes", [("input", input), ("frame", frame), ("payload", payload)])
    }
    var decoder = FrameDecoder(maxPayloadBytes: Int(UInt32.max))
    decoder.append(frame)
    do {
        guard let decoded = try decoder.nextFrame(), decoded == payload, decoder.bufferedByteCount == 0 else {
            fuzzFail("FrameDecoder does not return the encoded payload", [("input", input), ("frame", frame)])
        }
    } catch {
        fuzzFail("FrameDecoder refuses an encoded frame: \(error)", [("input", input), ("frame", frame)])
    }
}
