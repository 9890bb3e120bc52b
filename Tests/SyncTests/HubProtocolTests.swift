@testable import StoreHub
import SyncCore
import Testing

/// `HubProtocol.decide` with bytes alone: no socket, no sequencer, no event loop.
@Suite("HubProtocol: a pure decision over a frame's bytes and whether the connection is attached")
struct HubProtocolTests {
    let facts = HubFacts(appName: "json", fingerprint: "json@1", history: "00000000000000aa")
    /// Attached as replica 3.
    let attached: Int? = 3

    func decide(_ text: String, _ replica: Int? = nil) -> HubDecision {
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { HubProtocol.decide($0, attachedAs: replica, facts: facts) }
    }

    func code(_ decision: HubDecision) -> String? {
        if case .fail(let error) = decision { return error.rawCode }
        return nil
    }

    @Test("status and sync are answered before and after hello; a sync id is kept")
    func barriers() {
        #expect(decide(#"{"type":"status"}"#) == .status(checked: nil))
        #expect(decide(#"{"type":"status","extra":[1]}"#, attached) == .status(checked: nil))
        #expect(decide(#"{"type":"status","checked":null}"#, attached) == .status(checked: nil))
        #expect(decide(#"{"type":"status","checked":{"seq":7,"agreed":true,"divergences":2,"x":0}}"#, attached)
                == .status(checked: DigestCheck(seq: 7, agreed: true, divergences: 2)))
        #expect(decide(#"{"type":"status","checked":{"seq":0,"agreed":false}}"#)
                == .status(checked: DigestCheck(seq: 0, agreed: false)))
        for malformed in [#"[1]"#, #"{"seq":-1,"agreed":true}"#, #"{"seq":1.5,"agreed":true}"#, #"{"seq":1,"agreed":"yes"}"#,
                          #"{"agreed":true}"#, #"{"seq":1,"agreed":true,"divergences":-1}"#, #"{"seq":1e300,"agreed":true}"#] {
            #expect(code(decide(#"{"type":"status","checked":"# + malformed + "}", attached)) == "bad-frame", "\(malformed)")
        }
        #expect(decide(#"{"type":"sync"}"#) == .sync(id: nil))
        #expect(decide(#"{"type":"sync","id":null}"#) == .sync(id: nil))
        #expect(decide(#"{"type":"sync","id":"b1"}"#, attached) == .sync(id: .string("b1")))
        #expect(decide(#"{"type":"sync","id":4.0}"#) == .sync(id: .number(4)))
        #expect(code(decide(#"{"type":"sync","id":1.5}"#)) == "bad-frame")
    }

    @Test("a valid hello attaches; resume is kept only for this hub's history")
    func hello() {
        #expect(decide(#"{"type":"hello","protocol":1,"app":"json"}"#) == .hello(HelloRequest(name: "", resume: nil, session: nil)))
        #expect(decide(#"{"type":"hello","protocol":1.0,"app":"json","fingerprint":"json@1","name":"w","session":"s1"}"#)
                == .hello(HelloRequest(name: "w", resume: nil, session: "s1", fingerprint: "json@1")))
        #expect(decide(#"{"type":"hello","protocol":1,"app":"json","resume":{"history":"00000000000000aa","seq":7}}"#)
                == .hello(HelloRequest(name: "", resume: ResumePoint(history: "00000000000000aa", seq: 7), session: nil)))
        // Another history: a full welcome, as if no resume had been asked.
        #expect(decide(#"{"type":"hello","protocol":1,"app":"json","resume":{"history":"0123456789abcdef","seq":7}}"#)
                == .hello(HelloRequest(name: "", resume: nil, session: nil)))
    }

    @Test("hello refusals, in order: member types, already attached, protocol, app, fingerprint, bounds")
    func helloRefusals() {
        #expect(code(decide(#"{"type":"hello","protocol":"1","app":"json"}"#)) == "bad-frame")
        #expect(code(decide(#"{"type":"hello","protocol":1}"#)) == "bad-frame")
        #expect(code(decide(#"{"type":"hello","protocol":1,"app":"json","name":7}"#)) == "bad-frame")
        #expect(code(decide(#"{"type":"hello","protocol":1,"app":"json","session":7}"#)) == "bad-frame")
        #expect(code(decide(#"{"type":"hello","protocol":1,"app":"json","resume":{"seq":1}}"#)) == "bad-frame")
        #expect(code(decide(#"{"type":"hello","protocol":1,"app":"json"}"#, attached)) == "already-attached")
        #expect(code(decide(#"{"type":"hello","protocol":2,"app":"counter"}"#)) == "protocol-mismatch")
        #expect(code(decide(#"{"type":"hello","protocol":1,"app":"counter"}"#)) == "app-mismatch")
        #expect(code(decide(#"{"type":"hello","protocol":1,"app":"json","fingerprint":"json@2"}"#)) == "app-mismatch")
        // Escapes are undone before comparing: this is the app name "json".
        #expect(code(decide("{\"type\":\"hello\",\"protocol\":1,\"app\":\"js\\u006fn\"}")) == nil)
        let long = String(repeating: "n", count: 257)
        #expect(code(decide(#"{"type":"hello","protocol":1,"app":"json","name":"\#(long)"}"#)) == "bad-hello")
        #expect(code(decide(#"{"type":"hello","protocol":1,"app":"json","session":""}"#)) == "bad-hello")
        let session = String(repeating: "s", count: 129)
        #expect(code(decide(#"{"type":"hello","protocol":1,"app":"json","session":"\#(session)"}"#)) == "bad-hello")
    }

    @Test("dispatch: only when attached; a long string id is refused alone")
    func dispatch() {
        #expect(code(decide(#"{"type":"dispatch","id":1,"action":{"type":"set","path":"/a","value":1}}"#)) == "not-attached")
        #expect(decide(#"{"type":"dispatch","id":1,"action":{"type":"set","path":"/a","value":1}}"#, attached)
                == .dispatch(id: .number(1), action: WireAction(["type": "set", "path": "/a", "value": 1])))
        let id = String(repeating: "i", count: 129)
        guard case .reject(let rejected, let error) = decide(#"{"type":"dispatch","id":"\#(id)","action":{}}"#, attached) else {
            Issue.record("a 129-byte id must be rejected on its own")
            return
        }
        #expect(rejected == .string(id) && error.code == .badAction)
        #expect(decide(#"{"type":"dispatch","id":"\#(String(repeating: "i", count: 128))","action":1}"#, attached)
                == .dispatch(id: .string(String(repeating: "i", count: 128)), action: WireAction(1)))
        #expect(code(decide(#"{"type":"dispatch","id":9007199254740992,"action":{}}"#, attached)) == "bad-frame")
        #expect(code(decide(#"{"type":"dispatch","id":1}"#, attached)) == "bad-frame")
    }

    @Test("a canonical dispatch keeps its action's bytes, and decides exactly as the general path does")
    func canonicalDispatch() {
        let frames = [
            #"{"action":{"path":"/counters/1","type":"increment"},"id":7,"type":"dispatch"}"#,
            #"{"action":{"path":"/a","type":"set","value":[1,"x\"y",{"b":null,"c":true}]},"id":"a-1","type":"dispatch"}"#,
            #"{"action":-12,"id":-3,"type":"dispatch"}"#,
            #"{"action":{},"id":0,"type":"dispatch"}"#,
            #"{"action":"\\","id":"","type":"dispatch"}"#,
        ]
        for frame in frames {
            let bytes = Array(frame.utf8)
            let found = bytes.withUnsafeBytes { ClientMessage.canonicalDispatch($0) }
            #expect(found != nil, "\(frame) is canonical")
            guard case .dispatch(let id, let action) = decide(frame, attached),
                  let json = try? JSON(parsing: bytes), case .dispatch(let generalID, let generalAction) = try? ClientMessage(json: json) else {
                Issue.record("\(frame) must decide as a dispatch")
                continue
            }
            #expect(id == generalID && action == WireAction(generalAction), "\(frame)")
            #expect(action.withCanonicalBytes { Array($0) } == generalAction.canonicalBytes, "\(frame): the bytes are kept")
        }
        // Not canonical, or not of this shape: the general path (same decision, parsed).
        let others = [
            #"{"type":"dispatch","id":1,"action":{"path":"/a","type":"remove"}}"#,     // member order
            #"{"action":{"type":"remove","path":"/a"},"id":1,"type":"dispatch"}"#,     // the action's order
            #"{"action":{"path":"/a","type":"remove"},"id":1.0,"type":"dispatch"}"#,   // 1.0
            #"{"action":{"path":"/a","type":"remove"},"id":01,"type":"dispatch"}"#,    // not JSON
            #"{"action":1.5,"id":1,"type":"dispatch"}"#,                               // a fraction
            #"{"action":"é","id":1,"type":"dispatch"}"#,                               // non-ASCII
            #"{"action":1,"extra":2,"id":1,"type":"dispatch"}"#,                       // another member
            #"{"action":1 ,"id":1,"type":"dispatch"}"#,                                // whitespace
            #"{"action":-0,"id":1,"type":"dispatch"}"#,                                // -0
            #"{"action":{"a":1,"a":2},"id":1,"type":"dispatch"}"#,                     // a duplicate
        ]
        for frame in others {
            let found = Array(frame.utf8).withUnsafeBytes { ClientMessage.canonicalDispatch($0) }
            #expect(found == nil, "\(frame) is not for the fast path")
        }
        #expect(code(decide(#"{"action":{"a":1,"a":2},"id":1,"type":"dispatch"}"#, attached)) == "bad-json")
        // Not attached: refused as before, however canonical.
        #expect(code(decide(frames[0])) == "not-attached")
    }

    @Test("what is not a client message: bad-json or unknown-type")
    func malformed() {
        #expect(code(decide("{")) == "bad-json")
        #expect(code(decide("[1]")) == "bad-json")
        #expect(code(decide(#"{"type":5}"#)) == "bad-json")
        #expect(code(decide(#"{"type":"status","type":"status"}"#)) == "bad-json")
        #expect(code(decide(#"{"type":"frobnicate"}"#)) == "unknown-type")
        #expect(code(decide(#"{"type":"Status"}"#)) == "unknown-type")
    }
}
