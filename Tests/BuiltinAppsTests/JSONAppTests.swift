import BuiltinApps
import SyncCore
import SyncLocks
import Synchronization
import Testing

@Suite("JSONApp")
struct JSONAppTests {
    let app = JSONApp()

    func json(_ text: String) throws -> JSON { try JSON(parsing: text) }
    func pointer(_ text: String) throws -> JSONPointer { try JSONPointer(text) }

    func actionJSON(_ command: AppCommand<JSON, JSONEdit>) -> JSON? {
        if case .action(let json) = command { return json }
        return nil
    }

    /// Applies `action` directly and returns the resulting document.
    func reduced(_ document: JSON, _ action: JSONEdit) throws -> JSON {
        var state = document
        try app.reduce(into: &state, action: action)
        return state
    }

    // MARK: - Through a store

    @Test("fingerprint and initial state {}")
    func initial() throws {
        #expect(JSONApp.fingerprint == "json@1")
        #expect(app.initialState == .object([:]))
        #expect(app.initialState.canonicalString == "{}")
        let store = Store(initialState: app.initialState, reducer: app)
        #expect(store.state == (try json("{}")))
    }

    @Test("a sequence of edits through a store, with the exact document after each")
    func storeSequence() throws {
        let refusals = Refusals()
        let store = Store(initialState: app.initialState, reducer: app, onError: { error, action in
            refusals.append(error, action)
        })
        store.dispatch(.set(try pointer("/user/name"), "Ada"))
        #expect(store.state == (try json(#"{"user":{"name":"Ada"}}"#)))
        store.dispatch(.set(try pointer("/user/langs"), ["swift"]))
        #expect(store.state == (try json(#"{"user":{"name":"Ada","langs":["swift"]}}"#)))
        store.dispatch(.append(try pointer("/user/langs"), "c"))
        #expect(store.state == (try json(#"{"user":{"name":"Ada","langs":["swift","c"]}}"#)))
        store.dispatch(.increment(try pointer("/user/visits"), by: 1))
        #expect(store.state == (try json(#"{"user":{"name":"Ada","langs":["swift","c"],"visits":1}}"#)))
        store.dispatch(.increment(try pointer("/user/visits"), by: 2.5))
        #expect(store.state == (try json(#"{"user":{"name":"Ada","langs":["swift","c"],"visits":3.5}}"#)))
        store.dispatch(.merge(try pointer("/user"), try json(#"{"name":null,"born":1815,"langs":{"x":true}}"#)))
        #expect(store.state == (try json(#"{"user":{"langs":{"x":true},"visits":3.5,"born":1815}}"#)))
        store.dispatch(.remove(try pointer("/user/langs")))
        #expect(store.state == (try json(#"{"user":{"visits":3.5,"born":1815}}"#)))
        store.dispatch(.remove(try pointer("/user/langs")))
        #expect(store.state == (try json(#"{"user":{"visits":3.5,"born":1815}}"#)))
        store.dispatch(.remove(.root))
        #expect(store.state == (try json("{}")))
        #expect(refusals.all == [
            .init(error: JSONEditError(kind: .rejected, message: "remove /user/langs: no value at /user/langs"),
                  action: .remove(try pointer("/user/langs"))),
        ])
    }

    @Test("rejections through a store leave the document unchanged and name the path")
    func storeRejections() throws {
        let start = try json(#"{"s":"text","o":{"k":1},"list":[1,2]}"#)
        let refusals = Refusals()
        let store = Store(initialState: start, reducer: app, onError: { error, action in
            refusals.append(error, action)
        })
        store.dispatch(.remove(try pointer("/missing/deep")))
        store.dispatch(.increment(try pointer("/s"), by: 1))
        store.dispatch(.append(try pointer("/o"), 3))
        #expect(store.state == start)
        #expect(refusals.all.map(\.error) == [
            JSONEditError(kind: .rejected, message: "remove /missing/deep: no value at /missing"),
            JSONEditError(kind: .rejected, message: "increment /s: target is a string, not a number"),
            JSONEditError(kind: .rejected, message: "append /o: target is an object, not an array"),
        ])
        #expect(refusals.all.map(\.action) == [
            .remove(try pointer("/missing/deep")), .increment(try pointer("/s"), by: 1), .append(try pointer("/o"), 3),
        ])
    }

    // MARK: - Directly

    @Test("set creates intermediate objects, replaces values and the root")
    func set() throws {
        #expect(try reduced(json("{}"), .set(pointer("/a/b/c"), 1)) == (try json(#"{"a":{"b":{"c":1}}}"#)))
        #expect(try reduced(json(#"{"a":{"b":2,"x":0}}"#), .set(pointer("/a/b"), ["y": nil]))
            == (try json(#"{"a":{"b":{"y":null},"x":0}}"#)))
        #expect(try reduced(json(#"{"l":[1,2]}"#), .set(pointer("/l/0"), "z")) == (try json(#"{"l":["z",2]}"#)))
        #expect(try reduced(json(#"{"l":[1,2]}"#), .set(pointer("/l/-"), 3)) == (try json(#"{"l":[1,2,3]}"#)))
        #expect(try reduced(json(#"{"l":[1,2]}"#), .set(pointer("/l/2"), 3)) == (try json(#"{"l":[1,2,3]}"#)))
        #expect(try reduced(json(#"{"a":1}"#), .set(.root, [1, 2])) == (try json("[1,2]")))
        #expect(try reduced(json(#"{"l":[{"m":{}}]}"#), .set(pointer("/l/0/m/a~1b"), true))
            == (try json(#"{"l":[{"m":{"a/b":true}}]}"#)))
    }

    @Test("remove deletes members and shifts array elements; the root resets to {}")
    func remove() throws {
        #expect(try reduced(json(#"{"a":{"b":1,"c":2}}"#), .remove(pointer("/a/b"))) == (try json(#"{"a":{"c":2}}"#)))
        #expect(try reduced(json(#"{"l":[1,2,3]}"#), .remove(pointer("/l/0"))) == (try json(#"{"l":[2,3]}"#)))
        #expect(try reduced(json(#"{"a":{"b":[1]}}"#), .remove(.root)) == (try json("{}")))
        #expect(try reduced(json(#"{"a":null}"#), .remove(pointer("/a"))) == (try json("{}")))
    }

    @Test("merge applies an RFC 7386 patch at a nested path")
    func merge() throws {
        #expect(try reduced(json(#"{"a":{"b":1,"c":{"d":2,"e":3}}}"#), .merge(pointer("/a"), json(#"{"b":null,"c":{"e":4,"f":[5]}}"#)))
            == (try json(#"{"a":{"c":{"d":2,"e":4,"f":[5]}}}"#)))
        #expect(try reduced(json("{}"), .merge(pointer("/x/y"), json(#"{"z":1,"w":null}"#)))
            == (try json(#"{"x":{"y":{"z":1}}}"#)))
        #expect(try reduced(json(#"{"a":5}"#), .merge(pointer("/a"), json(#"{"b":1}"#))) == (try json(#"{"a":{"b":1}}"#)))
        #expect(try reduced(json(#"{"a":{"b":1}}"#), .merge(pointer("/a"), "s")) == (try json(#"{"a":"s"}"#)))
    }

    @Test("increment adds to numbers, starting missing ones at 0")
    func increment() throws {
        #expect(try reduced(json("{}"), .increment(pointer("/n"), by: 1)) == (try json(#"{"n":1}"#)))
        #expect(try reduced(json(#"{"a":{"n":10}}"#), .increment(pointer("/a/n"), by: -12)) == (try json(#"{"a":{"n":-2}}"#)))
        #expect(try reduced(json(#"{"l":[0,1.5]}"#), .increment(pointer("/l/1"), by: 0.25)) == (try json(#"{"l":[0,1.75]}"#)))
        #expect(try reduced(json("{}"), .increment(pointer("/a/b"), by: 5)) == (try json(#"{"a":{"b":5}}"#)))
    }

    @Test("integers stay exact up to 2^53")
    func exactIntegers() throws {
        let result = try reduced(json(#"{"n":9007199254740990}"#), .increment(pointer("/n"), by: 2))
        #expect(result == (try json(#"{"n":9007199254740992}"#)))
        #expect(result["n"]?.intValue == 9_007_199_254_740_992)
        #expect(result.canonicalString == #"{"n":9007199254740992}"#)
        let down = try reduced(json(#"{"n":-9007199254740991}"#), .increment(pointer("/n"), by: -1))
        #expect(down["n"]?.intValue == -9_007_199_254_740_992)
        #expect(down.canonicalString == #"{"n":-9007199254740992}"#)
    }

    @Test("append adds to arrays, creating missing ones")
    func append() throws {
        var state = app.initialState
        try app.reduce(into: &state, action: .append(pointer("/list"), 3))
        #expect(state == (try json(#"{"list":[3]}"#)))
        try app.reduce(into: &state, action: .append(pointer("/list"), ["x": [1]]))
        #expect(state == (try json(#"{"list":[3,{"x":[1]}]}"#)))
        try app.reduce(into: &state, action: .append(pointer("/list/1/x"), nil))
        #expect(state == (try json(#"{"list":[3,{"x":[1,null]}]}"#)))
    }

    @Test("each rejection leaves the state unchanged and the message names the path", arguments: [
        ("remove", #"{"type":"remove","path":"/a/missing"}"#, "remove /a/missing: no value at /a/missing"),
        ("remove-parent", #"{"type":"remove","path":"/nope/x"}"#, "remove /nope/x: no value at /nope"),
        ("remove-index", #"{"type":"remove","path":"/list/5"}"#, "remove /list/5: no value at /list/5 (the array has 2 elements)"),
        ("increment-string", #"{"type":"increment","path":"/a/s","by":1}"#, "increment /a/s: target is a string, not a number"),
        ("increment-object", #"{"type":"increment","path":"/a","by":1}"#, "increment /a: target is an object, not a number"),
        ("append-object", #"{"type":"append","path":"/a","value":1}"#, "append /a: target is an object, not an array"),
        ("append-number", #"{"type":"append","path":"/a/n","value":1}"#, "append /a/n: target is a number, not an array"),
        ("through-scalar", #"{"type":"set","path":"/a/s/x","value":1}"#, "set /a/s/x: cannot descend into /a/s: it is a string, not an object or array"),
    ])
    func rejections(_ name: String, _ actionText: String, _ message: String) throws {
        let start = try json(#"{"a":{"s":"text","n":1},"list":[1,2]}"#)
        let action = try app.decodeAction(json(actionText))
        var state = start
        #expect(throws: JSONEditError(kind: .rejected, message: message)) {
            try app.reduce(into: &state, action: action)
        }
        #expect(state == start)
        #expect(app.describe(JSONEditError(kind: .rejected, message: message)) == message)
    }

    // MARK: - Codec

    @Test("actions round trip through their wire JSON", arguments: [
        #"{"type":"set","path":"/a/0/m~1n","value":{"x":[1,2]}}"#,
        #"{"type":"set","path":"","value":{}}"#,
        #"{"type":"remove","path":"/a"}"#,
        #"{"type":"merge","path":"/a","value":{"b":null}}"#,
        #"{"type":"increment","path":"/n","by":5}"#,
        #"{"type":"append","path":"/list","value":3}"#,
    ])
    func actionRoundTrip(_ text: String) throws {
        let wire = try json(text)
        let action = try app.decodeAction(wire)
        #expect(app.encodeAction(action) == wire)
        #expect(try app.decodeAction(app.encodeAction(action)) == action)
    }

    @Test("increment without by decodes as by 1 and encodes by explicitly")
    func incrementDefaultBy() throws {
        let action = try app.decodeAction(json(#"{"type":"increment","path":"/n"}"#))
        #expect(action == .increment(try pointer("/n"), by: 1))
        #expect(app.encodeAction(action) == (try json(#"{"type":"increment","path":"/n","by":1}"#)))
    }

    @Test("state codec is the document itself")
    func stateCodec() throws {
        let document = try json(#"{"a":[1,{"b":null}],"c":"d"}"#)
        #expect(app.encodeState(document) == document)
        #expect(try app.decodeState(document) == document)
        #expect(try app.decodeState(json("7")) == 7)
    }

    @Test("decodeAction maps malformed actions to AppCodingError", arguments: [
        (#"[1]"#, "action is an array, not an object"),
        (#"{"path":"/a"}"#, #"action has no "type""#),
        (#"{"type":3,"path":"/a"}"#, #"action "type" is a number, not a string"#),
        (#"{"type":"jump","path":"/a"}"#, #"unknown action type "jump""#),
        (#"{"type":"set","value":1}"#, #"set action has no "path""#),
        (#"{"type":"set","path":1,"value":1}"#, #"set action "path" is a number, not a string"#),
        (#"{"type":"set","path":"a","value":1}"#,
         #"set action "path": bad JSON pointer "a": a non-empty pointer must start with "/""#),
        (#"{"type":"set","path":"/a"}"#, #"set action has no "value""#),
        (#"{"type":"merge","path":"/a"}"#, #"merge action has no "value""#),
        (#"{"type":"append","path":"/a"}"#, #"append action has no "value""#),
        (#"{"type":"increment","path":"/a","by":"2"}"#, #"increment action "by" is a string, not a number"#),
        (#"{"type":"increment","path":"/a","by":null}"#, #"increment action "by" is null, not a number"#),
    ])
    func decodeActionErrors(_ text: String, _ message: String) throws {
        let wire = try json(text)
        #expect(throws: AppCodingError(message)) { try app.decodeAction(wire) }
        // The hub reports these as bad-action; the underlying edit error agrees.
        #expect(throws: JSONEditError(kind: .badAction, message: message)) { try JSONEdit(action: wire) }
    }

    // MARK: - Shorthand

    @Test("shorthand lines give exact wire actions", arguments: [
        ("set /a 1", #"{"type":"set","path":"/a","value":1}"#),
        ("set /name Ada", #"{"type":"set","path":"/name","value":"Ada"}"#),
        ("set /name Ada Lovelace", #"{"type":"set","path":"/name","value":"Ada Lovelace"}"#),
        (#"set /o {"x":[1,2]}"#, #"{"type":"set","path":"/o","value":{"x":[1,2]}}"#),
        (#"set /o {"x": [1, 2]}"#, #"{"type":"set","path":"/o","value":{"x":[1,2]}}"#),
        ("set /t true", #"{"type":"set","path":"/t","value":true}"#),
        ("set /z null", #"{"type":"set","path":"/z","value":null}"#),
        (#"set /q "5""#, #"{"type":"set","path":"/q","value":"5"}"#),
        (#"set "" {}"#, #"{"type":"set","path":"","value":{}}"#),
        ("remove /a", #"{"type":"remove","path":"/a"}"#),
        (#"remove """#, #"{"type":"remove","path":""}"#),
        (#"merge /a {"b":null}"#, #"{"type":"merge","path":"/a","value":{"b":null}}"#),
        ("increment /n", #"{"type":"increment","path":"/n","by":1}"#),
        ("increment /n 5", #"{"type":"increment","path":"/n","by":5}"#),
        ("increment /n -0.5", #"{"type":"increment","path":"/n","by":-0.5}"#),
        ("append /list 3", #"{"type":"append","path":"/list","value":3}"#),
        (#"{"type":"set","path":"/a","value":[true]}"#, #"{"type":"set","path":"/a","value":[true]}"#),
    ])
    func shorthand(_ line: String, _ expected: String) throws {
        let wire = try #require(actionJSON(try app.command(line)))
        #expect(wire == (try json(expected)))
        // Every one decodes as a valid edit.
        _ = try app.decodeAction(wire)
    }

    @Test("shorthand actions applied to a document")
    func shorthandApplied() throws {
        var state = app.initialState
        for line in [
            "set /a 1", "set /name Ada", #"set /o {"x":[1,2]}"#, "increment /n", "increment /n 5",
            "append /list 3", "append /list four", #"merge /o {"x":null,"y":"z"}"#, "remove /a",
        ] {
            let wire = try #require(actionJSON(try app.command(line)))
            try app.reduce(into: &state, action: app.decodeAction(wire))
        }
        #expect(state == (try json(#"{"name":"Ada","o":{"y":"z"},"n":6,"list":[3,"four"]}"#)))
        let reset = try #require(actionJSON(try app.command(#"set "" {}"#)))
        try app.reduce(into: &state, action: app.decodeAction(reset))
        #expect(state == (try json("{}")))
    }

    @Test("shorthand usage errors", arguments: [
        ("increment /n x", "usage: increment PATH [N], N a number"),
        (#"increment /n "5""#, "usage: increment PATH [N], N a number"),
        ("increment", "usage: increment PATH [N]"),
        ("set", "usage: set PATH VALUE"),
        ("set /a", "usage: set PATH VALUE"),
        ("merge /a", "usage: merge PATH VALUE"),
        ("append /list", "usage: append PATH VALUE"),
        ("append", "usage: append PATH VALUE"),
        ("remove", "usage: remove PATH"),
    ])
    func usageErrors(_ line: String, _ message: String) {
        #expect(throws: AppCodingError(message)) { try app.command(line) }
    }

    @Test("other lines must be JSON actions")
    func notJSON() throws {
        let error = try #require(throws: AppCodingError.self) { try app.command("delete /a") }
        #expect(error.message.hasPrefix("unknown command \""))
        #expect(throws: AppCodingError(#"an action is a JSON object with a string "type", e.g. {"type":"increment"}"#)) {
            try app.command(#"{"path":"/a"}"#)
        }
    }
}

/// Records a store's refusals.
private final class Refusals: Sendable {
    struct Entry: Equatable, Sendable {
        let error: JSONEditError
        let action: JSONEdit
    }
    private let entries = Locked<[Entry]>([])
    func append(_ error: JSONEditError, _ action: JSONEdit) {
        entries.withLock { $0.append(Entry(error: error, action: action)) }
    }
    var all: [Entry] { entries.withLock { $0 } }
}
