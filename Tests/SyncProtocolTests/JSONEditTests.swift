import Testing
@testable import SyncProtocol

/// Parses a pointer written in a test (tests only use valid pointers here).
private func ptr(_ text: String) throws -> JSONPointer {
    try JSONPointer(text)
}

/// Applies `edit` to a copy of `document` and returns the result.
private func applying(_ edit: JSONEdit, to document: JSON) throws -> JSON {
    var copy = document
    try edit.apply(to: &copy)
    return copy
}

/// Checks that `edit` is rejected on `document`, that the message mentions `fragment`, and that
/// the document is left exactly unchanged.
private func expectRejected(
    _ edit: JSONEdit, on document: JSON, mentioning fragments: String...,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    var copy = document
    let error = #expect(throws: JSONEditError.self, sourceLocation: sourceLocation) {
        try edit.apply(to: &copy)
    }
    #expect(error?.kind == .rejected, sourceLocation: sourceLocation)
    for fragment in fragments {
        #expect(error?.message.contains(fragment) == true,
                "message \"\(error?.message ?? "")\" lacks \"\(fragment)\"", sourceLocation: sourceLocation)
    }
    #expect(copy == document, "document changed by a rejected edit", sourceLocation: sourceLocation)
}

/// Checks that decoding `action` fails with `.badAction` and a message mentioning `fragment`.
private func expectBadAction(
    _ action: JSON, mentioning fragment: String, sourceLocation: SourceLocation = #_sourceLocation
) {
    let error = #expect(throws: JSONEditError.self, sourceLocation: sourceLocation) {
        try JSONEdit(action: action)
    }
    #expect(error?.kind == .badAction, sourceLocation: sourceLocation)
    #expect(error?.message.contains(fragment) == true,
            "message \"\(error?.message ?? "")\" lacks \"\(fragment)\"", sourceLocation: sourceLocation)
}

@Suite("JSONEdit")
struct JSONEditTests {
    static let scalars: [JSON] = [nil, true, 1.5, "s"]

    // MARK: set

    @Test("set replaces, inserts and replaces the root")
    func setBasics() throws {
        let document: JSON = ["a": 1, "b": ["c": 2]]
        #expect(try applying(.set(ptr("/a"), "x"), to: document) == ["a": "x", "b": ["c": 2]])
        #expect(try applying(.set(ptr("/z"), nil), to: document) == ["a": 1, "b": ["c": 2], "z": nil])
        #expect(try applying(.set(ptr("/b/c"), [1, 2]), to: document) == ["a": 1, "b": ["c": [1, 2]]])
        #expect(try applying(.set(ptr("/b/d"), 3), to: document) == ["a": 1, "b": ["c": 2, "d": 3]])
        #expect(try applying(.set(.root, [1]), to: document) == [1])
        #expect(try applying(.set(.root, "s"), to: nil) == "s")
        #expect(try applying(.set(ptr("/"), 0), to: [:]) == ["": 0])
        #expect(try applying(.set(ptr("/a~1b"), 1), to: [:]) == ["a/b": 1])
    }

    @Test("set creates missing intermediate objects")
    func setCreatesIntermediates() throws {
        #expect(try applying(.set(ptr("/a/b/c"), 1), to: [:]) == ["a": ["b": ["c": 1]]])
        #expect(try applying(.set(ptr("/a/b/c"), 1), to: ["a": ["x": 0]]) == ["a": ["x": 0, "b": ["c": 1]]])
        // Below a created object every token is a member name, even digits and "-".
        #expect(try applying(.set(ptr("/a/0/-"), 1), to: [:]) == ["a": ["0": ["-": 1]]])
        #expect(try applying(.set(ptr("/arr/0/k"), 1), to: ["arr": [[:]]]) == ["arr": [["k": 1]]])
    }

