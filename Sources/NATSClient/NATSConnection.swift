#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import SyncPOSIX
import SyncProtocol

/// Why talking to NATS failed.
public struct NATSError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of failure.
    public enum Kind: Sendable, Equatable {
        /// No server could be reached, or the connection broke.
        case unreachable
        /// The server refused the credentials (`Authorization Violation`).
        case authorization
        /// No answer in time.
        case timeout
        /// The server sent something that is not the protocol, or an `-ERR`.
        case protocolError
        /// A JetStream API call answered with an error (`code`, `err_code`).
        case api(code: Int, errCode: Int)
        /// No server answers on the subject (NATS status 503): JetStream off, or no quorum.
        case noResponders
        /// The server asks for what this client does not do: TLS (`tls_required`). Nothing,
        /// credentials least of all, was sent to it.
        case unsupported
    }

    /// What kind of failure.
    public let kind: Kind
    /// What happened, for a person; never holds a credential.
    public let message: String

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - kind: What kind of failure.
    ///   - message: What happened, for a person.
    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    /// ``message``.
    public var description: String { message }
}

/// A NATS client connection over TCP, used by one thread at a time: the text protocol
/// (`INFO`, `CONNECT`, `PUB`, `HPUB`, `SUB`, `UNSUB`, `PING`, `PONG`, `MSG`, `HMSG`, `+OK`,
/// `-ERR`), request/reply on an inbox, and the JetStream JSON API on top.
///
/// Writes are buffered until ``flush(timeoutMilliseconds:)``; reads wait with `poll` up to a
/// time limit. A `PING` from the server is answered as it is read; an `INFO` updates ``info``.
public final class NATSConnection {
    /// The socket.
    public let fd: Int32
    /// The server it is connected to, `host:port`.
    public let server: String
    /// The server's latest `INFO`.
    public private(set) var info: JSON
    /// The largest message (headers and payload) the server accepts, as its `INFO` says
    /// (between 1 KiB and 64 MiB whatever it says; 1 MiB when it says nothing).
    public var maxPayload: Int { min(64 << 20, max(1 << 10, info["max_payload"]?.intValue ?? 1 << 20)) }
    /// The server's release, as its `INFO` says (`nil`: it did not say, or not as numbers).
    public var serverVersion: NATSServerVersion? { info["version"]?.stringValue.flatMap { NATSServerVersion($0) } }
    /// The most messages kept for the next ``read(timeoutMilliseconds:)`` while waiting for a
    /// reply: a server that sends more than this meanwhile breaks the connection.
    public static let maxQueuedMessages = 65_536
    private var parser = NATSParser(maxPayload: 1 << 20)
    private var output: [UInt8] = []
    private var nextSID = 1
    /// `_INBOX.<random>`: this connection's own reply subjects start with it.
    public let inboxPrefix: String
    private var requestSID = 0
    private var requestCounter = 0
    /// Messages read while waiting for something else, handed out by the next ``read(timeoutMilliseconds:)``.
    private var queued: [NATSMessage] = []
    private var closed = false

    /// Whether messages read while waiting for a reply are waiting for the next
    /// ``read(timeoutMilliseconds:)`` (the socket may then have nothing new to wake a poll).
    public var hasQueuedMessages: Bool { !queued.isEmpty }

    private init(fd: Int32, server: String, info: JSON) {
        self.fd = fd
        self.server = server
        self.info = info
        inboxPrefix = "_INBOX." + Digest.hex(UInt64.random(in: 0...UInt64.max))
    }

    deinit { close() }

