/// One HTTP/1.1 request head, as the inspector's server reads it: no body is ever read (the
/// server answers `GET` only).
struct HTTPRequest: Equatable, Sendable {
    /// The method, as sent (`GET`).
    let method: String
    /// The path, percent-decoded (`/api/state`).
    let path: String
    /// The query's parameters, percent-decoded; the first of a repeated name wins.
    let query: [String: String]
    /// The headers, by lower-cased name.
    let headers: [String: String]

    /// The most bytes a request head may take (request line and headers).
    static let maxHeadBytes = 8_192
    /// The most header lines.
    static let maxHeaders = 64

    /// What reading the bytes a client sent so far gives.
    enum Parse: Equatable {
        /// The head is not complete yet.
        case incomplete
        /// A whole head, and how many bytes it took.
        case request(HTTPRequest, consumed: Int)
        /// Not a request this server can read: the status to answer (400, 431, 505) and why.
        case malformed(status: Int, String)
    }

    /// Reads a request head from the start of `bytes`.
    ///
    /// A pure function: malformed input of any kind is `malformed` with the status to answer,
    /// never a crash. A head longer than ``maxHeadBytes`` is 431 (complete or not).
    ///
    /// - Parameter bytes: What the client sent.
    /// - Returns: The outcome.
    static func parse(_ bytes: [UInt8]) -> Parse {
        guard let end = headEnd(bytes) else {
            return bytes.count > maxHeadBytes
                ? .malformed(status: 431, "the request head is over \(maxHeadBytes) bytes") : .incomplete
        }
        guard end <= maxHeadBytes else { return .malformed(status: 431, "the request head is over \(maxHeadBytes) bytes") }
        // Lines end with CRLF (a bare LF is tolerated, as RFC 9112 allows).
        var lines: [ArraySlice<UInt8>] = []
        var start = 0
        var index = 0
        while index < end {
            if bytes[index] == 10 {
                var stop = index
                if stop > start, bytes[stop - 1] == 13 { stop -= 1 }
                lines.append(bytes[start..<stop])
                start = index + 1
            }
            index += 1
        }
        guard let requestLine = lines.first else { return .malformed(status: 400, "an empty request") }
        let parts = requestLine.split(separator: 32, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return .malformed(status: 400, "the request line is not METHOD TARGET VERSION") }
        let method = parts[0], target = parts[1], version = parts[2]
        guard !method.isEmpty, method.count <= 16, method.allSatisfy(isTokenCharacter) else {
            return .malformed(status: 400, "the method is not a token")
        }
        guard version.elementsEqual("HTTP/1.1".utf8) || version.elementsEqual("HTTP/1.0".utf8) else {
            return .malformed(status: 505, "only HTTP/1.1 and HTTP/1.0 are served")
        }
        guard target.first == UInt8(ascii: "/"), target.allSatisfy({ $0 > 32 && $0 < 127 }) else {
            return .malformed(status: 400, "the target is not an absolute path of visible ASCII")
        }
        var headers: [String: String] = [:]
        let headerLines = lines.dropFirst().filter { !$0.isEmpty }
        guard headerLines.count <= maxHeaders else { return .malformed(status: 431, "more than \(maxHeaders) header lines") }
        for line in headerLines {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return .malformed(status: 400, "a header line without a colon") }
            let name = line[line.startIndex..<colon]
            guard !name.isEmpty, name.allSatisfy(isTokenCharacter) else { return .malformed(status: 400, "a header name is not a token") }
            let value = line[(colon + 1)...]
            // Visible ASCII, spaces and tabs only: no control character reaches a log or a decision.
            guard value.allSatisfy({ ($0 >= 32 && $0 < 127) || $0 == 9 }) else {
                return .malformed(status: 400, "a header value holds a control or non-ASCII byte")
            }
            let key = String(decoding: name, as: UTF8.self).lowercased()
            let text = String(decoding: value, as: UTF8.self).trimmedOfSpaces()
            // One Host, one Origin: a repeated one is how requests are smuggled past a check.
            if headers[key] != nil, key == "host" || key == "origin" || key == "content-length" {
                return .malformed(status: 400, "the \(key) header is repeated")
            }
            headers[key] = headers[key].map { $0 + ", " + text } ?? text
        }
        if headers["transfer-encoding"] != nil || (headers["content-length"].map { $0 != "0" } ?? false) {
            return .malformed(status: 400, "a request body is not read by this server (it answers GET only)")
        }
        let targetText = String(decoding: target, as: UTF8.self)
        let (rawPath, rawQuery) = splitTarget(targetText)
        guard let path = percentDecoded(rawPath) else { return .malformed(status: 400, "the path has a bad percent escape") }
        var query: [String: String] = [:]
        for pair in rawQuery.split(separator: "&", omittingEmptySubsequences: true) {
            let halves = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = percentDecoded(String(halves[0])),
                  let value = percentDecoded(halves.count > 1 ? String(halves[1]) : "") else {
                return .malformed(status: 400, "the query has a bad percent escape")
            }
            if query[name] == nil { query[name] = value }
        }
        return .request(HTTPRequest(method: String(decoding: method, as: UTF8.self), path: path, query: query, headers: headers),
                        consumed: end)
    }

    /// The index just past the blank line that ends the head, if it is there.
    private static func headEnd(_ bytes: [UInt8]) -> Int? {
        var index = 0
        let limit = min(bytes.count, maxHeadBytes + 4)
        while index + 1 < limit {
            if bytes[index] == 10 {
                if bytes[index + 1] == 10 { return index + 2 }
                if index + 2 < bytes.count, bytes[index + 1] == 13, bytes[index + 2] == 10 { return index + 3 }
            }
            index += 1
        }
        return nil
    }

    /// Whether a byte may be part of an RFC 9110 token.
    private static func isTokenCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        default:
            "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }

    /// The path and the query of a target (`/a?b=c`).
    private static func splitTarget(_ target: String) -> (String, String) {
        guard let mark = target.firstIndex(of: "?") else { return (target, "") }
        return (String(target[..<mark]), String(target[target.index(after: mark)...]))
    }

    /// Decodes `%XX` escapes and `+` (a space, in a query); `nil` for a bad escape or bytes
    /// that are not UTF-8.
    static func percentDecoded(_ text: String) -> String? {
        var bytes: [UInt8] = []
        var iterator = Array(text.utf8).makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else { return nil }
                bytes.append(high << 4 | low)
            } else if byte == UInt8(ascii: "+") {
                bytes.append(32)
            } else {
                bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

extension String {
    /// The string without leading and trailing spaces and tabs.
    fileprivate func trimmedOfSpaces() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { $0 != " " && $0 != "\t" }),
              let last = scalars.lastIndex(where: { $0 != " " && $0 != "\t" }) else { return "" }
        return String(scalars[first...last])
    }
}
