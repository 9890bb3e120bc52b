#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import SyncCore
import SyncLocks
import SyncPOSIX

/// The inspector's HTTP/1.1 server: our own, small, on one thread of its own, in the
/// inspector's process (never the hub's).
///
/// Loopback only (``TCPSocket/listenOnLoopback(host:port:)``), `GET` only, every request
/// checked by ``InspectorAccess``, and every resource a client can make it hold bounded:
/// - at most ``Limits/maxConnections`` connections serving requests that carried the token
///   (one more allowed request gets 503 with `Retry-After`, or, for the live stream, a
///   `busy` event and a `retry:` its `EventSource` reconnects after);
/// - at most ``Limits/maxUnproven`` more that have not shown the token yet: one more closes
///   the one of those idle longest, so connections without the token cannot take the slots of
///   the token's holders;
/// - a request head of at most 8 KiB (431);
/// - at most ``Limits/requestsPerSecond`` allowed requests a second with a burst of twice
///   that, and as many refused ones on a budget of their own, so a flood of bad requests
///   cannot starve the page (429);
/// - a whole head within ``Limits/headTimeout``, and an answer read with progress at least
///   that often (else it is closed);
/// - for a live stream (server-sent events), at most ``Limits/maxStreamBytes`` that its
///   reader leaves unread (then that stream is closed; the page reconnects). The stream's
///   first chunk is bounded by the route (the page asks for older actions in pages), so a new
///   stream is never closed for its own start.
/// Every answer but a stream closes its connection.
///
/// The handler runs on a queue of its own, not on the server's thread: a slow answer (a state
/// rebuilt from a data directory) holds up no stream and no other client.
final class InspectorServer: Sendable {
    /// The bounds.
    struct Limits: Sendable {
        /// The most connections at once serving requests that carried the token.
        var maxConnections = 16
        /// The most connections at once that have not shown the token yet (reading a head, or
        /// being refused).
        var maxUnproven = 16
        /// What a refused live stream's `retry:` asks its `EventSource` to wait before
        /// reconnecting, and a 503's `Retry-After`.
        var retryAfter: Duration = .seconds(2)
        /// How long a new connection has to send its request before one more connection
        /// without the token may push it out (newcomers wait in the listen backlog meanwhile).
        var grace: Duration = .milliseconds(250)
        /// Requests accepted a second (a burst of twice as many is allowed).
        var requestsPerSecond = 50
        /// How long a connection may take to send a whole request head.
        var headTimeout: Duration = .seconds(10)
        /// The most bytes queued for one live stream.
        var maxStreamBytes = 4 << 20
    }

    /// What the handler answers.
    enum Reply: Sendable {
        /// One response, then the connection closes.
        case response(status: Int, contentType: String, body: [UInt8], headers: [(String, String)] = [])
        /// A live stream of server-sent events: these bytes first, then every ``InspectorServer/broadcast(_:)``.
        case stream(initial: [UInt8])
    }

    private let listener: Int32
    /// The port it listens on.
    let port: Int
    private let access: InspectorAccess
    private let limits: Limits
    private let handler: @Sendable (HTTPRequest) -> Reply
    /// Whether a request asks for the live stream (a refusal for lack of room is then a
    /// stream that says so and asks its `EventSource` to retry).
    private let isStreamRequest: @Sendable (HTTPRequest) -> Bool
    private let wake: (read: Int32, write: Int32)
    /// Event bytes for every stream, handed over by other threads.
    private let outbox = Locked<(chunks: [[UInt8]], bytes: Int, overflow: Bool, stop: Bool)>(([], 0, false, false))
    /// Answers the handler finished, by client number, for the server's thread to send.
    private let answered = Locked<[(client: UInt64, reply: Reply)]>([])
    /// Where the handler runs (one request at a time, in order).
    private let handlerQueue = DispatchQueue(label: "storesync.inspector.handler")

    /// Creates the server on a listening descriptor.
    ///
    /// - Parameters:
    ///   - listener: A loopback listening socket (non-blocking).
    ///   - port: Its port.
    ///   - access: Who may read.
    ///   - limits: The bounds.
    ///   - isStreamRequest: Whether a request asks for the live stream (default: its path is
    ///     `/api/events`).
    ///   - handler: Answers an allowed request (on a queue of the server's own).
    /// - Throws: ``SystemError`` when the wake pipe cannot be made.
    init(listener: Int32, port: Int, access: InspectorAccess, limits: Limits = Limits(),
         isStreamRequest: @escaping @Sendable (HTTPRequest) -> Bool = { $0.path == "/api/events" },
         handler: @escaping @Sendable (HTTPRequest) -> Reply) throws(SystemError) {
        self.listener = listener
        self.port = port
        self.access = access
        self.limits = limits
        self.isStreamRequest = isStreamRequest
        self.handler = handler
        wake = try UnixSocket.makePipe()
    }