    @Test("set on arrays: replace, append with - or count")
    func setArrays() throws {
        let document: JSON = ["a": [1, 2, 3]]
        #expect(try applying(.set(ptr("/a/0"), "x"), to: document) == ["a": ["x", 2, 3]])
        #expect(try applying(.set(ptr("/a/2"), "x"), to: document) == ["a": [1, 2, "x"]])
        #expect(try applying(.set(ptr("/a/3"), "x"), to: document) == ["a": [1, 2, 3, "x"]])
        #expect(try applying(.set(ptr("/a/-"), "x"), to: document) == ["a": [1, 2, 3, "x"]])
        #expect(try applying(.set(ptr("/0"), "x"), to: []) == ["x"])
        #expect(try applying(.set(ptr("/-"), "x"), to: []) == ["x"])
        #expect(try applying(.set(ptr("/1/k"), "x"), to: [0, [:]]) == [0, ["k": "x"]])
    }

    @Test("set rejections leave the document unchanged")
    func setRejections() throws {
        let document: JSON = ["a": [1, 2, 3], "s": "str", "n": nil, "x": 5, "t": true, "o": ["k": "v"]]
        expectRejected(.set(try ptr("/a/4"), 0), on: document, mentioning: "set /a/4", "out of range", "3 elements")
        expectRejected(.set(try ptr("/a/99999999999999999999"), 0), on: document, mentioning: "not an array index")
        expectRejected(.set(try ptr("/a/01"), 0), on: document, mentioning: "\"01\" is not an array index")
        expectRejected(.set(try ptr("/a/-1"), 0), on: document, mentioning: "not an array index")
        expectRejected(.set(try ptr("/a/x"), 0), on: document, mentioning: "not an array index")
        expectRejected(.set(try ptr("/a/"), 0), on: document, mentioning: "not an array index")
        // Descending through a missing array element.
        expectRejected(.set(try ptr("/a/3/k"), 0), on: document, mentioning: "no element at /a/3")
        expectRejected(.set(try ptr("/a/-/k"), 0), on: document, mentioning: "no element at /a/-")
        expectRejected(.set(try ptr("/a/7/k"), 0), on: document, mentioning: "no element at /a/7")
        // Descending through scalars.
        expectRejected(.set(try ptr("/s/k"), 0), on: document, mentioning: "set /s/k", "/s", "string")
        expectRejected(.set(try ptr("/n/k"), 0), on: document, mentioning: "/n", "null")
        expectRejected(.set(try ptr("/x/0"), 0), on: document, mentioning: "/x", "number")
        expectRejected(.set(try ptr("/t/k/l"), 0), on: document, mentioning: "/t", "boolean")
        expectRejected(.set(try ptr("/o/k/deep"), 0), on: document, mentioning: "/o/k", "string")
        expectRejected(.set(try ptr("/a/0/k"), 0), on: document, mentioning: "/a/0", "number")
        for scalar in Self.scalars {
            expectRejected(.set(try ptr("/k"), 0), on: scalar, mentioning: "cannot descend")
        }
    }

    // MARK: remove

    @Test("remove deletes members and shifts array elements")
    func removeBasics() throws {
        let document: JSON = ["a": 1, "b": ["c": 2, "d": 3], "arr": [0, 1, 2, 3]]
        #expect(try applying(.remove(ptr("/a")), to: document) == ["b": ["c": 2, "d": 3], "arr": [0, 1, 2, 3]])
        #expect(try applying(.remove(ptr("/b/c")), to: document) == ["a": 1, "b": ["d": 3], "arr": [0, 1, 2, 3]])
        #expect(try applying(.remove(ptr("/arr/1")), to: document) == ["a": 1, "b": ["c": 2, "d": 3], "arr": [0, 2, 3]])
        #expect(try applying(.remove(ptr("/arr/3")), to: document) == ["a": 1, "b": ["c": 2, "d": 3], "arr": [0, 1, 2]])
        #expect(try applying(.remove(ptr("/arr/0")), to: ["arr": [[1], 2]]) == ["arr": [2]])
        #expect(try applying(.remove(ptr("/0/k")), to: [["k": 1, "j": 2]]) == [["j": 2]])
        #expect(try applying(.remove(ptr("/n")), to: ["n": nil]) == [:])
    }

