import SyncProtocol

/// The headers of a NATS message (`HMSG`/`HPUB`): a status line `NATS/1.0[ CODE[ TEXT]]` and
/// `Name: Value` lines.
public struct NATSHeaders: Sendable, Equatable {
    /// The status code of a status message (100 for heartbeats and flow control, 503 for no
    /// responders), or `nil`.
    public var status: Int?
    /// The status text (`Idle Heartbeat`, `FlowControl Request`), or `""`.
    public var statusText: String
    /// The fields, in order.
    public var fields: [(name: String, value: String)]

    /// Creates headers.
    ///
    /// - Parameter fields: The fields, in order.
    public init(_ fields: [(name: String, value: String)] = [], status: Int? = nil, statusText: String = "") {
        self.fields = fields
        self.status = status
        self.statusText = statusText
    }

    /// The first value of a field (names compare without case, as NATS does).
    public subscript(name: String) -> String? {
        fields.first { Self.sameIgnoringASCIICase($0.name, name) }?.value
    }

    /// Whether two names are equal ignoring the case of ASCII letters (header names are
    /// ASCII; no allocation, unlike `lowercased()`).
    private static func sameIgnoringASCIICase(_ lhs: String, _ rhs: String) -> Bool {
        guard lhs.utf8.count == rhs.utf8.count else { return false }
        for (left, right) in zip(lhs.utf8, rhs.utf8) where left != right {
            let l = left >= 0x41 && left <= 0x5A ? left | 0x20 : left
            let r = right >= 0x41 && right <= 0x5A ? right | 0x20 : right
            if l != r { return false }
        }
        return true
    }

    /// The header block as sent: `NATS/1.0\r\n`, each field, then an empty line.
    public var encoded: [UInt8] {
        var bytes = Array("NATS/1.0\r\n".utf8)
        for field in fields {
            bytes.append(contentsOf: field.name.utf8)
            bytes.append(contentsOf: ": ".utf8)
            bytes.append(contentsOf: field.value.utf8)
            bytes.append(contentsOf: "\r\n".utf8)
        }
        bytes.append(contentsOf: "\r\n".utf8)
        return bytes
    }

    /// Reads a header block.
    ///
    /// - Parameter bytes: The block, from `NATS/1.0` to the empty line.
    /// - Returns: The headers, or `nil` when the block is malformed.
    public static func decode(_ bytes: ArraySlice<UInt8>) -> NATSHeaders? {
        // Read over the bytes (a delivery carries several fields; Strings are made only for
        // the names and values themselves).
        let space = UInt8(ascii: " ")
        var headers = NATSHeaders()
        var start = bytes.startIndex
        var first = true
        while start < bytes.endIndex {
            var end = start
            while end < bytes.endIndex, !(bytes[end] == 0x0D && end + 1 < bytes.endIndex && bytes[end + 1] == 0x0A) { end += 1 }
            let line = bytes[start..<end]
            start = end < bytes.endIndex ? end + 2 : end
            if first {
                first = false
                guard line.starts(with: "NATS/1.0".utf8) else { return nil }
                var cursor = line.startIndex + 8
                while cursor < line.endIndex, line[cursor] == space { cursor += 1 }
                guard cursor < line.endIndex else { continue }
                var codeEnd = cursor
                while codeEnd < line.endIndex, line[codeEnd] != space { codeEnd += 1 }
                headers.status = Int(String(decoding: line[cursor..<codeEnd], as: UTF8.self))
                let text = codeEnd < line.endIndex ? line[(codeEnd + 1)...] : line[line.endIndex...]
                headers.statusText = String(decoding: text, as: UTF8.self)
                continue
            }
            guard !line.isEmpty, let colon = line.firstIndex(of: UInt8(ascii: ":")) else { continue }
            var valueStart = colon + 1
            while valueStart < line.endIndex, line[valueStart] == space { valueStart += 1 }
            headers.fields.append((String(decoding: line[..<colon], as: UTF8.self),
                                   String(decoding: line[valueStart...], as: UTF8.self)))
        }
        return first ? nil : headers
    }

