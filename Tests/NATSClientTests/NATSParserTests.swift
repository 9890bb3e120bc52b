import NATSClient
import SyncProtocol
import Testing

/// The NATS protocol's server side, parsed from bytes in memory (what nats-server 2.9 writes).
@Suite("NATSParser: the server's operations from bytes")
struct NATSParserTests {
    func ops(_ text: String, split: Int? = nil) throws -> [NATSServerOp] {
        var parser = NATSParser()
        var result: [NATSServerOp] = []
        let bytes = Array(text.utf8)
        let step = split ?? bytes.count
        var offset = 0
        while offset < bytes.count {
            parser.append(bytes[offset..<min(bytes.count, offset + step)])
            offset += step
            while let op = try parser.next() { result.append(op) }
        }
        return result
    }

    @Test("INFO, PING, PONG, +OK and -ERR, whole or one byte at a time")
    func controlLines() throws {
        let text = "INFO {\"server_id\":\"x\",\"max_payload\":1048576,\"headers\":true} \r\nPING\r\npong\r\n+OK\r\n-ERR 'Authorization Violation'\r\n"
        for split in [nil, 1, 3, 7] {
            let parsed = try ops(text, split: split)
            #expect(parsed.count == 5)
            guard case .info(let info) = parsed[0] else { Issue.record("no INFO"); return }
            #expect(info["max_payload"] == 1048576)
            #expect(Array(parsed[1...]) == [.ping, .pong, .ok, .error("Authorization Violation")])
        }
    }

    @Test("MSG with and without a reply, the empty reply written as two spaces, and HMSG with status headers")
    func messages() throws {
        let heartbeat = "NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 6\r\nNats-Last-Stream: 8\r\n\r\n"
        let size = heartbeat.utf8.count
        let parsed = try ops("MSG _INBOX.a 3  23\r\n{\"stream\":\"S\", \"seq\":2}\r\n"
                             + "MSG storesync.S.actions 11 $JS.ACK.S.c.1.3.1.179.5 2\r\na6\r\n"
                             + "HMSG _INBOX.fc 1 $JS.FC.S.n.r 36 36\r\nNATS/1.0 100 FlowControl Request\r\n\r\n\r\n"
                             + "HMSG _INBOX.h 1  \(size) \(size)\r\n" + heartbeat + "\r\n"
                             + "HMSG _INBOX.n 1 16 16\r\nNATS/1.0 503\r\n\r\n\r\n", split: 5)
        #expect(parsed.count == 5)
        guard case .message(let ack) = parsed[0], case .message(let delivery) = parsed[1], case .message(let flow) = parsed[2],
              case .message(let beat) = parsed[3], case .message(let none) = parsed[4] else { Issue.record("\(parsed)"); return }
        #expect(beat.headers?["Nats-Last-Stream"] == "8" && beat.headers?.statusText == "Idle Heartbeat" && beat.reply == nil)
        #expect(ack.sid == 3 && ack.reply == nil && String(decoding: ack.payload, as: UTF8.self) == #"{"stream":"S", "seq":2}"#)
        #expect(delivery.subject == "storesync.S.actions" && delivery.reply == "$JS.ACK.S.c.1.3.1.179.5" && delivery.payload == Array("a6".utf8))
        #expect(flow.headers?.status == 100 && flow.headers?.statusText == "FlowControl Request" && flow.reply == "$JS.FC.S.n.r")
        #expect(none.headers?.status == 503 && none.payload.isEmpty)
    }

    @Test("headers encode and decode; names compare without case")
    func headers() {
        let headers = NATSHeaders([("Nats-Msg-Id", "s.a%22"), ("Nats-Expected-Last-Sequence", "7")])
        let encoded = headers.encoded
        #expect(String(decoding: encoded, as: UTF8.self) == "NATS/1.0\r\nNats-Msg-Id: s.a%22\r\nNats-Expected-Last-Sequence: 7\r\n\r\n")
        let decoded = NATSHeaders.decode(encoded[...])
        #expect(decoded == headers && decoded?["nats-msg-id"] == "s.a%22")
    }

    @Test("what is not the protocol is an error, never a trap: unknown verbs, bad sizes, sizes over the limit")
    func malformed() {
        for text in ["HELLO\r\n", "MSG a b 3\r\nabc\r\n", "MSG a 1 -3\r\n", "MSG a 1 999999999999\r\n", "MSG a 1 3\r\nabcd\r\n",
                     "HMSG a 1 9 3\r\nabc\r\n", "INFO not json\r\n"] {
            #expect(throws: NATSProtocolError.self, "\(text)") { _ = try ops(text) }
        }
        // Incomplete input is not an error: it waits for more.
        #expect((try? ops("MSG a 1 10\r\nabc")) == [])
    }

    @Test("a megabyte of empty lines is skipped without exhausting the stack (a hostile server)")
    func manyEmptyLines() throws {
        var parser = NATSParser()
        parser.append(Array(repeating: [0x0D, 0x0A], count: 512 << 10).flatMap { $0 } + Array("PING\r\n".utf8))
        #expect(try parser.next() == .ping)
    }

    @Test("a control line over 64 KiB is refused the same whether it arrives whole or in pieces; one of 64 KiB is not")
    func controlLineBound() throws {
        func outcome(_ line: [UInt8], chunk: Int) -> String {
            var parser = NATSParser()
            var index = 0
            while index < line.count {
                parser.append(line[index..<min(line.count, index + chunk)])
                index += chunk
                do throws(NATSProtocolError) {
                    if let op = try parser.next() { return "\(op)".prefix(12).description }
                } catch {
                    return error.description
                }
            }
            return "incomplete"
        }
        let longest = Array("-ERR '".utf8) + Array(repeating: UInt8(ascii: "x"), count: NATSParser.maxControlLine - 7) + Array("'\r\n".utf8)
        let tooLong = Array("-ERR '".utf8) + Array(repeating: UInt8(ascii: "x"), count: NATSParser.maxControlLine - 6) + Array("'\r\n".utf8)
        for chunk in [1 << 20, 4096, 7] {
            #expect(outcome(longest, chunk: chunk).hasPrefix("error("), "chunk \(chunk)")
            #expect(outcome(tooLong, chunk: chunk) == "a control line longer than 64 KiB", "chunk \(chunk)")
        }
    }
}
