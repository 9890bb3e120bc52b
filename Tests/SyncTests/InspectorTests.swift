#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import BuiltinApps
import StoreReplica
import Synchronization
import SyncCore
import SyncPOSIX
import Testing

/// `replica-cli inspect` against a real hub: its HTTP server's security and bounds, the
/// states it rebuilds, Redux DevTools' file, and its page in a real browser (headless
/// Chromium, driven through the DevTools protocol on a pipe).
@Suite("Inspector: replica-cli inspect against a real hub, and its page in a real browser", .serialized)
struct InspectorTests {
    /// A hub (json app, a data directory with a snapshot every 3 actions) after nine actions
    /// of two types, and an inspector keeping the last four.
    struct Setup {
        let fixture: Fixture
        let data: String
        let inspector: ChildProcess
        let port: Int
        let token: String
        var url: String { "http://127.0.0.1:\(port)/?token=\(token)" }

        func dispatch(_ actions: [String]) async throws {
            let (status, _, err) = try await fixture.runCLI(["--app", "json", "--name", "tester", "dispatch"] + actions)
            guard status == 0 else { throw HarnessError("dispatch failed: \(err)") }
        }

        func get(_ target: String, host: String? = nil, extra: [String] = []) throws -> HTTPProbe.Answer {
            try HTTPProbe.get(port: port, target, host: host, extra: extra)
        }
    }

    /// The nine actions: `set /n` to 1…9, every third an `increment /count`.
    static func action(_ n: Int) -> String {
        n % 3 == 0 ? #"{"type":"increment","path":"/count","by":\#(n)}"# : #"{"type":"set","path":"/n","value":\#(n)}"#
    }

    /// The state after seq `n`: /n is the last set value, /count the sum of increments.
    static func state(after n: Int) -> JSON {
        var members: [JSONKey: JSON] = [:]
        if let last = (1...max(1, n)).last(where: { $0 % 3 != 0 && $0 <= n }) { members["n"] = JSON(last) }
        let count = (1...max(1, n)).filter { $0 % 3 == 0 && $0 <= n }.reduce(0, +)
        if count > 0 { members["count"] = JSON(count) }
        return .object(members)
    }

