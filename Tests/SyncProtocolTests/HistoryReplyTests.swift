import SyncProtocol
import Testing

/// The `history` reply has one schema, in SyncProtocol: the hub's fast writer (action payloads
/// copied as they are) and the general encoder must read back as the same message.
@Suite("history replies: the hub's bytes and the general form read back alike")
struct HistoryReplyTests {
    @Test("pages and refusals, random seqs, ids and stamps: payload(…) parses to the same HistoryReply as json")
    func fastAndGeneralAgree() throws {
        var random = SplitMix64(seed: 42)
        let ids: [DispatchID?] = [nil, .number(0), .number(-7), .string("r-1"), .string("é\u{1F600}\"\\")]
        for round in 0..<300 {
            let from = random.next() % 1_000 + 1
            let count = Int(random.next() % 6)
            let seq = from + UInt64(count) + random.next() % 3
            let id = ids[Int(random.next() % UInt64(ids.count))]
            let actions = (0..<count).map { offset -> HubMessage in
                let stamp = random.next() % 2 == 0 ? ActionStamp.none : ActionStamp(time: Int64(random.next() % 1_000_000), originName: "n\(offset)")
                return .action(seq: from + UInt64(offset), origin: Int(random.next() % 9), id: .number(offset),
                               action: ["type": "set", "value": JSON(offset)], stamp: stamp)
            }
            let expected: HistoryReply
            let bytes: [UInt8]
            if round % 5 == 4 {
                let message = "the hub no longer keeps seq \(from)"
                expected = HistoryReply(from: from, to: seq, seq: seq, id: id, outcome: .refused(WireError(.historyUnavailable, message)))
                bytes = HistoryReply.refusalPayload(from: from, id: id, seq: seq, to: seq, message: message)
            } else {
                let last = count == 0 ? from - 1 : from + UInt64(count) - 1
                expected = HistoryReply(from: from, to: last, seq: seq, id: id, outcome: .actions(actions))
                bytes = HistoryReply.payload(from: from, id: id, seq: seq, to: last,
                                             actionPayloads: Array(actions.map { $0.json.canonicalBytes }.joined(separator: [UInt8(ascii: ",")])))
            }
            #expect(try HubMessage(json: JSON(parsing: bytes)) == .history(expected))
            #expect(try HubMessage(json: HubMessage.history(expected).json) == .history(expected))
            // The hub's member order: type, from, id, seq, to, then actions or error.
            #expect(bytes.starts(with: Array(#"{"type":"history","from":"#.utf8)))
        }
    }

    @Test("malformed replies are bad-frame, never a trap: missing or negative seqs, an item that is not an action, an error without a message")
    func malformed() {
        let cases: [JSON] = [
            ["type": "history", "from": 1, "seq": 2, "actions": []],
            ["type": "history", "from": -1, "to": 1, "seq": 2, "actions": []],
            ["type": "history", "from": 1, "to": 1, "seq": 2, "actions": [["type": "checkpoint", "seq": 1, "digest": "d"]]],
            ["type": "history", "from": 1, "to": 1, "seq": 2, "error": ["code": "history-unavailable"]],
            ["type": "history", "from": 1, "to": 1, "seq": 2],
            ["type": "history", "from": 1, "to": 1, "seq": 2, "id": true, "actions": []],
        ]
        for json in cases {
            #expect(throws: WireError.self) { try HubMessage(json: json) }
        }
    }
}
