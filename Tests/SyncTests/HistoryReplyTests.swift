import BuiltinApps
import Foundation
@testable import StoreHub
import StoreSyncTesting
import SyncCore
import SyncProtocol
import Testing

/// `history` answers with exactly the `action` messages the hub broadcast for the range asked,
/// whatever shape their dispatch ids have (docs/PROTOCOL.md §3 and §4, `history`): integers of
/// any sign and spelling, strings with escapes, any Unicode, or text that looks like the
/// envelope around it.
@Suite("history replies hold every broadcast action, whatever its dispatch id")
struct HistoryReplyTests {
    @Test("a string id, then an integer id: history 1…2 holds both actions")
    func stringThenIntegerID() async throws {
        let hub = try InProcessHub(JSONApp())
        defer { Task { try? await hub.stop() } }
        let client = try RawClient(path: hub.fixture.socket)
        defer { client.close() }
        try client.send(["type": "hello", "protocol": 1, "app": "json"])
        #expect(try client.receive()["type"] == "welcome")
        try client.send(["type": "dispatch", "id": "x-1", "action": ["type": "set", "path": "/a", "value": 1]])
        let first = try receiveSkippingCheckpoints(client)
        try client.send(["type": "dispatch", "id": 2, "action": ["type": "set", "path": "/a", "value": 2]])
        let second = try receiveSkippingCheckpoints(client)
        #expect(first["type"] == "action" && first["seq"] == 1 && first["id"] == "x-1", "\(first)")
        #expect(second["type"] == "action" && second["seq"] == 2 && second["id"] == 2, "\(second)")
        try client.send(["type": "history", "from": 1, "to": 2])
        let reply = try receiveSkippingCheckpoints(client)
        #expect(reply["type"] == "history" && reply["from"] == 1 && reply["to"] == 2 && reply["seq"] == 2, "\(reply)")
        #expect(reply["actions"]?.arrayValue == [first, second], "\(reply)")
    }