    /// Connects to the first server of `servers` that answers, and completes the handshake
    /// (`INFO`, `CONNECT`, `PING` → `PONG`).
    ///
    /// - Parameters:
    ///   - servers: `host:port` each, tried in order.
    ///   - user: A user name (with `password`).
    ///   - password: The password.
    ///   - token: A token, instead of user and password.
    ///   - name: This client's name, shown by the server.
    ///   - timeoutMilliseconds: The longest wait for each step.
    /// - Returns: The connection.
    /// - Throws: ``NATSError`` for the last server tried.
    public static func connect(servers: [String], user: String? = nil, password: String? = nil, token: String? = nil,
                               name: String, timeoutMilliseconds: Int32 = 2_000) throws(NATSError) -> NATSConnection {
        var last = NATSError(.unreachable, "no NATS server to connect to")
        for server in servers {
            do throws(NATSError) {
                return try connect(server: server, user: user, password: password, token: token, name: name,
                                   timeoutMilliseconds: timeoutMilliseconds)
            } catch {
                last = error
                if error.kind == .authorization || error.kind == .unsupported { throw error }
            }
        }
        throw last
    }

    private static func connect(server: String, user: String?, password: String?, token: String?, name: String,
                                timeoutMilliseconds: Int32) throws(NATSError) -> NATSConnection {
        guard let colon = server.lastIndex(of: ":"), let port = Int(server[server.index(after: colon)...]) else {
            throw NATSError(.unreachable, "\"\(server)\" is not HOST:PORT")
        }
        let host = String(server[..<colon])
        let fd: Int32
        do throws(SystemError) {
            fd = try TCPSocket.connect(host: host, port: port, timeoutMilliseconds: timeoutMilliseconds)
        } catch {
            throw NATSError(.unreachable, "cannot reach NATS at \(server): \(error.message)")
        }
        let connection = NATSConnection(fd: fd, server: server, info: .null)
        do throws(NATSError) {
            // The server speaks first: INFO.
            let deadline = ContinuousClock.now + .milliseconds(Int(timeoutMilliseconds))
            while connection.info == .null {
                guard ContinuousClock.now < deadline else { throw NATSError(.timeout, "no INFO from \(server) in time; is it a NATS server?") }
                _ = try connection.read(timeoutMilliseconds: timeoutMilliseconds)
            }
            if connection.info["tls_required"]?.boolValue == true {
                // This client has no TLS: nothing is sent, credentials least of all.
                throw NATSError(.unsupported, "NATS at \(server) requires TLS, which this client does not speak; nothing was sent to it (no credentials). Connect to a NATS server on this host over loopback without TLS (a member of the cluster, with TLS between the servers)")
            }
            // Messages past the server's own limit are a broken protocol, not something to buffer.
            connection.parser = NATSParser(maxPayload: connection.maxPayload + 64 << 10)
            var options: [JSONKey: JSON] = [
                "verbose": false, "pedantic": false, "headers": true, "no_responders": true, "protocol": 1,
                "lang": "swift", "version": .string(StoreSyncVersion.current), "name": .string(name),
            ]
            if let user { options["user"] = .string(user) }
            if let password { options["pass"] = .string(password) }
            if let token { options["auth_token"] = .string(token) }
            connection.output.append(contentsOf: "CONNECT ".utf8)
            connection.output.append(contentsOf: JSON.object(options).canonicalBytes)
            connection.output.append(contentsOf: "\r\nPING\r\n".utf8)
            try connection.flush(timeoutMilliseconds: timeoutMilliseconds)
            try connection.waitForPong(timeoutMilliseconds: timeoutMilliseconds)
            return connection
        } catch {
            connection.close()
            throw error
        }
    }

    /// Closes the connection (idempotent).
    public func close() {
        guard !closed else { return }
        closed = true
        // Nothing is written or read after this: the descriptor's number may be reused by
        // another socket or file of this process.
        output.removeAll()
        queued.removeAll()
        UnixSocket.close(fd)
    }

    /// A new subject only this connection's inbox subscription receives.
    public func newInbox() -> String {
        requestCounter += 1
        return inboxPrefix + "." + String(requestCounter)
    }

    /// Subscribes to `subject`.
    ///
    /// - Returns: The subscription id, found in the messages it receives.
    @discardableResult
    public func subscribe(_ subject: String) -> Int {
        let sid = nextSID
        nextSID += 1
        output.append(contentsOf: "SUB \(subject) \(sid)\r\n".utf8)
        return sid
    }

