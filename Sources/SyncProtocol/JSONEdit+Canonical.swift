extension JSONEdit {
    /// Decodes an edit straight from the canonical bytes of its action, without building a
    /// ``JSON`` tree for it: the per-action path of replicas (and anything else that holds an
    /// action as it came off the wire in canonical form).
    ///
    /// It reads the common shape only, and answers `nil` for anything else; decode that with
    /// ``init(action:)`` from the parsed value, which also words every refusal. Accepted: exactly
    /// one JSON object (no whitespace) whose members come in canonical order, each of `by`,
    /// `path`, `type` and `value` at most once and no other; `type` one of the five names;
    /// `path` a string of printable ASCII without `\` or `~` (no escape to undo), empty or
    /// starting with `/`; `by` only on `increment`, a finite number; `value` exactly on `set`,
    /// `merge` and `append`, any JSON value the parser accepts within `maxDepth`. Whatever this
    /// accepts, ``init(action:)`` decodes to the same edit (a fuzz target and the tests check it).
    ///
    /// - Parameters:
    ///   - bytes: The action's bytes.
    ///   - maxDepth: The nesting the action may have, the action object itself counting 1 (as
    ///     ``JSON/init(parsing:maxDepth:)`` counts): 511 for an action inside a 512-deep frame.
    /// - Returns: The edit, or `nil` when the bytes are not of the common shape.
    public init?(canonical bytes: UnsafeRawBufferPointer, maxDepth: Int = 512) {
        var reader = CanonicalEditReader(bytes: bytes)
        guard let edit = reader.read(maxDepth: maxDepth) else { return nil }
        self = edit
    }
}

/// The byte reader behind ``JSONEdit/init(canonical:maxDepth:)``.
private struct CanonicalEditReader {
    let bytes: UnsafeRawBufferPointer
    var cursor = 0