    @Test("property: for seeded random ids of every shape, each history reply is exactly the broadcast actions of its range",
          arguments: [0x5EED_4157_0001, 0x5EED_4157_0002, 0x5EED_4157_0003] as [UInt64])
    func everyIDShape(seed: UInt64) async throws {
        // A checkpoint after every third action: the reply leaves out those frames, and only those.
        let hub = try InProcessHub(JSONApp()) { $0.checkpointEvery = 3 }
        defer { Task { try? await hub.stop() } }
        var random = SplitMix64(seed: seed)
        let writer = try RawClient(path: hub.fixture.socket)
        defer { writer.close() }
        try writer.send(["type": "hello", "protocol": 1, "app": "json"])
        #expect(try writer.receive()["type"] == "welcome")

        // Every shape at least once, then random ones.
        var ids = WireID.Shape.allCases.map { WireID.make($0, using: &random) }
        while ids.count < 300 { ids.append(WireID.random(using: &random)) }
        // Sent in bursts of random sizes, so the hub commits them in groups of different sizes;
        // each burst's actions are read back before the next (no sleeps, no polling).
        var broadcast: [JSON] = []
        var sent = 0
        while sent < ids.count {
            let size = min(ids.count - sent, 1 + Int(random.next() % 40))
            var burst: [UInt8] = []
            for index in sent..<(sent + size) {
                let text = Self.dispatchText(id: ids[index], value: index + 1, using: &random)
                try Frame.append(payload: Array(text.utf8), to: &burst)
            }
            try writer.sendBytes(burst)
            sent += size
            while broadcast.count < sent {
                let message = try receiveSkippingCheckpoints(writer)
                let id = ids[broadcast.count]
                guard message["type"] == "action" else {
                    throw HarnessError("seed \(seed): dispatch \(broadcast.count + 1) with id \(id) was answered \(message)")
                }
                #expect(message["seq"] == JSON(broadcast.count + 1), "seed \(seed): \(message)")
                // The broadcast echoes the id as the value sent (4.0 as 4, escapes undone).
                let sentID = try JSON(parsing: id.text)
                #expect(message["id"] == sentID, "seed \(seed), id \(id): \(message)")
                broadcast.append(message)
            }
        }
        let total = broadcast.count

        // Random ranges, asked by an observer (no hello) and by the attached writer in turn,
        // some without `to`, some with a request id of a random shape (echoed as sent).
        let observer = try RawClient(path: hub.fixture.socket)
        defer { observer.close() }
        var requests: [(from: Int, to: Int?, id: WireID?)] = [(1, total, nil), (1, nil, nil)]
        for _ in 0..<60 {
            let from = 1 + Int(random.next() % UInt64(total))
            let to = from + Int(random.next() % UInt64(total - from + 1))
            let openEnded = random.next() % 4 == 0
            let withID = random.next() % 2 == 0
            let id = withID ? WireID.random(using: &random) : nil
            requests.append((from: from, to: openEnded ? nil : to, id: id))
        }
        for (index, request) in requests.enumerated() {
            let client = index % 2 == 0 ? observer : writer
            var text = #"{"type":"history","from":\#(request.from)"#
            if let to = request.to { text += #","to":\#(to)"# }
            if let id = request.id { text += #","id":\#(id.text)"# }
            text += "}"
            var frame: [UInt8] = []
            try Frame.append(payload: Array(text.utf8), to: &frame)
            try client.sendBytes(frame)
            let reply = try receiveSkippingCheckpoints(client)
            let last = request.to ?? total
            let context = "seed \(seed), request \(text)"
            #expect(reply["type"] == "history" && reply["error"] == nil, "\(context) → \(reply)")
            #expect(reply["from"] == JSON(request.from) && reply["to"] == JSON(last) && reply["seq"] == JSON(total),
                    "\(context) → from \(String(describing: reply["from"])), to \(String(describing: reply["to"]))")
            let echoed = try request.id.map { try JSON(parsing: $0.text) }
            #expect(reply["id"] == echoed, "\(context) → id \(String(describing: reply["id"]))")
            let expected = Array(broadcast[(request.from - 1)..<last])
            let actions = reply["actions"]?.arrayValue ?? []
            #expect(actions == expected, "\(context): \(actions.count) actions, \(expected.count) broadcast; first difference: \(Self.firstDifference(actions, expected))")
        }
    }

    @Test("HubMessage.actionSeq reads the seq of every action frame the hub writes, whatever its id, and of no other frame")
    func actionSeqOfFrames() throws {
        var random = SplitMix64(seed: 0x5EED_4157_00AC)
        var ids = WireID.Shape.allCases.map { WireID.make($0, using: &random) }
        while ids.count < 500 { ids.append(WireID.random(using: &random)) }
        for (index, id) in ids.enumerated() {
            let value = try JSON(parsing: id.text)
            guard let dispatchID = DispatchID(json: value) else {
                Issue.record("\(id) is not a dispatch id")
                continue
            }
            let seq = 1 + random.next() % ((UInt64(1) << 53) - 1)
            let origin = Int(random.next() % 5_000)
            let action: JSON = ["type": "set", "path": "/n", "value": JSON(index)]
            var frame: [UInt8] = []
            try Frame.appendActionEnvelope(seq: seq, origin: origin, id: dispatchID, action: action, to: &frame)
            #expect(Array(frame[Frame.headerSize...]).withUnsafeBytes { HubMessage.actionSeq($0) } == seq, "\(id)")
        }
        for other in [#"{"digest":"24a8c0dc4f401b6f","seq":6,"type":"checkpoint"}"#,
                      #"{"type":"action","seq":"7","origin":1,"id":1,"action":null}"#,
                      #"{"type":"action","seq":,"origin":1}"#, #"{"type":"action","seq":12"#,
                      #"{"type":"actions","seq":1,"origin":1,"id":1,"action":null}"#, ""] {
            #expect(Array(other.utf8).withUnsafeBytes { HubMessage.actionSeq($0) } == nil, "\(other)")
        }
    }

    /// A `dispatch` frame's text for a json-app `set`, its members in one of three layouts:
    /// the canonical one (the hub's fast path, when the id and action allow it), the usual one,
    /// and one with whitespace (both parsed).
    private static func dispatchText(id: WireID, value: Int, using random: inout SplitMix64) -> String {
        // Sometimes the action carries the id's text as its value, so actions vary too.
        let stored = random.next() % 3 == 0 ? id.text : String(value)
        let action = #"{"path":"/n","type":"set","value":\#(stored)}"#
        switch random.next() % 3 {
        case 0: return #"{"action":\#(action),"id":\#(id.text),"type":"dispatch"}"#
        case 1: return #"{"type":"dispatch","id":\#(id.text),"action":\#(action)}"#
        default: return #"{ "id" : \#(id.text) , "action" : \#(action) , "type" : "dispatch" }"#
        }
    }

    /// Where two lists of messages first differ, for a failure message.
    private static func firstDifference(_ got: [JSON], _ wanted: [JSON]) -> String {
        for index in 0..<max(got.count, wanted.count) {
            let left = index < got.count ? got[index].canonicalString : "nothing"
            let right = index < wanted.count ? wanted[index].canonicalString : "nothing"
            if left != right { return "at \(index): got \(left), broadcast \(right)" }
        }
        return "none"
    }
}

/// The next message that is not a `checkpoint` (one may follow any action).
///
/// - Parameter client: The connection to read.
/// - Returns: The message.
/// - Throws: ``HarnessError`` when the hub closes the connection or is silent too long.
private func receiveSkippingCheckpoints(_ client: RawClient) throws -> JSON {
    while true {
        let message = try client.receive()
        if message["type"] != "checkpoint" { return message }
    }
}

/// A dispatch id as a client may spell it on the wire: the JSON text of one of the shapes
/// docs/PROTOCOL.md §3 allows (an integral number of magnitude at most 2^53 − 1, in any
/// spelling, or a string of at most 128 bytes of UTF-8 once unescaped).
private struct WireID: CustomStringConvertible {
    /// The kinds of id generated.
    enum Shape: CaseIterable {
        case smallInteger, largestIntegers, negativeInteger, integralSpelling
        case plainString, emptyString, digitString, escapedString, unicodeString, envelopeLookalike, longestString
    }

