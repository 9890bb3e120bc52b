@testable import StoreSyncCommands
import SyncCore
import Testing

/// The inspector's HTTP request parser, access rule and Redux DevTools export, as pure
/// functions: bytes and values in, decisions out.
@Suite("Inspector: HTTP requests, access and the DevTools format, as values")
struct InspectorHTTPTests {
    private func parse(_ text: String) -> HTTPRequest.Parse { HTTPRequest.parse(Array(text.utf8)) }

    private func parsed(_ text: String) -> HTTPRequest? {
        if case .request(let request, _) = parse(text) { return request }
        return nil
    }

    @Test("a GET head: method, decoded path and query, headers by lower-cased name; a partial head waits")
    func wellFormed() throws {
        let request = try #require(parsed("GET /api/state?seq=12&token=a%2Bb&x=1+2 HTTP/1.1\r\nHost: 127.0.0.1:8\r\nX-Thing:  v \r\n\r\n"))
        #expect(request.method == "GET" && request.path == "/api/state")
        #expect(request.query == ["seq": "12", "token": "a+b", "x": "1 2"])
        #expect(request.headers["host"] == "127.0.0.1:8" && request.headers["x-thing"] == "v")
        #expect(parse("GET / HTTP/1.1\r\nHost: a") == .incomplete)
        if case .request(_, let consumed) = parse("GET / HTTP/1.0\n\nrest") { #expect(consumed == 16) } else { Issue.record("bare LF") }
    }

    @Test("malformed heads get the status to answer, never a crash", arguments: [
        ("GET /\r\n\r\n", 400), ("GET / HTTP/2.0\r\n\r\n", 505), ("G(T / HTTP/1.1\r\n\r\n", 400), ("GET x HTTP/1.1\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost\r\n\r\n", 400), ("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nX: a\u{1}b\r\n\r\n", 400), ("GET / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 400),
        ("GET /%zz HTTP/1.1\r\n\r\n", 400), ("GET / HTTP/1.1\r\nX: \u{e9}\r\n\r\n", 400),
    ])
    func malformed(text: String, status: Int) {
        guard case .malformed(let got, let reason) = parse(text) else {
            Issue.record("\(text.debugDescription) is refused")
            return
        }
        #expect(got == status, "\(reason)")
    }

    @Test("a head over 8 KiB is 431, whole or not")
    func tooLarge() {
        let long = "GET / HTTP/1.1\r\nX: " + String(repeating: "a", count: 9_000)
        #expect(parse(long).isMalformed(431))
        #expect(parse(long + "\r\n\r\n").isMalformed(431))
    }

    @Test("random bytes never crash the parser", arguments: 0..<4)
    func fuzz(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let alphabet = Array("GET /?=&%+: \r\nHTTP/1.1Host\u{0}\u{7f}".utf8)
        for _ in 0..<3_000 {
            let count = Int(random.next() % 200)
            let bytes = (0..<count).map { _ in alphabet[Int(random.next() % UInt64(alphabet.count))] }
            _ = HTTPRequest.parse(bytes)
        }
    }

    private let access = InspectorAccess(token: "secret-token", port: 8765)

    private func head(_ method: String = "GET", token: String? = "secret-token", host: String? = "127.0.0.1:8765",
                      origin: String? = nil) -> HTTPRequest {
        var headers: [String: String] = [:]
        if let host { headers["host"] = host }
        if let origin { headers["origin"] = origin }
        return HTTPRequest(method: method, path: "/", query: token.map { ["token": $0] } ?? [:], headers: headers)
    }

    @Test("only GET with this server's Host, no other Origin, and the token is allowed")
    func accessRule() {
        #expect(access.decide(head()) == .allow)
        #expect(access.decide(head(host: "localhost:8765", origin: "http://localhost:8765")) == .allow)
        #expect(access.decide(head(host: "[::1]:8765")) == .allow)
        #expect(access.decide(head("POST")).status == 405)
        #expect(access.decide(head("DELETE", token: nil)).status == 405)
        #expect(access.decide(head(token: nil)).status == 403)
        #expect(access.decide(head(token: "secret-tokeN")).status == 403)
        #expect(access.decide(head(token: "secret-token-and-more")).status == 403)
        // DNS rebinding: the browser names the attacker's host.
        #expect(access.decide(head(host: "evil.example:8765")).status == 403)
        #expect(access.decide(head(host: nil)).status == 403)
        #expect(access.decide(head(host: "127.0.0.1:9999")).status == 403)
        // A page of another site posting to, or reading, the inspector.
        #expect(access.decide(head(origin: "http://evil.example")).status == 403)
        #expect(access.decide(head(origin: "null")).status == 403)
        #expect(InspectorAccess.equalInConstantTime("abc", "abc") && !InspectorAccess.equalInConstantTime("abc", "abd"))
    }

    @Test("on ports 80 and 443 the host is accepted without its default port, as browsers send it")
    func defaultPorts() {
        let web = InspectorAccess(token: "secret-token", port: 80)
        func request(_ access: InspectorAccess, host: String, origin: String? = nil) -> InspectorAccess.Decision {
            var headers = ["host": host]
            if let origin { headers["origin"] = origin }
            return access.decide(HTTPRequest(method: "GET", path: "/", query: ["token": "secret-token"], headers: headers))
        }
        #expect(request(web, host: "127.0.0.1") == .allow)
        #expect(request(web, host: "127.0.0.1:80") == .allow)
        #expect(request(web, host: "localhost", origin: "http://localhost") == .allow)
        #expect(request(web, host: "[::1]", origin: "http://[::1]:80") == .allow)
        #expect(request(web, host: "evil.example").status == 403)
        #expect(request(web, host: "127.0.0.1", origin: "https://127.0.0.1").status == 403)
        let tls = InspectorAccess(token: "secret-token", port: 443)
        #expect(request(tls, host: "127.0.0.1", origin: "https://127.0.0.1") == .allow)
        #expect(request(tls, host: "127.0.0.1:443") == .allow)
        // Elsewhere the port is required: another port's server is another origin.
        #expect(request(access, host: "127.0.0.1").status == 403)
        #expect(request(access, host: "127.0.0.1:8765", origin: "http://127.0.0.1").status == 403)
    }

    @Test("inspect --http takes loopback hosts only, with a clear line for any other")
    func loopbackOnly() throws {
        #expect(try InspectorCommand.parse(["--http", "0"]).port == 0)
        #expect(try InspectorCommand.parse(["--http", "localhost:8765"]).host == "localhost")
        #expect(try InspectorCommand.parse(["--http", "[::1]:1", "--keep", "5", "--data-dir", "/d"])
            == InspectorCommand.Arguments(host: "::1", port: 1, dataDirectory: "/d", keep: 5))
        for bad in ["0.0.0.0:8765", "192.168.1.2:80", "example.com:1"] {
            #expect(throws: UsageError.self) { try InspectorCommand.parse(["--http", bad]) }
        }
        do {
            _ = try InspectorCommand.parse(["--http", "0.0.0.0:8765"])
        } catch {
            #expect(error.message.contains("loopback only") && error.message.contains("ssh -L"))
        }
        #expect(throws: UsageError.self) { try InspectorCommand.parse([]) }
        #expect(throws: UsageError.self) { try InspectorCommand.parse(["--http", "127.0.0.1:70000"]) }
    }

    @Test("the DevTools file is the lifted state of @redux-devtools/instrument: every field, of its type")
    func devToolsShape() throws {
        var actions: [SequencedAction] = []
        for seq in 1...3 {
            let action: JSON = ["type": "inc", "by": JSON(seq)]
            let stamp = ActionStamp(time: 1_700_000_000_000 + Int64(seq), originName: "a")
            actions.append(SequencedAction(seq: UInt64(seq), origin: 2, id: .number(seq), action: action, stamp: stamp))
        }
        let states: [JSON] = [["n": 1], ["n": 3], ["n": 6]]
        let lifted = DevToolsExport.liftedState(committed: ["n": 0], actions: actions, states: states)
        let members = try #require(lifted.objectValue)
        let expected: Set<JSONKey> = ["actionsById", "computedStates", "committedState", "currentStateIndex", "isLocked",
                                      "isPaused", "monitorState", "nextActionId", "skippedActionIds", "stagedActionIds"]
        #expect(Set(members.keys) == expected)
        let byID = try #require(lifted["actionsById"]?.objectValue)
        let ids: Set<JSONKey> = ["0", "1", "2", "3"]
        #expect(Set(byID.keys) == ids)
        #expect(byID["0"]?["action"]?["type"] == "@@INIT")
        for id in ["0", "1", "2", "3"] {
            #expect(byID[JSONKey(id)]?["type"] == "PERFORM_ACTION")
            #expect(byID[JSONKey(id)]?["timestamp"]?.numberValue != nil)
        }
        #expect(byID["2"]?["action"] == ["type": "inc", "by": 2])
        #expect(byID["3"]?["timestamp"] == JSON(1_700_000_000_003))
        #expect(lifted["computedStates"] == [["state": ["n": 0]], ["state": ["n": 1]], ["state": ["n": 3]], ["state": ["n": 6]]])
        #expect(lifted["stagedActionIds"] == [0, 1, 2, 3])
        #expect(lifted["skippedActionIds"] == [])
        #expect(lifted["currentStateIndex"] == 3 && lifted["nextActionId"] == 4)
        #expect(lifted["committedState"] == ["n": 0])
        #expect(lifted["isLocked"] == false && lifted["isPaused"] == false && lifted["monitorState"] == [:])
    }
}

extension HTTPRequest.Parse {
    fileprivate func isMalformed(_ status: Int) -> Bool {
        if case .malformed(status, _) = self { return true }
        return false
    }
}

extension InspectorAccess.Decision {
    fileprivate var status: Int? {
        if case .refuse(let status, _) = self { return status }
        return nil
    }
}