    static func start() async throws -> Setup {
        let fixture = try Fixture()
        do {
            let data = fixture.directory + "/data"
            try await fixture.startHub(extra: ["--data-dir", data, "--snapshot-every", "3"])
            let (status, _, err) = try await fixture.runCLI(["--app", "json", "dispatch"] + (1...9).map(action))
            guard status == 0 else { throw HarnessError("dispatch failed: \(err)") }
            let inspector = try fixture.cli(["inspect", "--http", "127.0.0.1:0", "--keep", "4", "--data-dir", data], name: "inspector")
            let line = try await inspector.waitForLine("its URL") { $0.hasPrefix("inspector: http://") }
            guard let url = URLComponents(string: String(line.dropFirst("inspector: ".count))), let port = url.port,
                  let token = url.queryItems?.first(where: { $0.name == "token" })?.value else {
                throw HarnessError("no URL in \(line)")
            }
            // The inspector has seen seq 9 once its status says so.
            try await waitUntil("the inspector to keep seq 9") {
                (try? HTTPProbe.get(port: port, "/api/status?token=\(token)").text.contains(#""seq":9"#)) == true
            }
            return Setup(fixture: fixture, data: data, inspector: inspector, port: port, token: token)
        } catch {
            fixture.shutdown()
            throw error
        }
    }

    @Test("HTTP: the token, Host and Origin checks, GET only, malformed and oversized requests, states rebuilt from the data directory, the DevTools file, the live stream, and the bounds")
    func http() async throws {
        let setup = try await Self.start()
        defer { setup.fixture.shutdown() }
        let token = setup.token
        let page = try setup.get("/?token=\(token)")
        #expect(page.status == 200 && page.headers["content-type"]?.hasPrefix("text/html") == true)
        #expect(page.text.contains("StoreSync inspector") && !page.text.contains("http://") && !page.text.contains("https://"),
                "the page loads nothing from anywhere else")
        #expect(page.headers["content-security-policy"]?.contains("default-src 'none'") == true && page.headers["cache-control"] == "no-store")
        // Refusals, none of which says the token.
        let refusals: [(HTTPProbe.Answer, Int)] = [
            (try setup.get("/"), 403), (try setup.get("/?token=wrong"), 403),
            (try setup.get("/api/status?token=\(token)", host: "evil.example:\(setup.port)"), 403),
            (try setup.get("/api/status?token=\(token)", extra: ["Origin: http://evil.example"]), 403),
            (try HTTPProbe.send(port: setup.port, Array("POST /?token=\(token) HTTP/1.1\r\nHost: 127.0.0.1:\(setup.port)\r\nContent-Length: 0\r\n\r\n".utf8)), 405),
            (try HTTPProbe.send(port: setup.port, Array("NOT HTTP AT ALL\r\n\r\n".utf8)), 400),
            (try setup.get("/?token=\(token)", extra: ["X-Big: " + String(repeating: "a", count: 10_000)]), 431),
        ]
        for (answer, status) in refusals {
            #expect(answer.status == status, "\(answer.status) \(answer.text)")
            #expect(!answer.text.contains(token))
        }
        #expect(try HTTPProbe.send(port: setup.port, Array("POST / HTTP/1.1\r\n\r\n".utf8)).headers["allow"] == "GET")
        // A flood of refused requests spends its own budget: the page's requests still pass.
        var limited = 0
        for _ in 0..<150 where try setup.get("/api/status").status == 429 { limited += 1 }
        #expect(limited > 0, "the refused requests are rate-limited")
        #expect(try setup.get("/api/status?token=\(token)").status == 200)
        // States: kept here (seq 7…9), rebuilt from the data directory (seq 2), not yet sequenced (100).
        for seq in [9, 7, 2, 0] {
            let answer = try setup.get("/api/state?seq=\(seq)&token=\(token)")
            let json = try JSON(parsing: answer.body)
            #expect(answer.status == 200 && json["state"] == Self.state(after: seq), "seq \(seq): \(answer.text)")
            #expect(json["source"] == (seq >= 5 ? "inspector" : "data directory"), "seq \(seq): \(answer.text)")
        }
        #expect(try setup.get("/api/state?seq=100&token=\(token)").status == 404)
        // Redux DevTools' file: the four kept actions after @@INIT, the state after each.
        let devtools = try setup.get("/api/devtools?token=\(token)")
        #expect(devtools.headers["content-disposition"]?.contains("attachment") == true)
        let lifted = try JSON(parsing: devtools.body)
        #expect(lifted["stagedActionIds"] == [0, 1, 2, 3, 4])
        #expect(lifted["committedState"] == Self.state(after: 5))
        #expect(lifted["computedStates"]?.arrayValue?.last?["state"] == Self.state(after: 9))
        #expect(lifted["actionsById"]?["4"]?["action"] == (try JSON(parsing: Array(Self.action(9).utf8))))
        // The live stream: what is kept, then each new action.
        let stream = try TCPSocket.connect(host: "127.0.0.1", port: setup.port, timeoutMilliseconds: 5_000)
        defer { UnixSocket.close(stream) }
        try UnixSocket.writeAll(stream, Array("GET /api/events?token=\(token) HTTP/1.1\r\nHost: 127.0.0.1:\(setup.port)\r\n\r\n".utf8))
        _ = try HTTPProbe.readUntilClosed(stream, timeout: .seconds(10)) { String(decoding: $0, as: UTF8.self).contains(#""seq":9"#) }
        try await setup.dispatch([#"{"type":"set","path":"/n","value":10}"#])
        let live = try HTTPProbe.readUntilClosed(stream, timeout: .seconds(10)) { String(decoding: $0, as: UTF8.self).contains(#""seq":10"#) }
        #expect(String(decoding: live, as: UTF8.self).contains(#""type":"set""#))
        // The patch an action made, computed when asked.
        let at10 = try JSON(parsing: try setup.get("/api/state?seq=10&token=\(token)").body)
        #expect(at10["patch"] == [["op": "replace", "path": "/n", "value": 10]])
        let at2 = try JSON(parsing: try setup.get("/api/state?seq=2&token=\(token)").body)
        #expect(at2["patch"] == [["op": "replace", "path": "/n", "value": 2]], "from the data directory too")
        // A stream nobody reads does not hold anything up: 300 more actions, then a page loads.
        let sleeper = try TCPSocket.connect(host: "127.0.0.1", port: setup.port, timeoutMilliseconds: 5_000)
        defer { UnixSocket.close(sleeper) }
        try UnixSocket.writeAll(sleeper, Array("GET /api/events?token=\(token) HTTP/1.1\r\nHost: 127.0.0.1:\(setup.port)\r\n\r\n".utf8))
        try await setup.dispatch((11...310).map { #"{"type":"set","path":"/big","value":"\#(String(repeating: "x", count: 2_000))\#($0)"}"# })
        #expect(try setup.get("/api/status?token=\(token)").status == 200)
        // Connections that never show the token cannot take the page's: with 16 idle ones held
        // (and reopened), a request with the token is still served, and the idlest make room.
        var idle: [Int32] = []
        defer { for fd in idle { UnixSocket.close(fd) } }
        for _ in 0..<16 { idle.append(try TCPSocket.connect(host: "127.0.0.1", port: setup.port, timeoutMilliseconds: 5_000)) }
        for _ in 0..<3 {
            #expect(try setup.get("/api/status?token=\(token)").status == 200)
            idle.append(try TCPSocket.connect(host: "127.0.0.1", port: setup.port, timeoutMilliseconds: 5_000))
        }
        for fd in idle { UnixSocket.close(fd) }
        idle.removeAll()
        // A flood of new connections without the token, each pushing out the idlest: a new
        // connection has its grace to send its request, so the token's holder is still served.
        let flooding = Atomic<Bool>(true)
        let port = setup.port
        let flooder = Thread {
            var open: [Int32] = []
            while flooding.load(ordering: .acquiring) {
                if let fd = try? TCPSocket.connect(host: "127.0.0.1", port: port, timeoutMilliseconds: 1_000) { open.append(fd) }
                if open.count > 48 { UnixSocket.close(open.removeFirst()) }
            }
            for fd in open { UnixSocket.close(fd) }
        }
        flooder.start()
        var served = 0
        // As a browser does, a request whose connection was reset is sent again (at most twice).
        for _ in 0..<5 {
            for _ in 0..<3 where (try? setup.get("/api/status?token=\(token)").status) == 200 {
                served += 1
                break
            }
        }
        flooding.store(false, ordering: .releasing)
        #expect(served == 5, "\(served) of 5 requests with the token served during a flood of connections without it")
        // At most 16 connections serve the token's holders: two streams are open, 14 more fill
        // them; then a request is told 503 with Retry-After, and a stream gets a `busy` event
        // with a `retry:` its EventSource reconnects after (an EventSource gives up on a 503).
        var streams: [Int32] = []
        defer { for fd in streams { UnixSocket.close(fd) } }
        for _ in 0..<14 {
            let fd = try TCPSocket.connect(host: "127.0.0.1", port: setup.port, timeoutMilliseconds: 5_000)
            streams.append(fd)
            try UnixSocket.writeAll(fd, Array("GET /api/events?token=\(token) HTTP/1.1\r\nHost: 127.0.0.1:\(setup.port)\r\n\r\n".utf8))
            _ = try HTTPProbe.readUntilClosed(fd, timeout: .seconds(10)) { String(decoding: $0, as: UTF8.self).contains("event: status") }
        }
        let full = try setup.get("/api/status?token=\(token)")
        #expect(full.status == 503 && full.headers["retry-after"] == "2", "\(full.status) \(full.text)")
        let busy = try setup.get("/api/events?token=\(token)")
        #expect(busy.status == 200 && busy.headers["content-type"]?.hasPrefix("text/event-stream") == true, "\(busy.status)")
        #expect(busy.text.contains("retry: 2000") && busy.text.contains("event: busy") && busy.text.contains("at most 16 connections"), "\(busy.text)")
        for fd in streams { UnixSocket.close(fd) }
        streams.removeAll()
        try await waitUntil("connections to be served again") { (try? setup.get("/api/status?token=\(token)").status) == 200 }
        #expect(setup.inspector.isRunning)
    }

    /// A headless Chromium, if this machine has one.
    static let chromium: String? = {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        for directory in path.split(separator: ":") where directory.hasPrefix("/") {
            for name in ["chromium", "chromium-browser", "google-chrome"] {
                let candidate = String(directory) + "/" + name
                if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
            }
        }
        return nil
    }()

    static let python3: String? = ProtocolPythonListing.python3

    static var browseScript: String { URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Support/browse.py").path }

    /// Opens the page in Chromium, waits until `condition` (JavaScript) holds, and returns the DOM.
    static func browse(_ setup: Setup, fragment: String, until condition: String, screenshot: String? = nil) async throws -> String {
        let chromium = try #require(chromium), python = try #require(python3)
        var arguments = [browseScript, chromium, setup.url + fragment, condition, "--timeout", "20",
                         "--profile", setup.fixture.directory + "/chromium-profile"]
        if let screenshot { arguments += ["--screenshot", screenshot] }
        let browser = try setup.fixture.spawn(python, arguments, name: "chromium \(fragment)")
        let status = try await browser.waitForExit(timeout: .seconds(60))
        let dom = browser.lines.joined(separator: "\n")
        guard status == 0 else { throw HarnessError("the page never showed \(condition): \(browser.errorLines) \(dom.suffix(2_000))") }
        return dom
    }

    static func rows(_ dom: String) -> [(seq: Int, type: String)] {
        let pattern = #/<tr data-seq="(\d+)" data-type="([^"]*)"/#
        return dom.matches(of: pattern).compactMap { match in Int(match.1).map { ($0, String(match.2)) } }
    }

    @Test("a stream starts within its bound whatever was dispatched: large actions are shown by size and fetched alone; a long start is read in pages")
    func boundedStart() async throws {
        let setup = try await Self.start()
        defer { setup.fixture.shutdown() }
        let token = setup.token
        // Five actions of about 900 KB each (more than the 4 MiB a stream may leave unread).
        let writer = try Replica.attach(app: JSONApp(), socketPath: setup.fixture.socket)
        defer { writer.close() }
        for n in 10...14 {
            _ = try await writer.dispatch(.set(try JSONPointer("/big"), .string(String(repeating: "b", count: 900_000) + "\(n)")))
        }
        try await waitUntil("the inspector to keep seq 14") {
            (try? setup.get("/api/status?token=\(token)").text.contains(#""seq":14"#)) == true
        }
        func stream(_ target: String) throws -> String {
            let fd = try TCPSocket.connect(host: "127.0.0.1", port: setup.port, timeoutMilliseconds: 5_000)
            defer { UnixSocket.close(fd) }
            try UnixSocket.writeAll(fd, Array("GET \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(setup.port)\r\n\r\n".utf8))
            let bytes = try HTTPProbe.readUntilClosed(fd, timeout: .seconds(10)) { String(decoding: $0, as: UTF8.self).contains(#""seq":14"#) }
            return String(decoding: bytes, as: UTF8.self)
        }
        let start = try stream("/api/events?token=\(token)")
        #expect(start.hasPrefix("HTTP/1.1 200") && start.contains("event: status"))
        #expect(start.utf8.count < 64 << 10, "\(start.utf8.count) bytes")
        #expect(start.contains(#""action_bytes":900"#) && !start.contains(String(repeating: "b", count: 1_000)))
        // Fetched alone, whole.
        let whole = try setup.get("/api/action?seq=12&token=\(token)")
        let line = try JSON(parsing: whole.body)
        #expect(whole.status == 200 && line["action"]?["value"]?.stringValue?.hasSuffix("12") == true && line["seq"] == 12)
        #expect(try setup.get("/api/action?seq=1&token=\(token)").status == 404, "not kept (keep 4)")
        // Many ordinary actions: a start that carries `after` is bounded too, and says what it
        // left out; the page reads that from /api/actions, a page at a time.
        let inspector = try setup.fixture.cli(["inspect", "--http", "127.0.0.1:0", "--keep", "2000"], name: "inspector 2")
        let url = try await inspector.waitForLine("its URL") { $0.hasPrefix("inspector: http://") }
        guard let parsed = URLComponents(string: String(url.dropFirst("inspector: ".count))), let port = parsed.port,
              let token2 = parsed.queryItems?.first(where: { $0.name == "token" })?.value else { throw HarnessError("no URL in \(url)") }
        try await setup.dispatch((15...214).map { #"{"type":"set","path":"/s","value":"\#(String(repeating: "s", count: 2_000))\#($0)"}"# })
        try await waitUntil("the second inspector to keep seq 214") {
            (try? HTTPProbe.get(port: port, "/api/status?token=\(token2)").text.contains(#""seq":214"#)) == true
        }
        let fd = try TCPSocket.connect(host: "127.0.0.1", port: port, timeoutMilliseconds: 5_000)
        defer { UnixSocket.close(fd) }
        try UnixSocket.writeAll(fd, Array("GET /api/events?after=14&token=\(token2) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n".utf8))
        let long = String(decoding: try HTTPProbe.readUntilClosed(fd, timeout: .seconds(10)) {
            String(decoding: $0, as: UTF8.self).contains(#""seq":214"#)
        }, as: UTF8.self)
        #expect(long.utf8.count < 300 << 10, "\(long.utf8.count) bytes")
        let more = try #require(long.firstMatch(of: /event: more\ndata: \{"after":14,"before":(\d+)\}/), "\(long.prefix(300))")
        let before = try #require(Int(more.1))
        var after = 14, pages = 0
        while after + 1 < before {
            let page = try JSON(parsing: try HTTPProbe.get(port: port, "/api/actions?after=\(after)&before=\(before)&token=\(token2)").body)
            let seqs = try #require(page.arrayValue).compactMap { $0["seq"]?.intValue }
            #expect(seqs == Array((after + 1)...(after + seqs.count)) && !seqs.isEmpty)
            after = seqs.last ?? before
            pages += 1
        }
        #expect(after == before - 1 && pages >= 1)
    }

    @Test("in Chromium: actions live, the state and the diff at a selected seq, filters, a state rebuilt from a snapshot, and a screenshot",
          .enabled(if: chromium != nil && python3 != nil, "no chromium (apt-get install chromium) or python3 on PATH: the browser tests are skipped; the HTTP tests still run"))
    func browser() async throws {
        let setup = try await Self.start()
        defer { setup.fixture.shutdown() }
        // On load, with no seq asked for: the newest state, the slider at it.
        let loaded = try await Self.browse(setup, fragment: "", until: ##"document.body.dataset.stateSeq === "9" && document.querySelector("#slider").value === "9" && document.querySelector("#slider-seq").textContent === "seq 9""##)
        #expect(loaded.contains(#"<span class="value">18</span>"#) && !loaded.contains("select an action"))
        // #seq=N: the state there, and the slider placed there once its range is known.
        _ = try await Self.browse(setup, fragment: "#seq=5", until: ##"document.body.dataset.stateSeq === "5" && document.querySelector("#slider").value === "5" && document.querySelector("#slider").max === "9""##)
        // The state and diff at a kept seq.
        let at8 = try await Self.browse(setup, fragment: "#seq=8", until: ##"document.body.dataset.stateSeq === "8" && document.querySelector("#slider").value === "8" && document.querySelector("#replicas tbody").textContent.includes("agrees")"##)
        #expect(Self.rows(at8).map(\.seq) == [9, 8, 7, 6])
        #expect(at8.contains(#"data-op="replace" data-path="/n""#))
        #expect(at8.contains(#"<span class="value">8</span>"#) && at8.contains(#"<span class="value">9</span>"#))
        #expect(at8.contains("(rebuilt from the inspector)"))
        // The replicas view: the inspector, a replica itself, reports its last digest agreement.
        #expect(at8.firstMatch(of: /<td>seq \d+ ✓ agrees, (at the hub's seq|1 action ago|\d+ actions ago)<\/td>/) != nil, "with its age")
        // Older than what is kept: rebuilt from the newest snapshot at or before it and the journal.
        let at4 = try await Self.browse(setup, fragment: "#seq=4", until: #"document.body.dataset.stateSeq === "4""#)
        #expect(at4.contains("(rebuilt from the data directory)"))
        #expect(at4.contains(#"<span class="value">4</span>"#) && at4.contains(#"<span class="value">3</span>"#))
        // Filters: by type, and by origin name.
        let increments = try await Self.browse(setup, fragment: "#type=increment",
                                               until: "document.querySelectorAll('#actions tbody tr').length > 0")
        #expect(Self.rows(increments).map(\.seq) == [9, 6])
        #expect(Self.rows(increments).allSatisfy { $0.type == "increment" })
        // Live: a dispatch while the page is open appears in it.
        let python = try #require(Self.python3), chromium = try #require(Self.chromium)
        let screenshot = setup.fixture.directory + "/inspector.png"
        let browser = try setup.fixture.spawn(python, [Self.browseScript, chromium, setup.url,
                                                       // `seq 11` in the facts comes from a status the
                                                       // inspector sent the open page, not the one at its start.
                                                       #"document.querySelector('#actions tr[data-seq="11"]') !== null && document.querySelector('#facts').textContent.includes('seq 11') && document.querySelector('#replicas tbody').textContent.includes('agrees')"#,
                                                       "--ready", "document.querySelectorAll('#actions tbody tr').length >= 4",
                                                       "--timeout", "30", "--screenshot", screenshot,
                                                       "--profile", setup.fixture.directory + "/chromium-profile"],
                                              name: "chromium live")
        // Dispatched only once the page shows what is kept: these two arrive live.
        try await waitUntil("the page to be live") { browser.errorLines.contains("ready") }
        try await setup.dispatch([#"{"type":"set","path":"/n","value":10}"#, #"{"type":"increment","path":"/count","by":100}"#])
        #expect(try await browser.waitForExit(timeout: .seconds(60)) == 0, "\(browser.errorLines)")
        let live = browser.lines.joined(separator: "\n")
        #expect(Self.rows(live).prefix(3).map(\.seq) == [11, 10, 9])
        let png = try Data(contentsOf: URL(fileURLWithPath: screenshot))
        #expect(png.count > 10_000 && png.starts(with: [0x89, 0x50, 0x4E, 0x47]))
        // docs/inspector.png is this picture: `STORESYNC_INSPECTOR_SCREENSHOT=$PWD/docs/inspector.png
        // swift test --filter InspectorTests` recaptures it.
        if let keep = ProcessInfo.processInfo.environment["STORESYNC_INSPECTOR_SCREENSHOT"], !keep.isEmpty {
            try png.write(to: URL(fileURLWithPath: keep))
        }
    }
}