    /// Queues bytes for every live stream (any thread). Past 16 MiB waiting (the server's
    /// thread is stuck), the streams are closed instead, and the pages reconnect.
    ///
    /// - Parameter bytes: Server-sent event bytes.
    func broadcast(_ bytes: [UInt8]) {
        // One wake-up per batch: only the first chunk into an empty outbox wakes the server.
        let wasEmpty = outbox.withLock { box -> Bool in
            guard !box.overflow else { return false }
            box.chunks.append(bytes)
            box.bytes += bytes.count
            if box.bytes > 16 << 20 { box.overflow = true }
            return box.chunks.count == 1
        }
        guard wasEmpty else { return }
        var byte: UInt8 = 1
        _ = Glibc_write(wake.write, &byte, 1)
    }

    /// Asks ``run()`` to return (any thread).
    func stop() {
        outbox.withLock { $0.stop = true }
        var byte: UInt8 = 1
        _ = Glibc_write(wake.write, &byte, 1)
    }

    /// One client connection (the server's thread only).
    private final class Client {
        let fd: Int32
        /// Its number, unique for the server's run (a descriptor number is reused).
        let number: UInt64
        var input: [UInt8] = []
        var output: [UInt8] = []
        var written = 0
        var isStream = false
        var closeWhenWritten = false
        /// Its request carried the token (it holds one of ``Limits/maxConnections``).
        var proven = false
        /// When it last sent or read anything (the idle longest of the unproven goes first).
        var active: ContinuousClock.Instant
        /// When it was accepted (it is not pushed out within ``Limits/grace`` of that).
        let accepted: ContinuousClock.Instant
        /// Its request is with the handler.
        var awaitingAnswer = false
        /// Its whole head must have arrived by then; then, while an answer is written, it must
        /// have read some of it by then (moved on at each progress).
        var deadline: ContinuousClock.Instant
        init(fd: Int32, number: UInt64, now: ContinuousClock.Instant, deadline: ContinuousClock.Instant) {
            self.fd = fd
            self.number = number
            self.active = now
            self.accepted = now
            self.deadline = deadline
        }
        var pending: Int { output.count - written }
    }

