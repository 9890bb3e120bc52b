/// Credentials written into URLs (`nats://USER:PASSWORD@HOST`), kept out of text that is shown.
///
/// Every line a program writes to standard error or to its log goes through
/// ``redacted(in:)``, whatever built it: an argument quoted in a usage error, a socket path, a
/// replica's name in the hub's log. A password given in the wrong place is then still never
/// printed.
public enum URLCredentials {
    /// The text with the user information of every URL in it replaced by `***`.
    ///
    /// In each `SCHEME://…`, what stands between `://` and the last `@` before the next space,
    /// quote, angle bracket or end of text is replaced (`nats://***@127.0.0.1:4222/s`). Text
    /// without `://` and `@` is returned as it is, without being copied.
    ///
    /// - Parameter text: A line of a message or a log.
    /// - Returns: The line without credentials.
    public static func redacted(in text: String) -> String {
        guard text.utf8.contains(UInt8(ascii: "@")), text.contains("://") else { return text }
        let scalars = Array(text.unicodeScalars)
        var result = String.UnicodeScalarView()
        var index = 0
        while index < scalars.count {
            guard scalars[index] == ":", index + 2 < scalars.count, scalars[index + 1] == "/", scalars[index + 2] == "/" else {
                result.append(scalars[index])
                index += 1
                continue
            }
            result.append(contentsOf: "://".unicodeScalars)
            let start = index + 3
            var end = start
            var at: Int?
            while end < scalars.count, !isBoundary(scalars[end]) {
                if scalars[end] == "@" { at = end }
                end += 1
            }
            if let at {
                result.append(contentsOf: "***".unicodeScalars)
                result.append(contentsOf: scalars[at..<end])
            } else {
                result.append(contentsOf: scalars[start..<end])
            }
            index = end
        }
        return String(result)
    }

    /// Whether a scalar ends a URL in running text.
    private static func isBoundary(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case " ", "\t", "\n", "\r", "\"", "'", "<", ">", "`": true
        default: false
        }
    }
}
