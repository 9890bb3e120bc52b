import Testing
@testable import SyncProtocol

@Suite("Messages")
struct MessagesTests {
    func client(_ text: String) throws(WireError) -> ClientMessage {
        do {
            return try ClientMessage(json: try JSON(parsing: text))
        } catch let error as WireError {
            throw error
        } catch {
            throw WireError(.badJSON, "\(error)")
        }
    }

    func code(_ text: String) -> ErrorCode? {
        do {
            _ = try client(text)
            return nil
        } catch {
            return error.code
        }
    }

    @Test("client messages decode with every member, and unknown members are ignored")
    func decodeClient() throws {
        #expect(try client(#"{"type":"hello","protocol":1,"app":"json","fingerprint":"json@1","name":"n","x":[1]}"#)
                == .hello(protocolVersion: 1, app: "json", fingerprint: "json@1", name: "n"))
        #expect(try client(#"{"type":"hello","protocol":1.0,"app":"json","name":null}"#)
                == .hello(protocolVersion: 1, app: "json", fingerprint: nil, name: nil))
        #expect(try client(#"{"type":"dispatch","id":7,"action":{"type":"increment"}}"#)
                == .dispatch(id: .number(7), action: ["type": "increment"]))
        #expect(try client(#"{"type":"dispatch","id":"a-1","action":null}"#) == .dispatch(id: .string("a-1"), action: nil))
        #expect(try client(#"{"type":"status","extra":true}"#) == .status())
        // Code written before `checked` existed still says `.status`.
        #expect(try client(#"{"type":"status","checked":null}"#) == ClientMessage.status)
        #expect(try client(#"{"type":"status","checked":{"seq":3,"agreed":true}}"#) == .status(checked: DigestCheck(seq: 3, agreed: true)))
    }

    @Test("each malformed client message gets its error code", arguments: [
        (#"[1]"#, ErrorCode.badJSON),
        (#"{"type":5}"#, .badJSON),
        (#"{"id":1}"#, .badJSON),
        (#"{"type":"teleport"}"#, .unknownType),
        (#"{"type":"hello","app":"json"}"#, .badFrame),
        (#"{"type":"hello","protocol":"1","app":"json"}"#, .badFrame),
        (#"{"type":"hello","protocol":1.5,"app":"json"}"#, .badFrame),
        (#"{"type":"hello","protocol":1}"#, .badFrame),
        (#"{"type":"hello","protocol":1,"app":"json","name":3}"#, .badFrame),
        (#"{"type":"dispatch","action":{}}"#, .badFrame),
        (#"{"type":"dispatch","id":1.5,"action":{}}"#, .badFrame),
        (#"{"type":"dispatch","id":true,"action":{}}"#, .badFrame),
        (#"{"type":"dispatch","id":1}"#, .badFrame),
    ])
    func malformedClient(text: String, expected: ErrorCode) {
        #expect(code(text) == expected)
    }

    @Test("integer ids are exact up to 2^53 - 1; larger ones may have been rounded and are refused")
    func idBounds() throws {
        #expect(try client(#"{"type":"dispatch","id":9007199254740991,"action":{}}"#)
                == .dispatch(id: .number(9_007_199_254_740_991), action: [:]))
        #expect(try client(#"{"type":"dispatch","id":-9007199254740991,"action":{}}"#)
                == .dispatch(id: .number(-9_007_199_254_740_991), action: [:]))
        #expect(code(#"{"type":"dispatch","id":9007199254740992,"action":{}}"#) == .badFrame)
        #expect(code(#"{"type":"dispatch","id":9007199254740993,"action":{}}"#) == .badFrame)
        #expect(code(#"{"type":"dispatch","id":1e300,"action":{}}"#) == .badFrame)
    }

    @Test("client messages round-trip through their JSON form")
    func clientRoundTrip() throws {
        let messages: [ClientMessage] = [
            .hello(protocolVersion: 1, app: "counter", fingerprint: "counter@1", name: "left"),
            .hello(protocolVersion: 1, app: "json", fingerprint: nil, name: nil),
            .dispatch(id: .string("x"), action: ["type": "set", "path": "/a", "value": [1, 2]]),
            .dispatch(id: .number(-3), action: ["type": "increment"]),
            .status(),
            .status(checked: DigestCheck(seq: 9, agreed: true, divergences: 1)),
            .status(checked: DigestCheck(seq: 0, agreed: false)),
        ]
        for message in messages {
            #expect(try ClientMessage(json: try JSON(parsing: message.json.canonicalBytes)) == message)
        }
    }

    @Test("hub messages round-trip through frames")
    func hubRoundTrip() throws {
        let messages: [HubMessage] = [
            .welcome(Welcome(hub: "00ff00ff00ff00ff", replica: 3, seq: 42, state: ["count": 1], digest: "0123456789abcdef")),
            .welcome(Welcome(hub: "00ff00ff00ff00ff", replica: 3, seq: 42, state: ["count": 1], digest: "0123456789abcdef",
                             maxFrameBytes: 4096)),
            .synced(seq: 12, id: nil),
            .synced(seq: 12, id: .string("barrier")),
            .action(seq: 43, origin: 3, id: .number(9), action: ["type": "increment"]),
            .reject(id: .string("q"), error: WireError(.rejected, "no")),
            .error(WireError(.frameTooLarge, "too big")),
            .error(WireError(rawCode: "from-the-future", message: "unknown codes survive")),
            .status(HubStatus(protocolVersion: 1, app: "json", fingerprint: "json@1", hub: "h", seq: 7,
                              digest: "d", replicas: [ReplicaInfo(replica: 1, name: "a"), ReplicaInfo(replica: 2, name: "")],
                              maxFrameBytes: 1 << 20)),
            .status(HubStatus(protocolVersion: 1, app: "json", fingerprint: "json@1", hub: "h", seq: 7,
                              digest: "d", replicas: [ReplicaInfo(replica: 1, name: "a", queuedBytes: 12),
                                                      ReplicaInfo(replica: 2, name: "b", lag: 0, uid: 0, pid: 9,
                                                                  checked: DigestCheck(seq: 6, agreed: true, divergences: 0))],
                              maxFrameBytes: 1 << 20, history: "0123456789abcdef",
                              storage: ["fsync": "batch", "journal_bytes": 10, "data_dir": nil])),
            .status(HubStatus(protocolVersion: 1, app: "todos", fingerprint: "todos@1", hub: "h", seq: 3,
                              digest: "d", replicas: [], upgradableTo: "todos@2")),
        ]
        for message in messages {
            var decoder = FrameDecoder()
            decoder.append(try Frame.encode(message))
            let payload = try #require(try decoder.nextFrame())
            #expect(try HubMessage(json: try JSON(parsing: payload)) == message)
            #expect(try decoder.nextFrame() == nil)
        }
    }

    @Test("a client reads a replica's checked report leniently: a malformed one is left out, not an error")
    func lenientChecked() throws {
        let text = #"{"type":"status","protocol":1,"app":"json","fingerprint":"json@1","hub":"h","seq":1,"digest":"d","replicas":["#
            + #"{"replica":1,"name":"a","checked":{"seq":1,"agreed":true}},{"replica":2,"name":"b","checked":"soon"},"#
            + #"{"replica":3,"name":"c","checked":{"seq":-4,"agreed":true}}]}"#
        guard case .status(let status) = try HubMessage(json: try JSON(parsing: Array(text.utf8))) else {
            Issue.record("not a status")
            return
        }
        #expect(status.replicas.map(\.checked) == [DigestCheck(seq: 1, agreed: true), nil, nil])
    }

    @Test("the hand-written action envelope equals the generic encoding of the same message")
    func envelopeWriter() throws {
        let cases: [(UInt64, Int, DispatchID, JSON)] = [
            (1, 1, .number(1), ["type": "increment"]),
            (9_007_199_254_740_991, 12, .string("id \"quoted\" é"), ["type": "set", "path": "/a~1b", "value": ["z": 1, "a": [true, nil, 0.5]]]),
        ]
        for (seq, origin, id, action) in cases {
            var bytes: [UInt8] = []
            try Frame.appendActionEnvelope(seq: seq, origin: origin, id: id, action: action, to: &bytes)
            var decoder = FrameDecoder()
            decoder.append(bytes)
            let payload = try #require(try decoder.nextFrame())
            #expect(try decoder.nextFrame() == nil)
            let message = try HubMessage(json: try JSON(parsing: payload))
            #expect(message == .action(seq: seq, origin: origin, id: id, action: action))
            #expect(String(decoding: payload, as: UTF8.self).hasPrefix(#"{"type":"action","seq":"#))
        }
    }

    @Test("every error code has its documented wire spelling")
    func errorCodes() {
        #expect(ErrorCode.allCases.map(\.rawValue) == [
            "bad-frame", "frame-too-large", "bad-json", "unknown-type", "protocol-mismatch", "app-mismatch",
            "not-attached", "already-attached", "bad-action", "rejected", "slow-consumer", "shutting-down", "unavailable",
            "superseded", "timeout", "bad-hello", "too-many-clients", "forbidden", "history-unavailable", "history-changed",
            "app-outdated", "app-ahead", "not-permitted", "upgrade-refused",
        ])
    }
}