    @Test("remove of the root resets the document to {}")
    func removeRoot() throws {
        #expect(try applying(.remove(.root), to: ["a": 1]) == [:])
        #expect(try applying(.remove(.root), to: [1, 2]) == [:])
        #expect(try applying(.remove(.root), to: "s") == [:])
        #expect(try applying(.remove(.root), to: nil) == [:])
    }

    @Test("remove rejections leave the document unchanged")
    func removeRejections() throws {
        let document: JSON = ["a": ["x": 1], "arr": [0, 1], "s": "str"]
        expectRejected(.remove(try ptr("/a/b")), on: document, mentioning: "remove /a/b", "no value at /a/b")
        expectRejected(.remove(try ptr("/z")), on: document, mentioning: "no value at /z")
        expectRejected(.remove(try ptr("/z/y/x")), on: document, mentioning: "no value at /z")
        expectRejected(.remove(try ptr("/arr/2")), on: document, mentioning: "no value at /arr/2")
        expectRejected(.remove(try ptr("/arr/-")), on: document, mentioning: "no value at /arr/-")
        expectRejected(.remove(try ptr("/arr/01")), on: document, mentioning: "no value at /arr/01")
        expectRejected(.remove(try ptr("/arr/5/k")), on: document, mentioning: "no value at /arr/5")
        expectRejected(.remove(try ptr("/s/k")), on: document, mentioning: "no value at /s/k", "string")
        expectRejected(.remove(try ptr("/a/x/y")), on: document, mentioning: "no value at /a/x/y", "number")
        expectRejected(.remove(try ptr("/k")), on: "s", mentioning: "no value at /k")
        expectRejected(.remove(try ptr("/0")), on: [], mentioning: "no value at /0")
    }

    // MARK: merge

