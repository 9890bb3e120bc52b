@testable import StoreHub
import SyncCore
import Testing

/// `HubProtocol.decide` with bytes alone: no socket, no sequencer, no event loop.
@Suite("HubProtocol: a pure decision over a frame's bytes and the connection's state")
struct HubProtocolTests {
    let facts = HubFacts(appName: "json", fingerprint: "json@1", history: "00000000000000aa")
    let attached = ConnectionState.attached(replica: 3, name: "a", session: "s")

    func decide(_ text: String, _ state: ConnectionState = .greeting) -> HubDecision {
        let bytes = Array(text.utf8)
        return bytes.withUnsafeBytes { HubProtocol.decide($0, state: state, facts: facts) }
    }

    func code(_ decision: HubDecision) -> String? {
        if case .fail(let error) = decision { return error.rawCode }
        return nil
    }

    @Test("status and sync are answered before and after hello; a sync id is kept")
    func barriers() {
        #expect(decide(#"{"type":"status"}"#) == .status)
        #expect(decide(#"{"type":"status","extra":[1]}"#, attached) == .status)
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
                == .hello(HelloRequest(name: "w", resume: nil, session: "s1")))
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
                == .dispatch(id: .number(1), action: ["type": "set", "path": "/a", "value": 1]))
        let id = String(repeating: "i", count: 129)
        guard case .reject(let rejected, let error) = decide(#"{"type":"dispatch","id":"\#(id)","action":{}}"#, attached) else {
            Issue.record("a 129-byte id must be rejected on its own")
            return
        }
        #expect(rejected == .string(id) && error.code == .badAction)
        #expect(decide(#"{"type":"dispatch","id":"\#(String(repeating: "i", count: 128))","action":1}"#, attached)
                == .dispatch(id: .string(String(repeating: "i", count: 128)), action: 1))
        #expect(code(decide(#"{"type":"dispatch","id":9007199254740992,"action":{}}"#, attached)) == "bad-frame")
        #expect(code(decide(#"{"type":"dispatch","id":1}"#, attached)) == "bad-frame")
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