    init(bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    /// The members, in canonical (RFC 8785) order.
    private enum Member: Int { case by, path, type, value }

    private enum Kind { case set, remove, merge, increment, append }

    mutating func read(maxDepth: Int) -> JSONEdit? {
        guard maxDepth >= 1, take(UInt8(ascii: "{")) else { return nil }
        var by: Double?
        var path: JSONPointer?
        var kind: Kind?
        var value: JSON?
        var last = -1
        while true {
            guard let member = memberName(), member.rawValue > last, take(UInt8(ascii: ":")) else { return nil }
            last = member.rawValue
            switch member {
            case .by:
                guard let number = numberValue() else { return nil }
                by = number
            case .path:
                guard let pointer = pointerValue() else { return nil }
                path = pointer
            case .type:
                guard let name = typeValue() else { return nil }
                kind = name
            case .value:
                guard let parsed = anyValue(maxDepth: maxDepth - 1) else { return nil }
                value = parsed
            }
            if take(UInt8(ascii: "}")) { break }
            guard take(UInt8(ascii: ",")) else { return nil }
        }
        guard cursor == bytes.count, let path, let kind else { return nil }
        switch kind {
        case .increment:
            guard value == nil else { return nil }
            return .increment(path, by: by ?? 1)
        case .remove:
            guard by == nil, value == nil else { return nil }
            return .remove(path)
        case .set, .merge, .append:
            guard by == nil, let value else { return nil }
            switch kind {
            case .set: return .set(path, value)
            case .merge: return .merge(path, value)
            default: return .append(path, value)
            }
        }
    }

    private mutating func take(_ byte: UInt8) -> Bool {
        guard cursor < bytes.count, bytes[cursor] == byte else { return false }
        cursor += 1
        return true
    }

    /// Whether the bytes at the cursor are `literal`; if so the cursor moves past them.
    private mutating func take(_ literal: StaticString) -> Bool {
        let count = literal.utf8CodeUnitCount
        guard bytes.count - cursor >= count else { return false }
        let start = literal.utf8Start
        for index in 0..<count where bytes[cursor + index] != start[index] { return false }
        cursor += count
        return true
    }

    private mutating func memberName() -> Member? {
        if take(#""by""#) { return .by }
        if take(#""path""#) { return .path }
        if take(#""type""#) { return .type }
        if take(#""value""#) { return .value }
        return nil
    }

    private mutating func typeValue() -> Kind? {
        if take(#""increment""#) { return .increment }
        if take(#""set""#) { return .set }
        if take(#""remove""#) { return .remove }
        if take(#""merge""#) { return .merge }
        if take(#""append""#) { return .append }
        return nil
    }

    /// A string of printable ASCII with no `"`, `\` or `~`, as a pointer: `""` or `/`-separated
    /// tokens taken as they are (nothing to unescape).
    private mutating func pointerValue() -> JSONPointer? {
        guard take(UInt8(ascii: "\"")), cursor < bytes.count else { return nil }
        if bytes[cursor] == UInt8(ascii: "\"") {
            cursor += 1
            return .root
        }
        guard bytes[cursor] == UInt8(ascii: "/") else { return nil }
        // One pass: each token is cut as its end is found.
        var tokens: [String] = []
        tokens.reserveCapacity(4)
        cursor += 1
        var tokenStart = cursor
        while cursor < bytes.count {
            let byte = bytes[cursor]
            if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "/") {
                tokens.append(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[tokenStart..<cursor]), as: UTF8.self))
                cursor += 1
                if byte == UInt8(ascii: "\"") { return JSONPointer(tokens: tokens) }
                tokenStart = cursor
                continue
            }
            guard byte >= 0x20, byte < 0x7F, byte != UInt8(ascii: "\\"), byte != UInt8(ascii: "~") else { return nil }
            cursor += 1
        }
        return nil
    }

    /// A finite number (its token runs to the next `,` or `}`).
    private mutating func numberValue() -> Double? {
        let start = cursor
        while cursor < bytes.count, bytes[cursor] != UInt8(ascii: ","), bytes[cursor] != UInt8(ascii: "}") { cursor += 1 }
        guard cursor > start, case .number(let number)? = try? JSON(parsing: UnsafeRawBufferPointer(rebasing: bytes[start..<cursor]), maxDepth: 0),
              number.isFinite else { return nil }
        return number
    }

    /// Any JSON value: its extent is found by matching brackets outside strings, then the
    /// parser reads it (and refuses what it refuses).
    private mutating func anyValue(maxDepth: Int) -> JSON? {
        guard let end = CanonicalObjectReader.endOfValue(in: bytes, from: cursor) else { return nil }
        let start = cursor
        cursor = end
        return parse(start, maxDepth)
    }

    private func parse(_ start: Int, _ maxDepth: Int) -> JSON? {
        guard cursor > start, maxDepth >= 0 else { return nil }
        return try? JSON(parsing: UnsafeRawBufferPointer(rebasing: bytes[start..<cursor]), maxDepth: maxDepth)
    }
}

extension JSONEdit {
    /// Appends the canonical bytes of this edit's wire form (``action``'s canonical form,
    /// written directly: no `JSON` object is made, and the members are already in order).
    ///
    /// - Parameter buffer: Where the bytes go.
    public func writeCanonical(into buffer: inout [UInt8]) {
        switch self {
        case .increment(let path, let by):
            _JSONWriter.appendStatic(#"{"by":"#, to: &buffer)
            _JSONWriter.writeNumber(by, into: &buffer)
            _JSONWriter.appendStatic(#","path":"#, to: &buffer)
            Self.writePointer(path, into: &buffer)
            _JSONWriter.appendStatic(#","type":"increment"}"#, to: &buffer)
        case .remove(let path):
            _JSONWriter.appendStatic(#"{"path":"#, to: &buffer)
            Self.writePointer(path, into: &buffer)
            _JSONWriter.appendStatic(#","type":"remove"}"#, to: &buffer)
        case .set(let path, let value), .merge(let path, let value), .append(let path, let value):
            _JSONWriter.appendStatic(#"{"path":"#, to: &buffer)
            Self.writePointer(path, into: &buffer)
            _JSONWriter.appendStatic(#","type":""#, to: &buffer)
            buffer.append(contentsOf: typeName.utf8)
            _JSONWriter.appendStatic(#"","value":"#, to: &buffer)
            value.writeCanonical(into: &buffer)
            buffer.append(UInt8(ascii: "}"))
        }
    }

    /// The canonical bytes of this edit's wire form.
    public var canonicalBytes: [UInt8] {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(64)
        writeCanonical(into: &buffer)
        return buffer
    }

    /// A pointer's text as a canonical JSON string.
    private static func writePointer(_ pointer: JSONPointer, into buffer: inout [UInt8]) {
        // Tokens without `~` or `/` need no pointer escape: their bytes are written as they
        // are, each checked and written in one pass over its UTF-8.
        let start = buffer.count
        buffer.append(UInt8(ascii: "\""))
        for token in pointer.tokens {
            buffer.append(UInt8(ascii: "/"))
            var token = token
            let plain = token.withUTF8 { bytes -> Bool in
                for byte in bytes where byte == UInt8(ascii: "~") || byte == UInt8(ascii: "/") { return false }
                _JSONWriter.writeEscaped(bytes, into: &buffer)
                return true
            }
            guard plain else {
                buffer.removeSubrange(start...)
                _JSONWriter.writeString(pointer.description, into: &buffer)
                return
            }
        }
        buffer.append(UInt8(ascii: "\""))
    }
}
