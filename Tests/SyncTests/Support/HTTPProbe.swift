#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import SyncPOSIX

/// A minimal HTTP client for the inspector's tests: raw bytes over TCP, so a test can send a
/// request no browser would.
enum HTTPProbe {
    /// An answer: its status, headers (lower-cased names) and body.
    struct Answer {
        var status: Int
        var headers: [String: String]
        var body: [UInt8]
        var text: String { String(decoding: body, as: UTF8.self) }
    }

    /// A `GET` with the usual headers.
    static func get(port: Int, _ target: String, host: String? = nil, extra: [String] = []) throws -> Answer {
        var head = "GET \(target) HTTP/1.1\r\nHost: \(host ?? "127.0.0.1:\(port)")\r\n"
        for line in extra { head += line + "\r\n" }
        return try send(port: port, Array((head + "\r\n").utf8))
    }

    /// Sends bytes, then reads the answer until the server closes (at most `timeout`).
    static func send(port: Int, _ bytes: [UInt8], timeout: Duration = .seconds(10)) throws -> Answer {
        let fd = try TCPSocket.connect(host: "127.0.0.1", port: port, timeoutMilliseconds: 5_000)
        defer { UnixSocket.close(fd) }
        try UnixSocket.writeAll(fd, bytes)
        let data = try readUntilClosed(fd, timeout: timeout)
        return try parse(data)
    }

    /// Reads until end of file or the deadline.
    static func readUntilClosed(_ fd: Int32, timeout: Duration, stopWhen: (([UInt8]) -> Bool)? = nil) throws -> [UInt8] {
        let deadline = ContinuousClock.now + timeout
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while ContinuousClock.now < deadline {
            _ = UnixSocket.waitUntil(fd, timeoutMilliseconds: 200)
            switch buffer.withUnsafeMutableBytes({ UnixSocket.read(fd, into: $0) }) {
            case .bytes(let count):
                data += buffer[0..<count]
                if let stopWhen, stopWhen(data) { return data }
            case .wouldBlock:
                continue
            case .endOfFile, .failed:
                return data
            }
        }
        if stopWhen != nil { throw HarnessError("no expected bytes within \(timeout); got \(String(decoding: data.prefix(400), as: UTF8.self))") }
        return data
    }

    /// Splits an answer into status, headers and body.
    static func parse(_ data: [UInt8]) throws -> Answer {
        let text = String(decoding: data, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { throw HarnessError("no complete HTTP answer: \(text.prefix(300))") }
        let head = text[..<split.lowerBound].components(separatedBy: "\r\n")
        guard let first = head.first, let status = Int(first.split(separator: " ").dropFirst().first ?? "") else {
            throw HarnessError("bad status line: \(head.first ?? "")")
        }
        var headers: [String: String] = [:]
        for line in head.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let bodyStart = data.count - text[split.upperBound...].utf8.count
        return Answer(status: status, headers: headers, body: Array(data[bodyStart...]))
    }
}
