import Testing
@testable import SyncProtocol

/// `JSONEdit(canonical:)`, the replicas' byte-level fast path, against `JSONEdit(action:)` on the
/// parsed tree: whatever the fast path accepts, the general path decodes to the same edit.
@Suite("JSONEdit from canonical bytes")
struct JSONEditCanonicalTests {
    /// The fast path's answer for `text`, and the general path's (nil when it refuses).
    private func both(_ text: String, maxDepth: Int = 512) -> (fast: JSONEdit?, general: JSONEdit?) {
        let bytes = Array(text.utf8)
        let fast = bytes.withUnsafeBytes { JSONEdit(canonical: $0, maxDepth: maxDepth) }
        let general = (try? JSON(parsing: bytes, maxDepth: maxDepth)).flatMap { try? JSONEdit(action: $0) }
        return (fast, general)
    }

    @Test("the common shapes decode from bytes exactly as from the tree", arguments: [
        #"{"path":"/counters/3","type":"increment"}"#,
        #"{"by":2.5,"path":"/a/b","type":"increment"}"#,
        #"{"by":-1e3,"path":"","type":"increment"}"#,
        #"{"path":"/a","type":"set","value":{"b":[1,"x\"y",null,true,{"c":{}}]}}"#,
        #"{"path":"/list/-","type":"set","value":"hi"}"#,
        #"{"path":"/a","type":"remove"}"#,
        #"{"path":"/a","type":"merge","value":{"k":null}}"#,
        #"{"path":"/log","type":"append","value":[1,2]}"#,
        #"{"path":"/a//b/","type":"set","value":0}"#,
        #"{"path":"","type":"set","value":{}}"#,
    ])
    func commonShapes(text: String) throws {
        let (fast, general) = both(text)
        let decoded = try #require(fast, "the fast path refused \(text)")
        #expect(decoded == general, "\(text)")
    }

    @Test("anything else is left to the general path (nil), never decoded differently", arguments: [
        #"{ "path":"/a","type":"remove"}"#,                   // whitespace
        #"{"type":"remove","path":"/a"}"#,                    // not canonical order
        #"{"path":"/a","path":"/b","type":"remove"}"#,        // a member twice
        #"{"extra":1,"path":"/a","type":"remove"}"#,          // an unknown member (ignored by the tree path)
        #"{"path":"/a~1b","type":"remove"}"#,                 // an escape to undo
        #"{"path":"/a\/b","type":"remove"}"#,                 // a string escape
        #"{"path":"/é","type":"remove"}"#,                    // non-ASCII
        #"{"path":"a","type":"remove"}"#,                     // a bad pointer (the tree path words it)
        #"{"by":1,"path":"/a","type":"set","value":1}"#,      // by on set
        #"{"path":"/a","type":"remove","value":1}"#,          // value on remove
        #"{"path":"/a","type":"set"}"#,                       // value missing
        #"{"path":"/a","type":"nope"}"#,                      // unknown type
        #"{"path":"/a"}"#,                                    // no type
        #"{"by":"2","path":"/a","type":"increment"}"#,        // by not a number
        #"{"by":01,"path":"/a","type":"increment"}"#,         // not JSON
        #"{"path":"/a","type":"set","value":[1,]}"#,          // not JSON
        #"{"path":"/a","type":"set","value":{"k":1,"k":2}}"#, // duplicate keys
        #"{"path":"/a","type":"remove"} "#,                   // trailing bytes
        #"{"path":"/a","type":"remove"},"x":1"#,              // an envelope's extra member
        #"["path"]"#, #""#, #"{"#, #"{}"#,
    ])
    func othersFallBack(text: String) {
        let (fast, general) = both(text)
        #expect(fast == nil, "the fast path decoded \(text) as \(String(describing: fast)); the tree path gives \(String(describing: general))")
    }

    @Test("the depth limit is the parser's: a value one level too deep is refused by both")
    func depth() {
        let nested = String(repeating: "[", count: 4) + String(repeating: "]", count: 4)
        let text = #"{"path":"/a","type":"set","value":"# + nested + "}"
        #expect(both(text, maxDepth: 5).fast != nil)
        #expect(both(text, maxDepth: 5).general != nil)
        #expect(both(text, maxDepth: 4).fast == nil)
        #expect(both(text, maxDepth: 4).general == nil)
    }

    @Test("10 000 random edits: the fast path decodes every canonical one as the tree path does")
    func randomized() throws {
        var random = SplitMix64(seed: 0x5EED_0F_ED17)
        func pick(_ count: Int) -> Int { Int(random.next() % UInt64(count)) }
        func token() -> String {
            ["a", "counters", "0", "-", "", "x y", "k.1", "~", "/", "é", "12"][pick(11)]
        }
        func value(_ depth: Int) -> JSON {
            switch pick(depth > 2 ? 4 : 6) {
            case 0: return .null
            case 1: return .bool(pick(2) == 0)
            case 2: return .number([0, -1, 2.5, 1e21, 0.1, 123456789][pick(6)])
            case 3: return .string(["", "x", "\"q\"", "line\n", "é"][pick(5)])
            case 4: return .array((0..<pick(3)).map { _ in value(depth + 1) })
            default:
                var members: [JSONKey: JSON] = [:]
                for _ in 0..<pick(3) { members[JSONKey(token())] = value(depth + 1) }
                return .object(members)
            }
        }
        var accepted = 0
        for _ in 0..<10_000 {
            let path = (0..<pick(4)).map { _ in "/" + token() }.joined()
            var members: [JSONKey: JSON] = ["path": .string(path)]
            let type = ["set", "remove", "merge", "increment", "append", "other"][pick(6)]
            if pick(10) > 0 { members["type"] = .string(type) }
            if pick(3) == 0 || ["set", "merge", "append"].contains(type) && pick(8) > 0 { members["value"] = value(0) }
            if pick(3) == 0 { members["by"] = pick(4) == 0 ? .string("1") : .number([1, -2, 0.5][pick(3)]) }
            if pick(20) == 0 { members["extra"] = .null }
            let bytes = JSON.object(members).canonicalBytes
            let fast = bytes.withUnsafeBytes { JSONEdit(canonical: $0) }
            let general = try? JSONEdit(action: JSON(parsing: bytes))
            if let fast {
                accepted += 1
                #expect(fast == general, "\(String(decoding: bytes, as: UTF8.self))")
            }
        }
        #expect(accepted > 2_000, "the fast path should take the common shapes (took \(accepted))")
    }
}

@Suite("JSONEdit written canonically")
struct JSONEditCanonicalWritingTests {
    @Test("the direct writer gives exactly the canonical bytes of the wire form, for every kind and awkward paths")
    func writerMatchesWireForm() throws {
        let paths = ["", "/a", "/counters/3", "/a~1b/c~0d", "/x y/é/\"q\"", "/tab\there", "//"]
        let values: [JSON] = [.null, 1, -0.5, 1e21, "s", ["k": [1, 2]], [:]]
        var edits: [JSONEdit] = []
        for text in paths {
            let path = try JSONPointer(text)
            edits += [.remove(path), .increment(path, by: 1), .increment(path, by: -2.5)]
            for value in values { edits += [.set(path, value), .merge(path, value), .append(path, value)] }
        }
        for edit in edits {
            #expect(edit.canonicalBytes == edit.action.canonicalBytes, "\(edit)")
            // And it reads back through the fast decoder where that applies.
            if let back = edit.canonicalBytes.withUnsafeBytes({ JSONEdit(canonical: $0) }) { #expect(back == edit) }
        }
    }
}