    public static func == (lhs: NATSHeaders, rhs: NATSHeaders) -> Bool {
        lhs.status == rhs.status && lhs.statusText == rhs.statusText
            && lhs.fields.map { [$0.name, $0.value] } == rhs.fields.map { [$0.name, $0.value] }
    }
}

/// A message the server delivered (`MSG` or `HMSG`).
public struct NATSMessage: Sendable, Equatable {
    /// The subject it was published to.
    public var subject: String
    /// The subscription it is for.
    public var sid: Int
    /// The reply subject, if any.
    public var reply: String?
    /// The headers (`HMSG`), if any.
    public var headers: NATSHeaders?
    /// The payload.
    public var payload: [UInt8]

    /// Creates a message.
    public init(subject: String, sid: Int, reply: String?, headers: NATSHeaders?, payload: [UInt8]) {
        self.subject = subject
        self.sid = sid
        self.reply = reply
        self.headers = headers
        self.payload = payload
    }
}

/// What a NATS server sends.
public enum NATSServerOp: Sendable, Equatable {
    /// `INFO {…}`: the server's facts (may also arrive later, unasked).
    case info(JSON)
    /// A message for a subscription.
    case message(NATSMessage)
    case ping
    case pong
    case ok
    /// `-ERR '…'`: the text.
    case error(String)
}

/// The server sent something that is not the NATS protocol.
public struct NATSProtocolError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// The NATS client protocol's server side, parsed incrementally from bytes: a pure function
/// of what was appended, tested on bytes in memory.
///
/// Control lines end with CRLF; `MSG subject sid [reply] size` and
/// `HMSG subject sid [reply] headerSize totalSize` are followed by that many bytes and a CRLF.
/// Tokens are separated by runs of spaces or tabs (a server may write an empty reply as two
/// spaces).
public struct NATSParser: Sendable {
    private var buffer: [UInt8] = []
    private var offset = 0
    /// The largest payload accepted (a larger size is a protocol error, not an allocation).
    public let maxPayload: Int
    /// The longest control line accepted (64 KiB), CRLF excluded.
    public static let maxControlLine = 64 << 10

    /// Creates a parser.
    ///
    /// - Parameter maxPayload: The largest payload accepted (default 64 MiB).
    public init(maxPayload: Int = 64 << 20) { self.maxPayload = maxPayload }