    /// Ends a subscription.
    public func unsubscribe(_ sid: Int) {
        output.append(contentsOf: "UNSUB \(sid)\r\n".utf8)
    }

    /// Queues a message (`PUB`, or `HPUB` with headers).
    ///
    /// - Parameters:
    ///   - subject: The subject.
    ///   - reply: The reply subject, if any.
    ///   - headers: Headers, if any.
    ///   - payload: The payload.
    public func publish(_ subject: String, reply: String? = nil, headers: NATSHeaders? = nil, payload: [UInt8]) {
        guard !closed else { return }
        let replyPart = reply.map { " " + $0 } ?? ""
        if let headers {
            let block = headers.encoded
            output.append(contentsOf: "HPUB \(subject)\(replyPart) \(block.count) \(block.count + payload.count)\r\n".utf8)
            output.append(contentsOf: block)
        } else {
            output.append(contentsOf: "PUB \(subject)\(replyPart) \(payload.count)\r\n".utf8)
        }
        output.append(contentsOf: payload)
        output.append(contentsOf: "\r\n".utf8)
    }

    /// Queues a `PING` (the server answers `PONG`: a round trip through everything sent before).
    public func ping() { output.append(contentsOf: "PING\r\n".utf8) }

    /// Whether bytes wait to be written.
    public var hasOutput: Bool { !output.isEmpty }

    /// Writes what is queued; waits at most `timeoutMilliseconds` for the socket to take it
    /// (0: only what it takes now).
    ///
    /// - Throws: ``NATSError`` when the connection is broken or too slow.
    public func flush(timeoutMilliseconds: Int32 = 5_000) throws(NATSError) {
        guard !closed else { throw NATSError(.unreachable, "the connection to NATS at \(server) is closed") }
        let deadline = ContinuousClock.now + .milliseconds(Int(max(0, timeoutMilliseconds)))
        while !output.isEmpty {
            let result = output.withUnsafeBytes { UnixSocket.write(fd, $0, dontWait: true) }
            switch result {
            case .bytes(let count):
                output.removeFirst(count)
            case .wouldBlock:
                let left = deadline - ContinuousClock.now
                guard timeoutMilliseconds > 0, left > .zero else {
                    if timeoutMilliseconds == 0 { return }
                    throw NATSError(.timeout, "NATS at \(server) does not take what is sent")
                }
                let milliseconds = Int32(clamping: max(1, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000))
                _ = UnixSocket.waitUntil(fd, writable: true, timeoutMilliseconds: milliseconds)
            case .endOfFile, .failed:
                throw NATSError(.unreachable, "the connection to NATS at \(server) broke while writing")
            }
        }
    }

    /// Reads what arrives within `timeoutMilliseconds` (one read once something is there;
    /// 0: only what is there now) and returns the messages, answering `PING`s.
    ///
    /// - Throws: ``NATSError`` when the server closed the connection, sent `-ERR`, or broke the protocol.
    public func read(timeoutMilliseconds: Int32) throws(NATSError) -> [NATSMessage] {
        guard !closed else { throw NATSError(.unreachable, "the connection to NATS at \(server) is closed") }
        var messages = queued
        queued.removeAll()
        if UnixSocket.waitUntil(fd, timeoutMilliseconds: messages.isEmpty ? timeoutMilliseconds : 0) {
            var buffer = [UInt8](repeating: 0, count: 256 << 10)
            let result = buffer.withUnsafeMutableBytes { UnixSocket.read(fd, into: $0) }
            switch result {
            case .bytes(let count):
                parser.append(buffer[0..<count])
            case .wouldBlock:
                break
            case .endOfFile:
                throw NATSError(.unreachable, "NATS at \(server) closed the connection")
            case .failed(let code):
                throw NATSError(.unreachable, "the connection to NATS at \(server) broke: \(SystemError.describe(errno: code))")
            }
        }
        while true {
            let op: NATSServerOp?
            do throws(NATSProtocolError) {
                op = try parser.next()
            } catch {
                throw NATSError(.protocolError, "NATS at \(server) broke the protocol: \(error.description)")
            }
            guard let op else { break }
            switch op {
            case .info(let json): info = json
            case .ping: output.append(contentsOf: "PONG\r\n".utf8)
            case .pong, .ok: pongs += 1
            case .error(let text):
                let kind: NATSError.Kind = text.lowercased().contains("authorization") || text.lowercased().contains("authentication")
                    ? .authorization : .protocolError
                throw NATSError(kind, "NATS at \(server) said: \(text)")
            case .message(let message): messages.append(message)
            }
        }
        if hasOutput { try flush(timeoutMilliseconds: 0) }
        return messages
    }

