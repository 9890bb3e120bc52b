import Foundation
@testable import StoreHub
import SyncLocks
import Testing
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

@Suite("HubLogger: levels, messages built only when logged, the program's prefix")
struct HubLoggerTests {
    @Test("events below the level are dropped before their message is built; the handler gets level, message and metadata")
    func levels() {
        let seen = Locked<[String]>([])
        let built = Locked(0)
        let logger = HubLogger(logLevel: .notice) { level, message, metadata in
            seen.withLock { $0.append("\(level) \(message) \(metadata.sorted { $0.key < $1.key })") }
        }
        func message(_ text: String) -> String {
            built.withLock { $0 += 1 }
            return text
        }
        logger.debug(message("d"))
        logger.info(message("i"))
        logger.log(level: .notice, message("n"), metadata: ["seq": "4"])
        logger.warning(message("w"))
        logger.error(message("e"))
        #expect(seen.withLock { $0 } == [#"notice n [(key: "seq", value: "4")]"#, "warning w []", "error e []"])
        #expect(built.withLock { $0 } == 3, "the debug and info messages were never built")
        HubLogger.discarding.error(message("x"))
        #expect(built.withLock { $0 } == 3)
    }

    @Test("hubd's lines: PROGRAM: MESSAGE, with warning: and error: markers, metadata as key=value in name order")
    func lines() {
        #expect(HubLogger.line(program: "hubd", level: .info, message: "serving", metadata: [:]) == "hubd: serving")
        #expect(HubLogger.line(program: "hubd", level: .notice, message: "back", metadata: [:]) == "hubd: back")
        #expect(HubLogger.line(program: "myhub", level: .warning, message: "odd", metadata: [:]) == "myhub: warning: odd")
        #expect(HubLogger.line(program: "hubd", level: .error, message: "bad", metadata: ["seq": "3", "origin": "2"]) == "hubd: error: bad origin=2 seq=3")
        #expect(HubLogger.line(program: "hubd", level: .critical, message: "stop", metadata: [:]) == "hubd: error: stop")
        #expect(HubLogger.Level.allCases.map(\.description) == ["trace", "debug", "info", "notice", "warning", "error", "critical"])
        #expect(HubLogger.Level(name: "warning") == .warning && HubLogger.Level(name: "loud") == nil)
    }
}

extension MultiProcessTests {
    @Suite("hubd --log-level")
    struct LogLevelFlag {
        @Test("--log-level notice keeps serving and stopping, drops attach lines; a wrong level is a usage error")
        func logLevel() async throws {
            let fixture = try Fixture()
            defer { fixture.shutdown() }
            let wrong = try fixture.spawn("hubd", ["--socket", fixture.socket, "--log-level", "loud"])
            #expect(try await wrong.waitForExit() == 2)
            #expect(wrong.errorLines.contains { $0.contains("--log-level is one of trace, debug, info, notice, warning, error, critical, got \"loud\"") },
                    "\(wrong.errorLines)")
            let hub = try await fixture.startHub(extra: ["--log-level", "notice"])
            let seq = try await fixture.runCLI(["dispatch", "set /a 1"])
            #expect(seq.out == ["1"])
            hub.signal(SIGTERM)
            #expect(try await hub.waitForExit() == 0)
            #expect(hub.errorLines.contains { $0.hasPrefix("hubd: serving app json@1 on \(fixture.socket)") }, "\(hub.errorLines)")
            #expect(hub.errorLines.contains { $0.hasPrefix("hubd: stopped at seq 1") }, "\(hub.errorLines)")
            #expect(!hub.errorLines.contains { $0.contains("attached at seq") || $0.contains("disconnected") || $0.contains("open-files limit") },
                    "\(hub.errorLines)")
        }
    }
}

@Suite("Account names for refusal lines: looked up off the loop thread, cached, bounded")
struct AccountNamesTests {
    @Test("a cached name is given at once; a new one is looked up on the background queue, once; past the bound of waiting look-ups the uid stands for the name")
    func lookUps() async throws {
        let calls = Locked<[UInt32: Int]>([:])
        let gate = DispatchSemaphore(value: 0)
        let names = AccountNames { uid in
            calls.withLock { $0[uid, default: 0] += 1 }
            gate.wait()
            return "user\(uid)"
        }
        let seen = Locked<[String]>([])
        // Blocks in the background, never on this thread.
        names.withName(7) { name in seen.withLock { $0.append(name) } }
        #expect(seen.withLock { $0 }.isEmpty)
        for uid in 100..<(100 + UInt32(AccountNames.maxPending) - 1) { names.withName(uid) { _ in } }
        names.withName(9) { name in seen.withLock { $0.append(name) } }
        #expect(seen.withLock { $0 } == ["9"], "past the bound, the uid alone, at once")
        for _ in 0..<AccountNames.maxPending { gate.signal() }
        try await waitUntil("the look-ups to finish") { seen.withLock { $0.count } == 2 }
        #expect(seen.withLock { $0 } == ["9", "user7"])
        names.withName(7) { name in seen.withLock { $0.append(name) } }
        #expect(seen.withLock { $0 } == ["9", "user7", "user7"], "cached: at once, no second look-up")
        #expect(calls.withLock { $0[7] } == 1 && calls.withLock { $0[9] } == nil, "7 looked up once, 9 never")
    }
}