    /// Adds bytes read from the socket.
    public mutating func append<Bytes: Collection>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        if offset > 0, offset == buffer.count {
            buffer.removeAll(keepingCapacity: buffer.capacity <= 1 << 20)
            scanned = 0
            offset = 0
        } else if offset > 1 << 20 {
            buffer.removeFirst(offset)
            scanned = max(0, scanned - offset)
            offset = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// Bytes appended and not yet parsed.
    public var buffered: Int { buffer.count - offset }

    /// The next complete operation, or `nil` when more bytes are needed.
    ///
    /// - Throws: ``NATSProtocolError`` for bytes that are not the protocol.
    public mutating func next() throws(NATSProtocolError) -> NATSServerOp? {
        // Empty lines are skipped in a loop, never by recursion: a server sending a megabyte of
        // CRLFs must not exhaust the stack.
        var lineEnd: Int
        var tokens: [ArraySlice<UInt8>]
        while true {
            guard let end = findCRLF(from: offset) else {
                // (Its CR may be here already, its LF not yet.)
                if buffer.count - offset > Self.maxControlLine + 1 { throw NATSProtocolError("a control line longer than 64 KiB") }
                return nil
            }
            // The same verdict however the line arrived: whole, or in pieces.
            guard end - offset <= Self.maxControlLine else { throw NATSProtocolError("a control line longer than 64 KiB") }
            lineEnd = end
            tokens = buffer[offset..<end].split(whereSeparator: { $0 == 0x20 || $0 == 0x09 })
            if !tokens.isEmpty { break }
            offset = end + 2
        }
        let line = buffer[offset..<lineEnd]
        guard let verb = tokens.first.map({ String(decoding: $0, as: UTF8.self).uppercased() }) else { return nil }
        switch verb {
        case "PING":
            offset = lineEnd + 2
            return .ping
        case "PONG":
            offset = lineEnd + 2
            return .pong
        case "+OK":
            offset = lineEnd + 2
            return .ok
        case "-ERR":
            offset = lineEnd + 2
            var text = String(decoding: line.dropFirst(4), as: UTF8.self).trimmingSpaces
            if text.hasPrefix("'"), text.hasSuffix("'"), text.count >= 2 { text = String(text.dropFirst().dropLast()) }
            return .error(text)
        case "INFO":
            offset = lineEnd + 2
            let body = line.dropFirst(4)
            guard let json = try? JSON(parsing: Array(body).trimmingWhitespace) else {
                throw NATSProtocolError("an INFO whose body is not JSON")
            }
            return .info(json)
        case "MSG", "HMSG":
            let headered = verb == "HMSG"
            let count = tokens.count
            guard headered ? (count == 5 || count == 6) : (count == 4 || count == 5) else {
                throw NATSProtocolError("a \(verb) line with \(count) tokens")
            }
            let subject = String(decoding: tokens[1], as: UTF8.self)
            guard let sid = Int(String(decoding: tokens[2], as: UTF8.self)) else { throw NATSProtocolError("a bad sid") }
            let hasReply = headered ? count == 6 : count == 5
            let reply = hasReply ? String(decoding: tokens[3], as: UTF8.self) : nil
            guard let total = Int(String(decoding: tokens[count - 1], as: UTF8.self)), total >= 0, total <= maxPayload else {
                throw NATSProtocolError("a bad or too large message size")
            }
            var headerSize = 0
            if headered {
                guard let size = Int(String(decoding: tokens[count - 2], as: UTF8.self)), size >= 0, size <= total else {
                    throw NATSProtocolError("a bad header size")
                }
                headerSize = size
            }
            let start = lineEnd + 2
            guard buffer.count >= start + total + 2 else { return nil }
            guard buffer[start + total] == 0x0D, buffer[start + total + 1] == 0x0A else {
                throw NATSProtocolError("a message not followed by CRLF")
            }
            var headers: NATSHeaders?
            if headered {
                guard let decoded = NATSHeaders.decode(buffer[start..<(start + headerSize)]) else {
                    throw NATSProtocolError("a malformed header block")
                }
                headers = decoded
            }
            let payload = Array(buffer[(start + headerSize)..<(start + total)])
            offset = start + total + 2
            return .message(NATSMessage(subject: subject, sid: sid, reply: reply, headers: headers, payload: payload))
        default:
            throw NATSProtocolError("an unknown operation \"\(verb.prefix(16))\"")
        }
    }

    /// Where the search for the current line's CRLF goes on: the bytes before it were looked at
    /// already, so a line that arrives a few bytes at a time is scanned once, not once per piece.
    private var scanned = 0

    private mutating func findCRLF(from start: Int) -> Int? {
        var index = max(start, scanned)
        while index + 1 < buffer.count {
            if buffer[index] == 0x0D, buffer[index + 1] == 0x0A { return index }
            index += 1
        }
        // The last byte may be the CR of a CRLF whose LF has not arrived.
        scanned = max(start, buffer.count - 1)
        return nil
    }
}

extension String {
    fileprivate var trimmingSpaces: String {
        String(self.drop(while: { $0 == " " }).reversed().drop(while: { $0 == " " }).reversed())
    }
}

extension Array where Element == UInt8 {
    fileprivate var trimmingWhitespace: [UInt8] {
        var slice = self[...]
        while let first = slice.first, first == 0x20 || first == 0x09 { slice = slice.dropFirst() }
        while let last = slice.last, last == 0x20 || last == 0x09 { slice = slice.dropLast() }
        return Array(slice)
    }
}
