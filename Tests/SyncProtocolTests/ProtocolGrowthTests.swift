import Testing
@testable import SyncProtocol

@Suite("Protocol growth, the sync barrier and frame limits")
struct ProtocolGrowthTests {
    @Test("a hub message type this library does not know decodes as .unknown, never as an error")
    func unknownHubType() throws {
        let json = try JSON(parsing: #"{"type":"compacted","seq":10,"digest":"0123456789abcdef","extra":[1]}"#)
        #expect(try HubMessage(json: json) == .unknown(type: "compacted"))
    }

    @Test("checkpoint and duplicate decode, ignoring members they do not use, and round-trip")
    func checkpointAndDuplicate() throws {
        let checkpoint = try JSON(parsing: #"{"type":"checkpoint","seq":10,"digest":"0123456789abcdef","extra":[1]}"#)
        #expect(try HubMessage(json: checkpoint) == .checkpoint(seq: 10, digest: "0123456789abcdef"))
        let duplicate = try JSON(parsing: #"{"type":"duplicate","id":1.0,"seq":3}"#)
        #expect(try HubMessage(json: duplicate) == .duplicate(id: .number(1), seq: 3))
        for message in [HubMessage.checkpoint(seq: 2, digest: "00"), .duplicate(id: .string("é"), seq: 9)] {
            #expect(try HubMessage(json: message.json) == message)
        }
        #expect(throws: WireError.self) { try HubMessage(json: try JSON(parsing: #"{"type":"duplicate","seq":3}"#)) }
        let hello = try JSON(parsing: #"{"type":"hello","protocol":1,"app":"json","session":"s","resume":{"history":"h","seq":4}}"#)
        #expect(try ClientMessage(json: hello) == .hello(protocolVersion: 1, app: "json", fingerprint: nil, name: nil,
                                                        resume: ResumePoint(history: "h", seq: 4), session: "s"))
    }

    @Test("dispatch ids compare as JSON values: strings by scalars, 1 and 1.0 alike, 1 and \"1\" apart")
    func dispatchIDEquality() throws {
        #expect(DispatchID.string("\u{E9}") != DispatchID.string("e\u{301}"))
        #expect(Set([DispatchID.string("\u{E9}"), .string("e\u{301}"), .number(1), .string("1")]).count == 4)
        #expect(DispatchID(json: try JSON(parsing: "1.0")) == .number(1))
    }

    @Test("members a message does not use are ignored, in both directions")
    func unknownMembers() throws {
        let action = try JSON(parsing: #"{"type":"action","seq":3,"origin":1,"id":7,"action":{"type":"x"},"future":{"a":1}}"#)
        #expect(try HubMessage(json: action) == .action(seq: 3, origin: 1, id: .number(7), action: ["type": "x"]))
        let welcome = try JSON(parsing: #"{"type":"welcome","protocol":1,"hub":"h","replica":2,"seq":0,"digest":"d","state":{},"resumed":false,"checkpoint_every":100}"#)
        #expect(try HubMessage(json: welcome) == .welcome(Welcome(hub: "h", replica: 2, seq: 0, state: [:], digest: "d")))
        let hello = try JSON(parsing: #"{"type":"hello","protocol":1,"app":"json","compression":{"zstd":1}}"#)
        #expect(try ClientMessage(json: hello) == .hello(protocolVersion: 1, app: "json", fingerprint: nil, name: nil))
    }

    @Test("the hub still refuses an unknown client type")
    func unknownClientType() throws {
        #expect(throws: WireError.self) { try ClientMessage(json: ["type": "teleport"]) }
        do {
            _ = try ClientMessage(json: ["type": "teleport"])
        } catch {
            #expect(error.code == .unknownType)
        }
    }

    @Test("sync with and without an id, and its synced answer, round-trip")
    func syncMessages() throws {
        #expect(try ClientMessage(json: ["type": "sync"]) == .sync(id: nil))
        #expect(try ClientMessage(json: ["type": "sync", "id": nil]) == .sync(id: nil))
        #expect(try ClientMessage(json: ["type": "sync", "id": "b1"]) == .sync(id: .string("b1")))
        #expect(try ClientMessage(json: ["type": "sync", "id": 4]) == .sync(id: .number(4)))
        #expect(throws: WireError.self) { try ClientMessage(json: ["type": "sync", "id": [1]]) }
        #expect(ClientMessage.sync(id: nil).json.canonicalString == #"{"type":"sync"}"#)
        #expect(HubMessage.synced(seq: 9, id: nil).json.canonicalString == #"{"seq":9,"type":"synced"}"#)
        #expect(HubMessage.synced(seq: 9, id: .number(4)).json.canonicalString == #"{"id":4,"seq":9,"type":"synced"}"#)
        #expect(try HubMessage(json: try JSON(parsing: #"{"type":"synced","seq":9,"id":"b1"}"#)) == .synced(seq: 9, id: .string("b1")))
    }

    @Test("welcome and status carry max_frame_bytes")
    func frameLimitMembers() throws {
        let welcome = HubMessage.welcome(Welcome(hub: "h", replica: 1, seq: 0, state: [:], digest: "d", maxFrameBytes: 1024))
        #expect(welcome.json["max_frame_bytes"] == 1024)
        #expect(try HubMessage(json: welcome.json) == welcome)
        #expect(throws: WireError.self) {
            try HubMessage(json: try JSON(parsing: #"{"type":"welcome","hub":"h","replica":1,"seq":0,"digest":"d","state":{},"max_frame_bytes":"big"}"#))
        }
    }

    @Test("a header longer than 32 bits is refused, not truncated or trapped, and nothing is appended")
    func headerBounds() throws {
        var buffer: [UInt8] = [9]
        #expect(throws: FrameError.tooLarge(length: Frame.maxPayloadBytes + 1, limit: Frame.maxPayloadBytes)) {
            try Frame.appendHeader(length: Frame.maxPayloadBytes + 1, to: &buffer)
        }
        #expect(throws: FrameError.emptyFrame) { try Frame.appendHeader(length: 0, to: &buffer) }
        #expect(buffer == [9])
        try Frame.appendHeader(length: Frame.maxPayloadBytes, to: &buffer)
        #expect(buffer == [9, 0xFF, 0xFF, 0xFF, 0xFF])
    }

    @Test("an envelope that does not fit leaves the buffer as it was")
    func envelopeRestoresBuffer() throws {
        var buffer: [UInt8] = [1, 2, 3]
        // patchHeader is what appendActionEnvelope ends with; a payload over the limit is removed.
        buffer += [0, 0, 0, 0]
        buffer += [UInt8](repeating: 0x20, count: 10)
        try Frame.patchHeader(of: &buffer, at: 3)
        #expect(Array(buffer[3..<7]) == [0, 0, 0, 10])
        let length = try Frame.appendActionEnvelope(seq: 1, origin: 1, id: .number(1), action: ["type": "x"], to: &buffer)
        #expect(buffer.count == 3 + 14 + 4 + length)
    }

    @Test("one large frame does not pin its size in the decoder for the connection's life")
    func decoderShrinks() throws {
        var decoder = FrameDecoder(maxPayloadBytes: 8 << 20)
        let big = [UInt8](repeating: 0x41, count: 4 << 20)
        var stream: [UInt8] = []
        try Frame.append(payload: big, to: &stream)
        decoder.append(stream)
        #expect(decoder.reservedByteCount >= 4 << 20)
        #expect(try decoder.nextFrame()?.count == big.count)
        #expect(decoder.reservedByteCount <= FrameDecoder.retainedCapacity)
        // Small frames keep their buffer (no churn on the hot path).
        var small: [UInt8] = []
        try Frame.append(payload: [1, 2, 3], to: &small)
        decoder.append(small)
        #expect(try decoder.nextFrame() == [1, 2, 3])
        #expect(decoder.reservedByteCount > 0)
    }
}

@Suite("The replica's fast path for action envelopes")
struct FastActionTests {
    @Test("the hub's own envelopes take the fast path and decode exactly as the general decoder does")
    func agreesWithGeneral() throws {
        let actions: [JSON] = [["type": "increment"], ["type": "set", "path": "/a", "value": ["x": [1, 2.5, "é"]]], .null, "text", 3]
        for (index, action) in actions.enumerated() {
            var frame: [UInt8] = []
            try Frame.appendActionEnvelope(seq: UInt64(index + 1), origin: 7, id: .number(9_007_199_254_740_991), action: action, to: &frame)
            let payload = Array(frame.dropFirst(Frame.headerSize))
            let fast = try #require(payload.withUnsafeBytes { HubMessage.fastAction($0) })
            #expect(fast == (try HubMessage(json: JSON(parsing: payload))))
        }
    }

    @Test("anything else falls back: another type, order, string or negative id, an extra member, leading zeros, bad JSON")
    func fallsBack() {
        let texts = [
            #"{"type":"reject","id":1,"error":{"code":"x","message":"y"}}"#,
            #"{"seq":1,"type":"action","origin":1,"id":1,"action":{}}"#,
            #"{"type":"action","seq":1,"origin":1,"id":"a","action":{}}"#,
            #"{"type":"action","seq":1,"origin":1,"id":-1,"action":{}}"#,
            #"{"type":"action","seq":1,"origin":1,"id":1,"action":{},"extra":true}"#,
            #"{"type":"action","seq":01,"origin":1,"id":1,"action":{}}"#,
            #"{"type":"action","seq":1,"origin":1,"id":1,"action":{"#,
            #"{"type":"action","seq":99999999999999999,"origin":1,"id":1,"action":{}}"#,
        ]
        for text in texts {
            #expect(Array(text.utf8).withUnsafeBytes { HubMessage.fastAction($0) } == nil, "\(text)")
        }
    }
}