    /// `PONG`s (and `+OK`s) read so far.
    private var pongs = 0

    private func waitForPong(timeoutMilliseconds: Int32) throws(NATSError) {
        let target = pongs + 1
        let deadline = ContinuousClock.now + .milliseconds(Int(timeoutMilliseconds))
        while pongs < target {
            guard ContinuousClock.now < deadline else { throw NATSError(.timeout, "no PONG from NATS at \(server) in time") }
            queued.append(contentsOf: try read(timeoutMilliseconds: 50))
        }
    }

    /// Sends a request and waits for its reply (other messages read meanwhile are kept for
    /// the next ``read(timeoutMilliseconds:)``).
    ///
    /// - Parameters:
    ///   - subject: The subject.
    ///   - payload: The payload.
    ///   - headers: Headers, if any.
    ///   - timeoutMilliseconds: The longest wait.
    /// - Returns: The reply.
    /// - Throws: ``NATSError``: `timeout`, `noResponders` (status 503), or a broken connection.
    public func request(_ subject: String, payload: [UInt8], headers: NATSHeaders? = nil,
                        timeoutMilliseconds: Int32 = 2_000) throws(NATSError) -> NATSMessage {
        if requestSID == 0 { requestSID = subscribe(inboxPrefix + ".r.*") }
        requestCounter += 1
        let reply = inboxPrefix + ".r." + String(requestCounter)
        publish(subject, reply: reply, headers: headers, payload: payload)
        try flush(timeoutMilliseconds: timeoutMilliseconds)
        let deadline = ContinuousClock.now + .milliseconds(Int(timeoutMilliseconds))
        var held: [NATSMessage] = []
        defer { queued.insert(contentsOf: held, at: 0) }
        while true {
            let left = deadline - ContinuousClock.now
            guard left > .zero else { throw NATSError(.timeout, "no answer from NATS at \(server) to \(subject) within \(timeoutMilliseconds) ms") }
            let wait = Int32(clamping: max(1, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000))
            // Every message of the batch but the reply is kept, also those read after it.
            var answer: NATSMessage?
            for message in try read(timeoutMilliseconds: wait) {
                if answer == nil, message.sid == requestSID, message.subject == reply {
                    answer = message
                } else {
                    held.append(message)
                }
                guard held.count + queued.count <= Self.maxQueuedMessages else {
                    throw NATSError(.protocolError, "NATS at \(server) sent more than \(Self.maxQueuedMessages) messages while this client waited for an answer to \(subject)")
                }
            }
            if let answer {
                if answer.headers?.status == 503 {
                    throw NATSError(.noResponders, "no NATS server answers on \(subject) (is JetStream on, with a quorum?)")
                }
                return answer
            }
        }
    }

    /// Calls the JetStream API: a request to `$JS.API.<api>` with a JSON body.
    ///
    /// - Returns: The response object.
    /// - Throws: ``NATSError``; an API error is `.api(code:errCode:)` with the server's description.
    public func jetStream(_ api: String, _ body: JSON?, timeoutMilliseconds: Int32 = 3_000) throws(NATSError) -> JSON {
        let reply = try request("$JS.API." + api, payload: body?.canonicalBytes ?? [], timeoutMilliseconds: timeoutMilliseconds)
        return try reply.jetStreamAnswer(to: api).get()
    }
}