    @Test("merge patches objects in place")
    func mergeBasics() throws {
        let document: JSON = ["a": ["b": 1, "c": 2], "d": 3]
        #expect(try applying(.merge(ptr("/a"), ["b": nil, "e": ["f": 4]]), to: document)
            == ["a": ["c": 2, "e": ["f": 4]], "d": 3])
        #expect(try applying(.merge(.root, ["d": nil, "g": 5]), to: document) == ["a": ["b": 1, "c": 2], "g": 5])
        #expect(try applying(.merge(ptr("/d"), ["x": 1]), to: document) == ["a": ["b": 1, "c": 2], "d": ["x": 1]])
        #expect(try applying(.merge(ptr("/arr/0"), ["x": 1]), to: ["arr": [["y": 2]]]) == ["arr": [["x": 1, "y": 2]]])
    }

    @Test("merge at a missing path starts from null and creates intermediates")
    func mergeMissing() throws {
        #expect(try applying(.merge(ptr("/a/b"), ["x": nil, "y": 1, "z": ["w": nil]]), to: [:])
            == ["a": ["b": ["y": 1, "z": [:]]]])
        #expect(try applying(.merge(ptr("/arr/-"), ["x": 1, "n": nil]), to: ["arr": []]) == ["arr": [["x": 1]]])
        #expect(try applying(.merge(ptr("/a"), 7), to: [:]) == ["a": 7])
    }

    @Test("merge with a non-object patch replaces the target")
    func mergeNonObject() throws {
        let document: JSON = ["a": ["b": 1]]
        #expect(try applying(.merge(ptr("/a"), [1, 2]), to: document) == ["a": [1, 2]])
        #expect(try applying(.merge(ptr("/a"), nil), to: document) == ["a": nil])
        #expect(try applying(.merge(ptr("/a"), "s"), to: document) == ["a": "s"])
        #expect(try applying(.merge(.root, 3), to: document) == 3)
    }

    @Test("merge rejections leave the document unchanged")
    func mergeRejections() throws {
        let document: JSON = ["arr": [1], "s": "str"]
        expectRejected(.merge(try ptr("/s/k"), ["x": 1]), on: document, mentioning: "merge /s/k", "string")
        expectRejected(.merge(try ptr("/arr/5"), ["x": 1]), on: document, mentioning: "out of range")
        expectRejected(.merge(try ptr("/arr/1/k"), ["x": 1]), on: document, mentioning: "no element at /arr/1")
        expectRejected(.merge(try ptr("/arr/x"), ["x": 1]), on: document, mentioning: "not an array index")
    }

    /// RFC 7386 Appendix A: (original, patch, result).
    static let rfc7386Examples: [(JSON, JSON, JSON)] = [
        (["a": "b"], ["a": "c"], ["a": "c"]),
        (["a": "b"], ["b": "c"], ["a": "b", "b": "c"]),
        (["a": "b"], ["a": nil], [:]),
        (["a": "b", "b": "c"], ["a": nil], ["b": "c"]),
        (["a": ["b"]], ["a": "c"], ["a": "c"]),
        (["a": "c"], ["a": ["b"]], ["a": ["b"]]),
        (["a": ["b": "c"]], ["a": ["b": "d", "c": nil]], ["a": ["b": "d"]]),
        (["a": [["b": "c"]]], ["a": [1]], ["a": [1]]),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        (["a": "b"], ["c"], ["c"]),
        (["a": "foo"], nil, nil),
        (["a": "foo"], "bar", "bar"),
        (["e": nil], ["a": 1], ["e": nil, "a": 1]),
        ([1, 2], ["a": "b", "c": nil], ["a": "b"]),
        ([:], ["a": ["bb": ["ccc": nil]]], ["a": ["bb": [:]]]),
    ]

    @Test("RFC 7386 Appendix A examples", arguments: rfc7386Examples)
    func rfc7386(original: JSON, patch: JSON, result: JSON) throws {
        #expect(original.merging(patch: patch) == result)
        #expect(try applying(.merge(.root, patch), to: original) == result)
        #expect(try applying(.merge(ptr("/t"), patch), to: ["t": original]) == ["t": result])
    }

    // MARK: increment

    @Test("increment adds, defaulting from 0 at a missing path")
    func incrementBasics() throws {
        #expect(try applying(.increment(ptr("/n"), by: 2), to: ["n": 1]) == ["n": 3])
        #expect(try applying(.increment(ptr("/n"), by: -0.5), to: ["n": 1]) == ["n": 0.5])
        #expect(try applying(.increment(ptr("/n"), by: 2), to: [:]) == ["n": 2])
        #expect(try applying(.increment(ptr("/a/b/n"), by: 1), to: [:]) == ["a": ["b": ["n": 1]]])
        #expect(try applying(.increment(ptr("/arr/1"), by: 1), to: ["arr": [1, 2]]) == ["arr": [1, 3]])
        #expect(try applying(.increment(ptr("/arr/-"), by: 4), to: ["arr": [1]]) == ["arr": [1, 4]])
        #expect(try applying(.increment(.root, by: 1), to: 41) == 42)
    }

    @Test("increment keeps integers exact near 2^53")
    func incrementExactIntegers() throws {
        let maxSafe = JSON.maxExactInteger - 1  // 2^53 - 1
        let incremented = try applying(.increment(ptr("/n"), by: 1), to: ["n": .number(maxSafe)])
        #expect(incremented == ["n": .number(JSON.maxExactInteger)])
        #expect(incremented["n"]?.intValue == 9_007_199_254_740_992)
        let negative = try applying(.increment(ptr("/n"), by: -1), to: ["n": .number(-maxSafe)])
        #expect(negative["n"]?.intValue == -9_007_199_254_740_992)
        let big = try applying(.increment(ptr("/n"), by: 9_007_199_254_740_990), to: [:])
        #expect(big["n"]?.intValue == 9_007_199_254_740_990)
        let again = try applying(.increment(ptr("/n"), by: 1), to: big)
        #expect(again["n"]?.intValue == 9_007_199_254_740_991)
        // The exact value survives the wire form of the action.
        let action = JSONEdit.increment(try ptr("/n"), by: 9_007_199_254_740_991).action
        #expect(action["by"]?.intValue == 9_007_199_254_740_991)
        #expect(try JSONEdit(action: action) == .increment(try ptr("/n"), by: 9_007_199_254_740_991))
    }

    @Test("increment rejections leave the document unchanged")
    func incrementRejections() throws {
        let document: JSON = ["s": "str", "b": false, "n": nil, "o": [:], "a": [1], "big": 1e308, "x": ["y": [:]]]
        expectRejected(.increment(try ptr("/s"), by: 1), on: document,
                       mentioning: "increment /s: target is a string, not a number")
        expectRejected(.increment(try ptr("/b"), by: 1), on: document, mentioning: "target is a boolean, not a number")
        expectRejected(.increment(try ptr("/n"), by: 1), on: document, mentioning: "target is null, not a number")
        expectRejected(.increment(try ptr("/o"), by: 1), on: document, mentioning: "target is an object, not a number")
        expectRejected(.increment(try ptr("/a"), by: 1), on: document, mentioning: "target is an array, not a number")
        expectRejected(.increment(try ptr("/big"), by: 1e308), on: document, mentioning: "increment /big", "not finite")
        expectRejected(.increment(try ptr("/s/k"), by: 1), on: document, mentioning: "string")
        expectRejected(.increment(try ptr("/a/2"), by: 1), on: document, mentioning: "out of range")
        expectRejected(.increment(.root, by: 1), on: document, mentioning: "target is an object")
        // A non-finite result at a missing path must not leave created intermediates behind.
        expectRejected(.increment(try ptr("/x/y/z/w"), by: .infinity), on: document, mentioning: "not finite")
        expectRejected(.increment(try ptr("/a/-"), by: .nan), on: document, mentioning: "not finite")
        expectRejected(.increment(try ptr("/new"), by: -.infinity), on: document, mentioning: "not finite")
    }

    // MARK: append

    @Test("append extends arrays and creates missing ones")
    func appendBasics() throws {
        #expect(try applying(.append(ptr("/a"), 3), to: ["a": [1, 2]]) == ["a": [1, 2, 3]])
        #expect(try applying(.append(ptr("/a"), [3]), to: ["a": []]) == ["a": [[3]]])
        #expect(try applying(.append(ptr("/a"), nil), to: [:]) == ["a": [nil]])
        #expect(try applying(.append(ptr("/x/y/a"), "v"), to: ["x": [:]]) == ["x": ["y": ["a": ["v"]]]])
        #expect(try applying(.append(ptr("/arr/0"), "v"), to: ["arr": [[]]]) == ["arr": [["v"]]])
        #expect(try applying(.append(ptr("/arr/-"), "v"), to: ["arr": []]) == ["arr": [["v"]]])
        #expect(try applying(.append(.root, 1), to: [0]) == [0, 1])
    }

    @Test("append rejections leave the document unchanged")
    func appendRejections() throws {
        let document: JSON = ["s": "str", "o": ["k": 1], "n": nil, "x": 1, "arr": [1]]
        expectRejected(.append(try ptr("/s"), 1), on: document, mentioning: "append /s: target is a string, not an array")
        expectRejected(.append(try ptr("/o"), 1), on: document, mentioning: "target is an object, not an array")
        expectRejected(.append(try ptr("/n"), 1), on: document, mentioning: "target is null, not an array")
        expectRejected(.append(try ptr("/x"), 1), on: document, mentioning: "target is a number, not an array")
        expectRejected(.append(try ptr("/arr/0"), 1), on: document, mentioning: "append /arr/0", "number")
        expectRejected(.append(try ptr("/arr/3"), 1), on: document, mentioning: "out of range")
        expectRejected(.append(try ptr("/x/y"), 1), on: document, mentioning: "cannot descend into /x")
        expectRejected(.append(.root, 1), on: document, mentioning: "target is an object, not an array")
    }

    @Test("a failed edit deep in a nested document changes nothing")
    func atomicityDeep() throws {
        let document: JSON = ["a": ["b": ["c": [1, ["d": "str"]]], "keep": [1, 2]], "z": 0]
        for edit in [
            JSONEdit.set(try ptr("/a/b/c/1/d/e"), 0),
            .remove(try ptr("/a/b/c/1/e")),
            .remove(try ptr("/a/b/c/2")),
            .merge(try ptr("/a/b/c/3"), ["k": 1]),
            .increment(try ptr("/a/b/c/1/d"), by: 1),
            .increment(try ptr("/a/b/c/1/new/deeper"), by: .infinity),
            .append(try ptr("/a/b/c/1/d"), 1),
            .append(try ptr("/a/b/c/1"), 1),
        ] {
            expectRejected(edit, on: document)
        }
    }

    // MARK: wire form

    static let wireExamples: [JSONEdit] = {
        let paths = ["", "/", "/a", "/a~1b/~0/0", "/arr/-", "/é"].compactMap { try? JSONPointer($0) }
        var edits: [JSONEdit] = []
        for path in paths {
            edits.append(.set(path, ["x": [1, "two", nil, true]]))
            edits.append(.set(path, nil))
            edits.append(.remove(path))
            edits.append(.merge(path, ["x": nil, "y": 2]))
            edits.append(.merge(path, 5))
            edits.append(.increment(path, by: 1))
            edits.append(.increment(path, by: -2.5))
            edits.append(.increment(path, by: 9_007_199_254_740_992))
            edits.append(.append(path, ["k": "v"]))
            edits.append(.append(path, nil))
        }
        return edits
    }()

    @Test("every edit round-trips through its wire form", arguments: wireExamples)
    func wireRoundTrip(edit: JSONEdit) throws {
        #expect(try JSONEdit(action: edit.action) == edit)
    }

    @Test("wire form members")
    func wireForm() throws {
        #expect(JSONEdit.set(try ptr("/a~1b"), 1).action == ["type": "set", "path": "/a~1b", "value": 1])
        #expect(JSONEdit.remove(.root).action == ["type": "remove", "path": ""])
        #expect(JSONEdit.merge(try ptr("/m"), ["k": nil]).action == ["type": "merge", "path": "/m", "value": ["k": nil]])
        #expect(JSONEdit.increment(try ptr("/n"), by: 1).action == ["type": "increment", "path": "/n", "by": 1])
        #expect(JSONEdit.append(try ptr("/l"), [1]).action == ["type": "append", "path": "/l", "value": [1]])
    }

    @Test("decoding: by defaults to 1, null values are values, unknown members are ignored")
    func decodeDefaults() throws {
        #expect(try JSONEdit(action: ["type": "increment", "path": "/n"]) == .increment(try ptr("/n"), by: 1))
        #expect(try JSONEdit(action: ["type": "increment", "path": "/n", "by": -3]) == .increment(try ptr("/n"), by: -3))
        #expect(try JSONEdit(action: ["type": "set", "path": "/a", "value": nil]) == .set(try ptr("/a"), nil))
        #expect(try JSONEdit(action: ["type": "merge", "path": "", "value": nil]) == .merge(.root, nil))
        #expect(try JSONEdit(action: ["type": "append", "path": "/l", "value": nil]) == .append(try ptr("/l"), nil))
        #expect(try JSONEdit(action: ["type": "remove", "path": "/a", "value": 1, "extra": [1], "by": "x"])
            == .remove(try ptr("/a")))
        #expect(try JSONEdit(action: ["type": "set", "path": "/a~0", "value": 1, "meta": ["k": "v"]])
            == .set(JSONPointer(tokens: ["a~"]), 1))
        var document: JSON = [:]
        try JSONEdit(action: ["type": "increment", "path": "/n"]).apply(to: &document)
        try JSONEdit(action: ["type": "increment", "path": "/n"]).apply(to: &document)
        #expect(document == ["n": 2])
    }

    @Test("decoding errors are badAction")
    func decodeErrors() {
        expectBadAction(nil, mentioning: "not an object")
        expectBadAction([1], mentioning: "array, not an object")
        expectBadAction("set", mentioning: "string, not an object")
        expectBadAction(["path": "/a", "value": 1], mentioning: "no \"type\"")
        expectBadAction(["type": 1, "path": "/a"], mentioning: "\"type\" is a number, not a string")
        expectBadAction(["type": nil, "path": "/a"], mentioning: "\"type\" is null")
        expectBadAction(["type": "frob", "path": "/a"], mentioning: "unknown action type \"frob\"")
        expectBadAction(["type": "SET", "path": "/a", "value": 1], mentioning: "unknown action type")
        expectBadAction(["type": "set", "value": 1], mentioning: "set action has no \"path\"")
        expectBadAction(["type": "remove"], mentioning: "remove action has no \"path\"")
        expectBadAction(["type": "set", "path": 1, "value": 1], mentioning: "\"path\" is a number, not a string")
        expectBadAction(["type": "set", "path": ["/a"], "value": 1], mentioning: "\"path\" is an array")
        expectBadAction(["type": "remove", "path": nil], mentioning: "\"path\" is null")
        expectBadAction(["type": "set", "path": "a", "value": 1], mentioning: "bad JSON pointer \"a\"")
        expectBadAction(["type": "remove", "path": "/a~2"], mentioning: "bad JSON pointer \"/a~2\"")
        expectBadAction(["type": "append", "path": "/a~", "value": 1], mentioning: "bad JSON pointer")
        expectBadAction(["type": "set", "path": "/a"], mentioning: "set action has no \"value\"")
        expectBadAction(["type": "merge", "path": "/a"], mentioning: "merge action has no \"value\"")
        expectBadAction(["type": "append", "path": "/a"], mentioning: "append action has no \"value\"")
        expectBadAction(["type": "increment", "path": "/a", "by": "2"], mentioning: "\"by\" is a string, not a number")
        expectBadAction(["type": "increment", "path": "/a", "by": nil], mentioning: "\"by\" is null, not a number")
        expectBadAction(["type": "increment", "path": "/a", "by": .number(.infinity)], mentioning: "not finite")
        expectBadAction(["type": "increment", "path": "/a", "by": .number(.nan)], mentioning: "not finite")
    }

    // MARK: performance / in-place mutation

    @Test("20,000 appends to a 100,000-element array are not quadratic")
    func manyAppends() throws {
        var document: JSON = ["items": .array((0..<100_000).map { JSON($0) }), "other": ["k": "v"]]
        let items = try ptr("/items")
        for index in 0..<20_000 {
            try JSONEdit.append(items, JSON(index)).apply(to: &document)
        }
        guard case .array(let elements) = document["items"] else {
            Issue.record("items is not an array")
            return
        }
        #expect(elements.count == 120_000)
        #expect(elements.last == 19_999)
        #expect(document.value(at: try ptr("/items/100000")) == 0)
    }

    @Test("20,000 edits deep inside large containers are not quadratic")
    func manyDeepEdits() throws {
        var members: [JSONKey: JSON] = [:]
        for index in 0..<100_000 { members[JSONKey("m\(index)")] = JSON(index) }
        var document: JSON = ["a": ["b": .object(members), "list": .array((0..<100_000).map { JSON($0) })]]
        let counter = try ptr("/a/b/m5")
        let tail = try ptr("/a/list/-")
        let middle = try ptr("/a/list/50000")
        let merge = try ptr("/a/b")
        for index in 0..<5_000 {
            try JSONEdit.increment(counter, by: 1).apply(to: &document)
            try JSONEdit.set(tail, JSON(index)).apply(to: &document)
            try JSONEdit.set(middle, JSON(index)).apply(to: &document)
            try JSONEdit.merge(merge, ["extra": JSON(index)]).apply(to: &document)
        }
        #expect(document.value(at: counter) == 5_005)
        #expect(document.value(at: middle) == 4_999)
        #expect(document.value(at: try ptr("/a/b/extra")) == 4_999)
        #expect(document.value(at: try ptr("/a/list/104999")) == 4_999)
    }

    @Test("edits reuse the array buffer (no copy-on-write)")
    func arrayBufferReused() throws {
        var list: [JSON] = [1, 2, 3]
        list.reserveCapacity(64)
        var document: JSON = ["a": ["b": [["list": .array(list)]]]]
        list = []
        func baseAddress() -> UnsafeRawPointer? {
            guard case .array(let elements) = document.value(at: JSONPointer(tokens: ["a", "b", "0", "list"])) else {
                return nil
            }
            return elements.withUnsafeBufferPointer { UnsafeRawPointer($0.baseAddress) }
        }
        let before = baseAddress()
        #expect(before != nil)
        let edits: [JSONEdit] = [
            .append(try ptr("/a/b/0/list"), 4),
            .set(try ptr("/a/b/0/list/0"), "x"),
            .set(try ptr("/a/b/0/list/-"), 5),
            .increment(try ptr("/a/b/0/list/1"), by: 1),
            .remove(try ptr("/a/b/0/list/4")),
            .merge(try ptr("/a/b/0/list/2"), 9),
        ]
        for edit in edits {
            try edit.apply(to: &document)
            // Checked after every edit: a copy and its release could hand the old address back.
            #expect(baseAddress() == before, "\(edit) copied the array")
        }
        #expect(document.value(at: try ptr("/a/b/0/list")) == ["x", 3, 9, 4])
    }

    @Test("edits reuse the dictionary storage (no copy-on-write)")
    func dictionaryStorageReused() throws {
        var inner: [JSONKey: JSON] = ["k": 1, "s": "v"]
        inner.reserveCapacity(64)
        var document: JSON = ["a": [["o": .object(inner)]]]
        inner = [:]
        func storage() -> UInt? {
            guard case .object(var members) = document.value(at: JSONPointer(tokens: ["a", "0", "o"])) else {
                return nil
            }
            return withUnsafeBytes(of: &members) { $0.load(as: UInt.self) }
        }
        let before = storage()
        #expect(before != nil)
        let edits: [JSONEdit] = [
            .set(try ptr("/a/0/o/k"), 2),
            .set(try ptr("/a/0/o/new"), 3),
            .increment(try ptr("/a/0/o/k"), by: 1),
            .remove(try ptr("/a/0/o/s")),
            .merge(try ptr("/a/0/o"), ["m": 1, "new": nil]),
            .append(try ptr("/a/0/o/list"), 1),
        ]
        for edit in edits {
            try edit.apply(to: &document)
            #expect(storage() == before, "\(edit) copied the dictionary")
        }
        #expect(document.value(at: try ptr("/a/0/o")) == ["k": 3, "m": 1, "list": [1]])
    }
}

