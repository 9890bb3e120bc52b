import SyncProtocol
import Testing

/// The `action` message's `time` and `origin_name` (PROTOCOL.md §4): written by the hub's fast
/// encoder, read alike by the replica's fast path and the general parser, ignored when absent
/// or malformed.
@Suite("Action stamps: when an action was sequenced, and its origin's name")
struct ActionStampTests {
    private func frame(seq: UInt64 = 5, id: DispatchID = .number(3), stamp: ActionStamp) throws -> [UInt8] {
        var buffer: [UInt8] = []
        try Frame.appendActionEnvelope(seq: seq, origin: 2, id: id, action: ["type": "x", "n": 1], stamp: stamp, to: &buffer)
        return Array(buffer.dropFirst(Frame.headerSize))
    }

    @Test("the hub writes the stamp between id and action, the name before the time")
    func writtenForm() throws {
        let payload = try frame(stamp: ActionStamp(time: 1_764_339_000_123, originName: "alice"))
        #expect(String(decoding: payload, as: UTF8.self)
            == #"{"type":"action","seq":5,"origin":2,"id":3,"origin_name":"alice","time":1764339000123,"action":{"n":1,"type":"x"}}"#)
        let bare = try frame(stamp: .none)
        #expect(String(decoding: bare, as: UTF8.self) == #"{"type":"action","seq":5,"origin":2,"id":3,"action":{"n":1,"type":"x"}}"#)
        #expect(ActionStamp(time: 1, originName: "").originName == nil, "an empty name is no name")
    }

    @Test("the fast path and the general parser read the same message, with and without each member", arguments: [
        ActionStamp.none, ActionStamp(time: 0), ActionStamp(time: ActionStamp.maxTime), ActionStamp(originName: "bob"),
        ActionStamp(time: 1_764_339_000_123, originName: "Zoë 🦊"), ActionStamp(time: 42, originName: "tab\there"),
        ActionStamp(time: 42, originName: "quote\"back\\slash"), ActionStamp(originName: "\u{202E}rtl"),
    ])
    func readAlike(stamp: ActionStamp) throws {
        let payload = try frame(stamp: stamp)
        let general = try HubMessage(json: JSON(parsing: payload))
        #expect(general == .action(seq: 5, origin: 2, id: .number(3), action: ["type": "x", "n": 1], stamp: stamp))
        let fast = payload.withUnsafeBytes { HubMessage.fastAction($0) }
        // Names with escapes (a tab, a quote) are left to the general path; never misread.
        if let fast { #expect(fast == general) }
        if stamp.originName?.contains(where: { $0 == "\t" || $0 == "\"" || $0 == "\\" }) != true {
            #expect(fast != nil, "a plain stamp stays on the fast path")
        }
        #expect(general.json["time"]?.intValue == stamp.time.map { Int($0) })
    }

    @Test("a stamp member of the wrong type or out of range is ignored, never an error (the extension rule)", arguments: [
        #"{"type":"action","seq":1,"origin":1,"id":1,"time":-5,"action":{}}"#,
        #"{"type":"action","seq":1,"origin":1,"id":1,"time":"today","action":{}}"#,
        #"{"type":"action","seq":1,"origin":1,"id":1,"time":1e300,"action":{}}"#,
        #"{"type":"action","seq":1,"origin":1,"id":1,"time":2.5,"action":{}}"#,
        #"{"type":"action","seq":1,"origin":1,"id":1,"origin_name":7,"action":{}}"#,
    ])
    func malformedIgnored(text: String) throws {
        let message = try HubMessage(json: JSON(parsing: Array(text.utf8)))
        #expect(message == .action(seq: 1, origin: 1, id: .number(1), action: [:], stamp: .none))
        let fast = Array(text.utf8).withUnsafeBytes { HubMessage.fastAction($0) }
        #expect(fast == nil || fast == message)
    }

    @Test("members in another order or unknown members still read (general path)")
    func otherOrder() throws {
        let text = #"{"action":{"type":"x"},"time":9,"id":"a","origin":3,"seq":2,"type":"action","origin_name":"n","extra":true}"#
        let message = try HubMessage(json: JSON(parsing: Array(text.utf8)))
        #expect(message == .action(seq: 2, origin: 3, id: .string("a"), action: ["type": "x"], stamp: ActionStamp(time: 9, originName: "n")))
    }
}
