@testable import StoreHub
import SyncCore
import Testing

@Suite("Log records read from canonical bodies without a tree")
struct LogRecordBodyTests {
    /// The general reading: the body parsed into a tree, then read.
    private static func general(_ body: [UInt8]) -> LogRecord? {
        (try? JSON(parsing: body)).flatMap { LogRecord(json: $0) }
    }

    private static func fast(_ body: [UInt8]) -> LogRecord? {
        body.withUnsafeBytes { LogRecord(canonicalBody: $0) }
    }

    @Test("every record the hub writes is read back the same by both ways; the fast way keeps a subset action's bytes")
    func roundTrip() throws {
        var texts = SeededJSONTexts(seed: 0x5EED_0F_1065)
        var fastCount = 0
        for index in 0..<2_000 {
            let action = try JSON(parsing: Array(texts.next().utf8))
            let id: DispatchID = index % 3 == 0 ? .string("id-\(index)") : .number(index % 5 == 0 ? -index : index)
            let record = LogRecord(seq: UInt64(index + 1), origin: index % 7, id: id,
                                   session: index % 2 == 0 ? "session \(index)" : nil, action: action,
                                   checkpoint: index % 4 == 0 ? "sha256:\(index)" : nil,
                                   stamp: index % 3 == 1 ? ActionStamp(time: Int64(index) * 1_000 + 7, originName: index % 2 == 0 ? "näme \(index)" : nil) : .none)
            let body = record.body
            // The body is the record's canonical JSON, stamp members in their sorted places.
            #expect(body == Array(record.json.canonicalString.utf8))
            let general = try #require(Self.general(body))
            #expect(general == record)
            if let fast = Self.fast(body) {
                fastCount += 1
                #expect(fast == record, "body \(String(decoding: body, as: UTF8.self))")
                #expect(fast.wire.canonicalBytes == action.canonicalBytes)
            } else {
                // Only an action outside the canonical subset sends a hub-written body the long way.
                #expect(!action.canonicalBytes.withUnsafeBytes { JSON.isCanonical($0, maxDepth: 511) })
            }
        }
        #expect(fastCount > 100, "the generator should give many actions in the subset")
    }

    @Test("a body of another shape is left to the general reading, never read differently", arguments: [
        #"{"action":{"type":"increment"},"id":1,"origin":2,"seq":3}"#,                          // the plain shape (read)
        #"{"action":{"type":"increment"},"id":1,"origin":2,"seq":3,"zzz":true}"#,               // an unknown member
        #"{"id":1,"action":{"type":"increment"},"origin":2,"seq":3}"#,                          // another order
        #"{"action":{"by":1.5,"type":"increment"},"id":1,"origin":2,"seq":3}"#,                 // a number outside the subset
        #"{"action":{"type":"increment"},"id":1,"origin":2,"seq":3,"session":7}"#,              // a session that is no string
        #"{"action":{"type":"increment"},"checkpoint":null,"id":1,"origin":2,"seq":3}"#,        // a null checkpoint
        #"{"action":{"type":"increment"},"id":1,"origin":2,"seq":0}"#,                          // seq 0
        #"{"action":{"type":"increment"},"id":1.5,"origin":2,"seq":3}"#,                        // an id that is no integer
        #"{"action":{"type":"increment"},"id":"x","origin":2}"#,                                // no seq
        #"{"action":{"type":"increment"} ,"id":1,"origin":2,"seq":3}"#,                         // whitespace
        #"{"action":{"type":"inc\u0072ement"},"id":1,"origin":2,"seq":3}"#,                     // an escape in the action
    ])
    func otherShapes(_ text: String) {
        let body = Array(text.utf8)
        guard let fast = Self.fast(body) else { return }
        #expect(fast == Self.general(body), "\(text)")
    }

    @Test("the plain shape is read the fast way")
    func plainShapeIsFast() throws {
        let record = try #require(Self.fast(Array(#"{"action":{"type":"increment"},"id":1,"origin":2,"seq":3}"#.utf8)))
        #expect(record.seq == 3 && record.origin == 2 && record.id == .number(1) && record.session == nil)
        #expect(record.wire.withCanonicalBytes { _ in true } == true, "the action is kept as bytes")
    }
}