@Suite("JSONEdit depth limit")
struct JSONEditDepthTests {
    static func path(_ levels: Int) throws -> JSONPointer {
        try JSONPointer(String(repeating: "/a", count: levels))
    }

    static func nested(_ levels: Int) -> JSON {
        var value: JSON = 1
        for _ in 0..<levels { value = ["a": value] }
        return value
    }

    @Test("edits may build a document up to 500 levels deep, and no deeper")
    func limit() throws {
        #expect(JSONEdit.maxDocumentDepth == 500)
        var document: JSON = [:]
        try JSONEdit.set(try Self.path(500), 1).apply(to: &document)
        #expect(document.nestingDepth == 500)

        var fresh: JSON = [:]
        let before = fresh
        #expect(throws: JSONEditError.self) { try JSONEdit.set(try Self.path(501), 1).apply(to: &fresh) }
        #expect(throws: JSONEditError.self) { try JSONEdit.set(try Self.path(10), Self.nested(491)).apply(to: &fresh) }
        #expect(throws: JSONEditError.self) { try JSONEdit.set(.root, Self.nested(501)).apply(to: &fresh) }
        #expect(throws: JSONEditError.self) { try JSONEdit.merge(try Self.path(400), Self.nested(101)).apply(to: &fresh) }
        #expect(throws: JSONEditError.self) { try JSONEdit.append(try Self.path(500), 1).apply(to: &fresh) }
        #expect(fresh == before)
        try JSONEdit.set(try Self.path(10), Self.nested(490)).apply(to: &fresh)
        #expect(fresh.nestingDepth == 500)
    }

    @Test("nesting depth counts containers, not scalars")
    func nestingDepth() throws {
        #expect(JSON(1).nestingDepth == 0)
        #expect(JSON.object([:]).nestingDepth == 1)
        #expect(try JSON(parsing: #"[1,{"a":[[]]},"x"]"#).nestingDepth == 4)
        #expect(Self.nested(2_000).nestingDepth == 2_000)
    }
}