    /// Which kind of id this is.
    let shape: Shape
    /// The JSON text sent as the id.
    let text: String

    var description: String { "\(shape) \(text)" }

    /// An id of a random shape.
    ///
    /// - Parameter random: The seeded generator.
    /// - Returns: The id.
    static func random(using random: inout SplitMix64) -> WireID {
        let shape = pick(Shape.allCases, &random)
        return make(shape, using: &random)
    }

    /// An id of the given shape.
    ///
    /// - Parameters:
    ///   - shape: The shape.
    ///   - random: The seeded generator.
    /// - Returns: The id.
    static func make(_ shape: Shape, using random: inout SplitMix64) -> WireID {
        let largest = UInt64(DispatchID.maxInteger)
        let text: String
        switch shape {
        case .smallInteger:
            text = String(random.next() % 1_000)
        case .largestIntegers:
            text = String(largest - random.next() % 1_000)
        case .negativeInteger:
            text = "-" + String(1 + random.next() % largest)
        case .integralSpelling:
            // Integral values spelled as the integer they are not written as: 4.0, 4e0, 40e-1.
            let n = 1 + random.next() % 99_999
            text = pick(["\(n).0", "\(n)e0", "\(n)E+0", "\(n)0e-1", "\(n).000", "-\(n).0", "-0", "0.0"], &random)
        case .plainString:
            let count = 1 + Int(random.next() % 24)
            let characters = (0..<count).map { _ in pick(printable, &random) }
            text = "\"" + String(characters) + "\""
        case .emptyString:
            text = "\"\""
        case .digitString:
            // The same digits as an integer id, but a string: another id.
            text = "\"" + String(random.next() % 1_000) + "\""
        case .escapedString:
            let count = 1 + Int(random.next() % 12)
            text = "\"" + (0..<count).map { _ in pick(escapes, &random) }.joined() + "\""
        case .unicodeString:
            let count = 1 + Int(random.next() % 6)
            text = "\"" + (0..<count).map { _ in pick(unicode, &random) }.joined() + "\""
        case .envelopeLookalike:
            text = pick(lookalikes, &random)
        case .longestString:
            // 128 bytes of UTF-8 once unescaped: the longest id a hub takes.
            text = pick(["\"" + String(repeating: "a", count: 128) + "\"", "\"" + String(repeating: "é", count: 64) + "\"",
                         "\"" + String(repeating: "😀", count: 32) + "\"", "\"" + String(repeating: #"\u00e9"#, count: 64) + "\""],
                        &random)
        }
        return WireID(shape: shape, text: text)
    }

    /// Printable ASCII but `"` and `\`, which need escaping.
    private static let printable: [Character] = (UInt8(0x20)...UInt8(0x7E))
        .filter { $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }
        .map { Character(Unicode.Scalar($0)) }
    /// JSON escapes (each at most 4 bytes once undone), among plain characters.
    private static let escapes = [#"\""#, #"\\"#, #"\/"#, #"\b"#, #"\f"#, #"\n"#, #"\r"#, #"\t"#, #"\u0000"#, #"\u001f"#,
                                  #"\u0041"#, #"\u00e9"#, #"\u00E9"#, #"\u2028"#, #"\ud83d\ude00"#, #"\uD834\uDD1E"#,
                                  "a", "Z", "-", "7", " "]
    /// Characters written as they are (UTF-8 in the frame), at most 18 bytes each: accents
    /// precomposed and combining, CJK, an emoji and a ZWJ sequence, U+2028, DEL, U+FEFF, a
    /// plane-16 private-use character.
    private static let unicode = ["é", "e\u{301}", "中", "文", "😀", "\u{1F469}\u{200D}\u{1F469}\u{200D}\u{1F467}", "\u{2028}", "\u{7F}", "\u{FEFF}", "Ω", "a", " ",
                                  "\u{10FFFD}"]
    /// Strings that hold the envelope's own punctuation and member names.
    private static let lookalikes = [#""\",\"origin\":1,\"id\":2,\"action\":""#, #""{\"type\":\"action\",\"seq\":1,""#,
                                     #""}""#, #"",""#, #""null""#, #""\u0022""#, #""\\\"""#, #""\"type\":\"checkpoint\"""#]

    /// One of `choices`, chosen by `random`.
    private static func pick<Element>(_ choices: [Element], _ random: inout SplitMix64) -> Element {
        choices[Int(random.next() % UInt64(choices.count))]
    }
}
