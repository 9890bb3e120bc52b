import SyncProtocol
import Testing

/// The hub writes a full welcome around the state's bytes (never copied into a JSON value);
/// read back, it must be the `welcome` the general form describes.
@Suite("welcome frames: the hub's bytes read back as the general form")
struct WelcomeFrameTests {
    @Test("prefix + state + suffix is one frame whose payload decodes to the same Welcome", arguments: [
        JSON.object([:]), ["count": 3, "isIncrementing": true, "limitText": ""], ["log": [1, 2, "é\u{1F600}\"\\"]], .array([]),
    ])
    func readsBack(state: JSON) throws {
        let stateBytes = state.canonicalBytes
        let (prefix, suffix) = try Welcome.frame(hub: "h\"1", history: "c543353f09e29d6d", replica: 4097, seq: 13, digest: "4fdc5d26efc8be13",
                                                 maxFrameBytes: 1_048_576, stateByteCount: stateBytes.count)
        let frame = prefix + stateBytes + suffix
        var decoder = FrameDecoder(maxPayloadBytes: 1 << 20)
        decoder.append(frame)
        let payload = try #require(try decoder.nextFrame())
        #expect(try decoder.nextFrame() == nil, "exactly one frame")
        let expected = Welcome(hub: "h\"1", replica: 4097, seq: 13, state: state, digest: "4fdc5d26efc8be13", maxFrameBytes: 1_048_576,
                               history: "c543353f09e29d6d")
        #expect(try HubMessage(json: JSON(parsing: payload)) == .welcome(expected))
        #expect(Array(payload.prefix(30)) == Array(#"{"type":"welcome","protocol":1"#.utf8))
    }

    @Test("a state too large for a frame is refused before anything is written")
    func tooLarge() {
        #expect(throws: FrameError.self) {
            _ = try Welcome.frame(hub: "h", history: "x", replica: 1, seq: 0, digest: "d", maxFrameBytes: 1, stateByteCount: Frame.maxPayloadBytes)
        }
        #expect(throws: FrameError.self) {
            _ = try Welcome.frame(hub: "h", history: "x", replica: 1, seq: 0, digest: "d", maxFrameBytes: 1, stateByteCount: Int.max)
        }
    }
}
