/// An RFC 6901 JSON Pointer: a path of reference tokens into a ``JSON`` value.
///
/// The empty text `""` is the root (no tokens). Any other pointer starts with `/`, and each
/// `/`-separated token is unescaped with `~1` → `/` and `~0` → `~`. Tokens are kept unescaped
/// in ``tokens``; ``description`` writes the escaped text back.
public struct JSONPointer: Sendable, Hashable, CustomStringConvertible {
    /// The unescaped reference tokens, outermost first; empty for the root.
    public let tokens: [String]

    /// The pointer to the whole document (`""`).
    public static let root = JSONPointer(tokens: [])

    /// Parses the text form of a pointer.
    ///
    /// - Parameters:
    ///   - text: The pointer text, e.g. `"/a/0/m~1n"`; `""` is the root.
    /// - Throws: ``JSONPointerError`` when `text` is neither empty nor starts with `/`, or when it
    ///   holds a `~` not followed by `0` or `1`.
    public init(_ text: String) throws(JSONPointerError) {
        let utf8 = text.utf8
        guard let first = utf8.first else {
            self.tokens = []
            return
        }
        guard first == JSONPointer.slash else {
            throw JSONPointerError(pointer: text, reason: "a non-empty pointer must start with \"/\"")
        }
        var tokens: [String] = []
        var current: [UInt8] = []
        var iterator = utf8.dropFirst().makeIterator()
        while let byte = iterator.next() {
            switch byte {
            case JSONPointer.slash:
                tokens.append(String(decoding: current, as: UTF8.self))
                current.removeAll(keepingCapacity: true)
            case JSONPointer.tilde:
                switch iterator.next() {
                case UInt8(ascii: "0"): current.append(JSONPointer.tilde)
                case UInt8(ascii: "1"): current.append(JSONPointer.slash)
                case nil:
                    throw JSONPointerError(pointer: text, reason: "\"~\" at the end must be escaped as \"~0\"")
                case .some:
                    throw JSONPointerError(
                        pointer: text, reason: "\"~\" must be followed by \"0\" or \"1\" (escape it as \"~0\")")
                }
            default:
                current.append(byte)
            }
        }
        tokens.append(String(decoding: current, as: UTF8.self))
        self.tokens = tokens
    }

    /// Creates a pointer from unescaped reference tokens.
    ///
    /// - Parameters:
    ///   - tokens: The reference tokens, outermost first; any string is allowed (no escaping).
    public init(tokens: [String]) {
        self.tokens = tokens
    }

    /// The escaped text form (`""` for the root, otherwise `/`-prefixed tokens with `~` written as
    /// `~0` and `/` as `~1`); parsing it gives back an equal pointer.
    public var description: String {
        var text = ""
        for token in tokens {
            text.unicodeScalars.append("/")
            for scalar in token.unicodeScalars {
                switch scalar {
                case "~": text.unicodeScalars.append(contentsOf: "~0".unicodeScalars)
                case "/": text.unicodeScalars.append(contentsOf: "~1".unicodeScalars)
                default: text.unicodeScalars.append(scalar)
                }
            }
        }
        return text
    }

    private static let slash = UInt8(ascii: "/")
    private static let tilde = UInt8(ascii: "~")

    /// Parses a reference token as a canonical array index: `"0"` or a decimal without leading
    /// zeros. Returns `nil` for anything else (including `"-"`, signs, `"01"` and overflow).
    internal static func arrayIndex(_ token: String) -> Int? {
        let utf8 = token.utf8
        guard let first = utf8.first else { return nil }
        if first == UInt8(ascii: "0") { return utf8.count == 1 ? 0 : nil }
        var value = 0
        for byte in utf8 {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            let (times, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times.addingReportingOverflow(Int(byte - UInt8(ascii: "0")))
            guard !overflow1, !overflow2 else { return nil }
            value = sum
        }
        return value
    }
}

/// A JSON Pointer text that does not follow RFC 6901.
public struct JSONPointerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The offending pointer text, as given.
    public let pointer: String
    /// Why the text is not a valid pointer.
    public let reason: String

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - pointer: The offending pointer text.
    ///   - reason: Why it is invalid.
    public init(pointer: String, reason: String) {
        self.pointer = pointer
        self.reason = reason
    }

    /// A one-line message naming the pointer and the reason.
    public var description: String {
        "bad JSON pointer \"\(pointer)\": \(reason)"
    }
}

extension JSON {
    /// Resolves a JSON Pointer against this value.
    ///
    /// Object members are looked up by name; array elements need a canonical decimal index
    /// (`"0"`, `"12"`; not `"01"` nor `"-"`).
    ///
    /// - Parameters:
    ///   - pointer: The pointer to resolve; ``JSONPointer/root`` gives this value.
    /// - Returns: The value referred to, or `nil` when a member is missing, an index is not
    ///   canonical or out of range, or the path runs through a scalar.
    public func value(at pointer: JSONPointer) -> JSON? {
        var node = self
        for token in pointer.tokens {
            switch node {
            case .object(let members):
                guard let child = members[JSONKey(token)] else { return nil }
                node = child
            case .array(let elements):
                guard let index = JSONPointer.arrayIndex(token), index < elements.count else { return nil }
                node = elements[index]
            case .null, .bool, .number, .string:
                return nil
            }
        }
        return node
    }
}