    /// Serves until ``stop()``; then closes every connection and the listener.
    func run() {
        var clients: [Int32: Client] = [:]
        var numbers: UInt64 = 0
        var allowedBudget = Budget(perSecond: limits.requestsPerSecond)
        var refusedBudget = Budget(perSecond: limits.requestsPerSecond)
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        defer {
            for client in clients.values { UnixSocket.close(client.fd) }
            UnixSocket.close(listener)
            UnixSocket.close(wake.read)
            UnixSocket.close(wake.write)
        }
        // While every connection without the token is within its grace, newcomers wait in the
        // listen backlog until then.
        var acceptPausedUntil: ContinuousClock.Instant?
        while true {
            let paused = acceptPausedUntil.map { ContinuousClock.now < $0 } ?? false
            var set = [pollfd(fd: listener, events: paused ? 0 : Int16(POLLIN), revents: 0),
                       pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)]
            let order = Array(clients.values)
            for client in order {
                var events: Int16 = client.isStream || client.closeWhenWritten || client.awaitingAnswer ? 0 : Int16(POLLIN)
                if client.pending > 0 { events |= Int16(POLLOUT) }
                // A stream is polled for input too: its peer closing is how it ends.
                if client.isStream { events |= Int16(POLLIN) }
                set.append(pollfd(fd: client.fd, events: events, revents: 0))
            }
            var timeout: Int32 = 1_000
            if paused, let until = acceptPausedUntil {
                let left = (until - ContinuousClock.now).components
                timeout = Int32(clamping: max(1, left.seconds * 1_000 + left.attoseconds / 1_000_000_000_000_000 + 1))
            }
            _ = poll(&set, nfds_t(set.count), timeout)
            let now = ContinuousClock.now
            if set[1].revents != 0 {
                var scratch = [UInt8](repeating: 0, count: 256)
                while scratch.withUnsafeMutableBytes({ Glibc_read(wake.read, $0.baseAddress, $0.count) }) > 0 {}
            }
            let (chunks, overflow, stopping) = outbox.withLock { box -> ([[UInt8]], Bool, Bool) in
                defer { box = ([], 0, false, box.stop) }
                return (box.chunks, box.overflow, box.stop)
            }
            if stopping { return }
            let replies: [(client: UInt64, reply: Reply)] = answered.withLock { list in
                let taken = list
                list = []
                return taken
            }
            for (number, reply) in replies {
                guard let client = clients.values.first(where: { $0.number == number }) else { continue }
                client.awaitingAnswer = false
                switch reply {
                case .response(let status, let contentType, let body, let headers):
                    client.output += Self.head(status: status, contentType: contentType, length: body.count, headers: headers) + body
                    client.closeWhenWritten = true
                    client.deadline = now + limits.headTimeout
                case .stream(let initial):
                    client.output += Self.streamHead() + initial
                    client.isStream = true
                }
            }
            for client in clients.values where client.isStream {
                if overflow {
                    client.closeWhenWritten = true
                    continue
                }
                for chunk in chunks { client.output += chunk }
            }
            // What the clients sent and can take first, then new connections: a head that has
            // arrived is read before a newcomer could push its connection out.
            for (index, client) in order.enumerated() {
                guard clients[client.fd] === client else { continue }
                let revents = set[index + 2].revents
                if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0 {
                    let result = buffer.withUnsafeMutableBytes { UnixSocket.read(client.fd, into: $0) }
                    switch result {
                    case .bytes(let count):
                        client.active = now
                        if !client.isStream, !client.closeWhenWritten, !client.awaitingAnswer {
                            client.input += buffer[0..<count]
                            let serving = clients.values.count { $0.proven }
                            serve(client, serving: serving, allowed: &allowedBudget, refused: &refusedBudget, now: now)
                        }
                    case .wouldBlock:
                        break
                    case .endOfFile, .failed:
                        UnixSocket.close(client.fd)
                        clients[client.fd] = nil
                        continue
                    }
                }
                if client.pending > 0 {
                    let result = client.output[client.written...].withUnsafeBytes { UnixSocket.write(client.fd, $0, dontWait: true) }
                    switch result {
                    case .bytes(let count):
                        client.written += count
                        if count > 0 { client.active = now }
                        if client.closeWhenWritten { client.deadline = now + limits.headTimeout }
                    case .wouldBlock: break
                    case .endOfFile, .failed:
                        UnixSocket.close(client.fd)
                        clients[client.fd] = nil
                        continue
                    }
                    if client.written > 1 << 20, client.written * 2 > client.output.count {
                        client.output.removeFirst(client.written)
                        client.written = 0
                    }
                }
                // A head that never ends, or an answer nobody reads: closed. A stream is closed
                // when its reader leaves more than its bound unread, after what it could take was written.
                let late = !client.isStream && !client.awaitingAnswer && now >= client.deadline
                let unread = client.isStream && client.pending > limits.maxStreamBytes
                if late || unread || (client.closeWhenWritten && client.pending == 0) {
                    UnixSocket.close(client.fd)
                    clients[client.fd] = nil
                }
            }
            if set[0].revents != 0 || (acceptPausedUntil.map { now >= $0 } ?? false) {
                acceptPausedUntil = nil
                while true {
                    // Connections that have not shown the token have a share of their own: past
                    // it, the one idle longest among those past their grace makes room (never one
                    // serving the token's holders, never one just accepted, whose request may be
                    // on its way). When all are that new, newcomers wait in the backlog.
                    let unproven = clients.values.filter { !$0.proven }
                    if unproven.count >= limits.maxUnproven {
                        guard let idlest = unproven.filter({ now - $0.accepted >= limits.grace }).min(by: { $0.active < $1.active }) else {
                            acceptPausedUntil = unproven.map(\.accepted).min().map { $0 + limits.grace } ?? now + limits.grace
                            break
                        }
                        // Only for a connection that is waiting.
                        var waiting = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
                        guard poll(&waiting, 1, 0) > 0, waiting.revents & Int16(POLLIN) != 0 else { break }
                        UnixSocket.close(idlest.fd)
                        clients[idlest.fd] = nil
                    }
                    guard let fd = try? UnixSocket.accept(listener) else { break }
                    numbers += 1
                    clients[fd] = Client(fd: fd, number: numbers, now: now, deadline: now + limits.headTimeout)
                }
            }
        }
    }

    /// Answers the request a client has sent, once its head is whole.
    ///
    /// - Parameters:
    ///   - client: The client.
    ///   - serving: How many connections serve the token's holders now.
    ///   - allowed: The budget of allowed requests.
    ///   - refused: The budget of refused ones.
    ///   - now: The time.
    private func serve(_ client: Client, serving: Int, allowed: inout Budget, refused: inout Budget, now: ContinuousClock.Instant) {
        switch HTTPRequest.parse(client.input) {
        case .incomplete:
            return
        case .malformed(let status, let reason):
            guard refused.take(now: now) else { return respond(client, status: 429, body: "too many requests; slow down") }
            respond(client, status: status, body: reason)
        case .request(let request, _):
            switch access.decide(request) {
            case .refuse(let status, let reason):
                // Refused requests spend a budget of their own: a flood of them cannot starve the page.
                guard refused.take(now: now) else { return respond(client, status: 429, body: "too many requests; slow down") }
                respond(client, status: status, body: reason,
                        headers: status == 405 ? [("Allow", "GET")] : [])
            case .allow:
                guard allowed.take(now: now) else {
                    return respond(client, status: 429, body: "more than \(limits.requestsPerSecond) requests a second; slow down")
                }
                guard serving < limits.maxConnections else {
                    // Full with the token's holders: said in a way the asker retries on.
                    let seconds = max(1, Int(limits.retryAfter.components.seconds))
                    let message = "the inspector serves at most \(limits.maxConnections) connections at once, all in use; retrying in \(seconds) s"
                    guard isStreamRequest(request) else {
                        return respond(client, status: 503, body: message, headers: [("Retry-After", String(seconds))])
                    }
                    // An EventSource gives up for good on any status but 200; a 200 stream that
                    // sets `retry:` and ends is reconnected after that long.
                    var body = Self.streamHead()
                    body += "retry: \(seconds * 1000)\n\n".utf8
                    body += InspectorCommand.event("busy", JSON.object(["message": .string(message)]).canonicalBytes)
                    client.output += body
                    client.closeWhenWritten = true
                    client.input = []
                    return
                }
                client.proven = true
                client.awaitingAnswer = true
                let number = client.number, handler = self.handler, answered = self.answered, wake = self.wake.write
                handlerQueue.async {
                    let reply = handler(request)
                    answered.withLock { $0.append((number, reply)) }
                    var byte: UInt8 = 1
                    _ = Glibc_write(wake, &byte, 1)
                }
            }
        }
        client.input = []
    }

    /// A token bucket: `perSecond` a second, bursts of twice that.
    private struct Budget {
        let perSecond: Int
        var tokens: Double
        var refilled = ContinuousClock.now
        init(perSecond: Int) {
            self.perSecond = perSecond
            tokens = Double(perSecond * 2)
        }
        /// Takes one token, if there is one.
        mutating func take(now: ContinuousClock.Instant) -> Bool {
            let (seconds, attoseconds) = (now - refilled).components
            refilled = now
            tokens = min(Double(perSecond * 2), tokens + (Double(seconds) + Double(attoseconds) / 1e18) * Double(perSecond))
            guard tokens >= 1 else { return false }
            tokens -= 1
            return true
        }
    }

    private func respond(_ client: Client, status: Int, body: String, headers: [(String, String)] = []) {
        let bytes = Array((body + "\n").utf8)
        client.output += Self.head(status: status, contentType: "text/plain; charset=utf-8", length: bytes.count, headers: headers) + bytes
        client.closeWhenWritten = true
    }

    /// The headers every answer carries: no caching, no sniffing, no referrer, and a page
    /// that may load nothing from anywhere but itself.
    private static let common = "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n"
        + "X-Frame-Options: DENY\r\nContent-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        + "connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'\r\n"

    private static func head(status: Int, contentType: String, length: Int, headers: [(String, String)]) -> [UInt8] {
        var text = "HTTP/1.1 \(status) \(reason(status))\r\nContent-Type: \(contentType)\r\nContent-Length: \(length)\r\n"
        text += common
        for (name, value) in headers { text += "\(name): \(value)\r\n" }
        text += "Connection: close\r\n\r\n"
        return Array(text.utf8)
    }

    private static func streamHead() -> [UInt8] {
        Array(("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n" + common + "\r\n").utf8)
    }

    private static func reason(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 413: "Content Too Large"
        case 400: "Bad Request"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 503: "Service Unavailable"
        case 505: "HTTP Version Not Supported"
        default: "Status"
        }
    }
}

@inline(__always) private func Glibc_write(_ fd: Int32, _ bytes: UnsafeRawPointer?, _ count: Int) -> Int {
    write(fd, bytes, count)
}

@inline(__always) private func Glibc_read(_ fd: Int32, _ bytes: UnsafeMutableRawPointer?, _ count: Int) -> Int {
    read(fd, bytes, count)
}
