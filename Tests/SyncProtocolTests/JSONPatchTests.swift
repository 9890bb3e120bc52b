import SyncProtocol
import Testing

@Suite("JSON Patch (RFC 6902) for watch --diff")
struct JSONPatchTests {
    @Test("exact operations for members, array tails and scalars")
    func exactOperations() throws {
        let before = try JSON(parsing: #"{"a":1,"b":{"c":[1,2,3]},"gone":true,"s":"x"}"#)
        let after = try JSON(parsing: #"{"a":1,"b":{"c":[1,5]},"new":{"k":null},"s":"y"}"#)
        let patch = JSONPatch.diff(from: before, to: after)
        #expect(JSON.array(patch).canonicalString == #"[{"op":"remove","path":"/gone"},{"op":"replace","path":"/b/c/1","value":5},{"op":"remove","path":"/b/c/2"},{"op":"add","path":"/new","value":{"k":null}},{"op":"replace","path":"/s","value":"y"}]"#)
        #expect(JSONPatch.apply(patch, to: before) == after)
        #expect(JSONPatch.diff(from: before, to: before).isEmpty)
        // Keys with / and ~ are escaped (RFC 6901).
        let escaped = JSONPatch.diff(from: ["a/b": 1], to: ["a/b": 2, "~": 3])
        #expect(JSON.array(escaped).canonicalString == #"[{"op":"replace","path":"/a~1b","value":2},{"op":"add","path":"/~0","value":3}]"#)
        // The root replaced.
        #expect(JSONPatch.diff(from: 1, to: "x") == [["op": "replace", "path": "", "value": "x"]])
        // JSON equality: 1 and 1.0 are the same; "é" and "e\u{301}" are not.
        #expect(JSONPatch.diff(from: ["n": 1], to: ["n": 1.0]).isEmpty)
        #expect(JSONPatch.diff(from: ["s": "\u{E9}"], to: ["s": "e\u{301}"]).count == 1)
    }

    @Test("applying the diff of two random documents gives the second, for 2 000 pairs")
    func roundTrip() {
        var random = SplitMix64(seed: 2026)
        for _ in 0..<2_000 {
            let a = random.document(depth: 3)
            let b = random.next() % 4 == 0 ? random.document(depth: 3) : random.mutated(a, depth: 3)
            let patch = JSONPatch.diff(from: a, to: b)
            #expect(JSONPatch.apply(patch, to: a) == b, "\(a.canonicalString) → \(b.canonicalString): \(JSON.array(patch).canonicalString)")
        }
    }
}

/// JSON documents from the tests' seedable generator.
extension SplitMix64 {
    mutating func scalar() -> JSON {
        switch next() % 5 {
        case 0: return .null
        case 1: return .bool(next() % 2 == 0)
        case 2: return JSON(Int(next() % 7))
        case 3: return .string(["a", "b", "/", "~", "é"][Int(next() % 5)])
        default: return .number(Double(next() % 5) / 2)
        }
    }
    mutating func document(depth: Int) -> JSON {
        guard depth > 0, next() % 3 != 0 else { return scalar() }
        if next() % 2 == 0 {
            return .array((0..<Int(next() % 4)).map { _ in document(depth: depth - 1) })
        }
        var members: [JSONKey: JSON] = [:]
        for _ in 0..<Int(next() % 4) { members[JSONKey(["k", "a/b", "~x", "z"][Int(next() % 4)])] = document(depth: depth - 1) }
        return .object(members)
    }
    mutating func mutated(_ value: JSON, depth: Int) -> JSON {
        switch value {
        case .object(var members):
            if let key = members.keys.sorted().first, next() % 2 == 0 { members[key] = mutated(members[key] ?? .null, depth: depth - 1) }
            if next() % 3 == 0 { members[JSONKey("n\(next() % 3)")] = document(depth: depth - 1) }
            if next() % 3 == 0, let key = members.keys.sorted().last { members[key] = nil }
            return .object(members)
        case .array(var items):
            if !items.isEmpty, next() % 2 == 0 { items[0] = mutated(items[0], depth: depth - 1) }
            if next() % 3 == 0 { items.append(document(depth: depth - 1)) }
            if next() % 3 == 0, !items.isEmpty { items.removeLast() }
            return .array(items)
        default:
            return next() % 2 == 0 ? value : document(depth: depth)
        }
    }
}
