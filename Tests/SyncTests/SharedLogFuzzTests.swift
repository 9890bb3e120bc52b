@testable import StoreHub
import NATSClient
import SyncProtocol
import Testing

/// Arbitrary bytes from a NATS server (or another client) through every decision the shared
/// log makes about them: the protocol parser, acknowledgement subjects, status messages and
/// record validity. Nothing may trap, and nothing that was not written with the key is valid.
/// A seeded generator, so a failure is reproducible; 2 × 20,000 inputs run in about a second.
@Suite("Shared log: arbitrary input from NATS")
struct SharedLogFuzzTests {
    /// SplitMix64: small, seeded, the same on every platform.
    struct Random: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// Fragments a hostile server or client would try, mixed with random bytes.
    static let fragments: [String] = [
        "MSG ", "HMSG ", "INFO ", "PING\r\n", "PONG\r\n", "+OK\r\n", "-ERR 'x'\r\n", "\r\n", " ", "-1", "-5",
        "99999999999999999999", "0", "1", "NATS/1.0 100\r\n", "NATS/1.0 503\r\n", "Nats-Consumer-Stalled: ",
        "$JS.ACK.", "$JS.FC.", "$JS.API.STREAM.PURGE.ledger", "storesync.ledger.actions", "_INBOX.a.1",
        "{\"seq\":", "{\"action\":{\"type\":\"x\"},\"id\":1,\"origin\":1,\"seq\":3}", "\n", "hmac-sha256:", "sha256:",
        "StoreSync-Auth: ", "{", "}", "[", "]", "\"", "\\u0000", "\u{1B}]0;x\u{7}", "\u{202E}",
    ]

    static func input(_ random: inout Random) -> [UInt8] {
        var bytes: [UInt8] = []
        for _ in 0..<Int.random(in: 0...12, using: &random) {
            if Bool.random(using: &random) {
                bytes += Array(fragments[Int.random(in: 0..<fragments.count, using: &random)].utf8)
            } else {
                bytes += (0..<Int.random(in: 0...8, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            }
        }
        return bytes
    }

    @Test("the NATS parser takes arbitrary bytes without trapping, within its payload bound", arguments: [1, 2])
    func parser(seed: UInt64) {
        var random = Random(state: seed)
        for _ in 0..<20_000 {
            var parser = NATSParser(maxPayload: 4096)
            parser.append(Self.input(&random)[...])
            for _ in 0..<16 {
                guard let op = try? parser.next() else { break }
                if case .message(let message) = op { #expect(message.payload.count <= 4096) }
            }
        }
    }

    @Test("acknowledgement subjects, status messages and records: arbitrary input never traps and is never valid without the key", arguments: [3, 4])
    func decisions(seed: UInt64) throws {
        var random = Random(state: seed)
        let names = JetStreamLog.Names(stream: "ledger")
        let keys = try LogKeys.parse(Array("fuzz-key-fuzz-key-fuzz-key-fuzz-key-0123".utf8), source: "fuzz").get()
        for _ in 0..<20_000 {
            let subject = String(decoding: Self.input(&random), as: UTF8.self)
            let reply = String(decoding: Self.input(&random), as: UTF8.self)
            if let ack = JetStreamAckSubject(reply) { #expect(reply.hasPrefix("$JS.ACK.") && !ack.stream.isEmpty) }
            let headerText = String(decoding: Self.input(&random), as: UTF8.self)
            let headers = NATSHeaders.decode(Array("NATS/1.0\r\n\(headerText)\r\n\r\n".utf8)[...])
            let message = NATSMessage(subject: Bool.random(using: &random) ? names.actions : subject, sid: 1,
                                      reply: Bool.random(using: &random) ? "$JS.ACK.ledger.c.1.2.2.0.0" : reply,
                                      headers: headers, payload: Self.input(&random))
            if let replies = JetStreamLog.controlReplies(message, deliverSubject: "_INBOX.a.1") {
                #expect(replies.allSatisfy { $0.hasPrefix("$JS.FC.") })
            }
            let result = JetStreamLog.validRecords(message, names: names, keys: keys, history: "h", next: 3, previousTag: "")
            if case .success = result { Issue.record("arbitrary input was taken as a valid record: \(message)") }
        }
    }
}
