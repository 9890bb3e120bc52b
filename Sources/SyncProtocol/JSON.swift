/// A JSON value: the one data model of the wire, of states and of actions.
///
/// Numbers are IEEE-754 doubles, as in I-JSON (RFC 7493) and RFC 8785, so every
/// integer within ±2^53 is exact and `1` equals `1.0`. Objects are unordered; the
/// canonical writer (``JSON/canonicalBytes``) sorts their members, so two equal
/// values always serialise to the same bytes.
///
/// ## Equality is JSON's, not Swift's
/// Strings and member names compare by Unicode scalars (RFC 8259, RFC 8785), never by
/// Swift's canonical equivalence: `"é"` (U+00E9) and `"e\u{301}"` are different strings
/// and different keys, exactly as every other JSON implementation sees them. `==` agrees
/// with canonical-bytes equality: `a == b` exactly when `a.canonicalBytes == b.canonicalBytes`
/// (so `1 == 1.0`, `-0 == 0`, and a non-finite number, written as `null`, equals `null`).
public enum JSON: Sendable, Hashable {
    /// `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A finite number. Non-finite doubles are written as `null`.
    case number(Double)
    /// A string of Unicode scalars.
    case string(String)
    /// An ordered array.
    case array([JSON])
    /// An object; member order carries no meaning. Keys compare by Unicode scalars.
    case object([JSONKey: JSON])
}

extension JSON {
    /// JSON equality: scalar-wise strings and keys, numeric numbers, and a non-finite number
    /// equal to `null` (as the canonical form writes it). Agrees with canonical-bytes equality.
    public static func == (lhs: JSON, rhs: JSON) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): return true
        case (.bool(let a), .bool(let b)): return a == b
        case (.number(let a), .number(let b)):
            if a.isFinite && b.isFinite { return a == b }
            return !a.isFinite && !b.isFinite
        case (.number(let a), .null), (.null, .number(let a)): return !a.isFinite
        case (.string(let a), .string(let b)): return JSONKey.sameScalars(a, b)
        case (.array(let a), .array(let b)): return a == b
        case (.object(let a), .object(let b)): return a == b
        default: return false
        }
    }

    /// Hashes consistently with ``==(_:_:)``.
    ///
    /// - Parameter hasher: The hasher.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null:
            hasher.combine(0 as UInt8)
        case .bool(let value):
            hasher.combine(1 as UInt8)
            hasher.combine(value)
        case .number(let value):
            guard value.isFinite else { hasher.combine(0 as UInt8); return }
            hasher.combine(2 as UInt8)
            hasher.combine(value == 0 ? 0 : value)
        case .string(let value):
            hasher.combine(3 as UInt8)
            JSONKey.hashScalars(of: value, into: &hasher)
        case .array(let elements):
            hasher.combine(4 as UInt8)
            hasher.combine(elements)
        case .object(let members):
            hasher.combine(5 as UInt8)
            hasher.combine(members)
        }
    }
}

/// An object member name: a string compared and hashed by its Unicode scalars.
///
/// Swift's `String` compares by canonical equivalence, so `"é"` (U+00E9) equals
/// `"e\u{301}"`; JSON (RFC 8259, I-JSON, RFC 8785) does not. Keying objects by `JSONKey`
/// keeps both as two members, exactly as a client in any other language does, so replicas
/// written in different languages compute the same state and digest.
///
/// A string literal is a key: `json.objectValue?["type"]`, `let members: [JSONKey: JSON] = ["type": "set"]`.
public struct JSONKey: Hashable, Sendable, Comparable, ExpressibleByStringLiteral, CustomStringConvertible {
    /// The member name.
    public let string: String

    /// Creates a key.
    ///
    /// - Parameter string: The member name.
    @inlinable public init(_ string: String) { self.string = string }

    /// Creates a key from a literal.
    ///
    /// - Parameter value: The member name.
    @inlinable public init(stringLiteral value: String) { self.string = value }

    /// The member name.
    public var description: String { string }

    /// Whether two names have the same Unicode scalars.
    @inlinable public static func == (lhs: JSONKey, rhs: JSONKey) -> Bool {
        sameScalars(lhs.string, rhs.string)
    }

    /// Whether two strings have the same Unicode scalars (the same UTF-8 bytes), never
    /// Swift's canonical equivalence. Compares the bytes in place.
    @inlinable static func sameScalars(_ a: String, _ b: String) -> Bool {
        guard a.utf8.count == b.utf8.count else { return false }
        // `withUTF8` reaches small (inline) strings too, which `withContiguousStorageIfAvailable`
        // does not; it copies only a string that is not UTF-8 in memory (a bridged one).
        var left = a, right = b
        return left.withUTF8 { l in
            right.withUTF8 { r in
                for index in 0..<l.count where l[index] != r[index] { return false }
                return true
            }
        }
    }

    /// Orders names as RFC 8785 sorts members: by their UTF-16 code units.
    public static func < (lhs: JSONKey, rhs: JSONKey) -> Bool {
        _JSONWriter.utf16Precedes(lhs.string, rhs.string)
    }

    /// Hashes the UTF-8 bytes (the scalars), consistently with ``==(_:_:)``.
    ///
    /// - Parameter hasher: The hasher.
    @inlinable public func hash(into hasher: inout Hasher) {
        JSONKey.hashScalars(of: string, into: &hasher)
    }

    /// Feeds a string's UTF-8 bytes to `hasher`, so that strings with the same scalars hash alike.
    @inlinable static func hashScalars(of string: String, into hasher: inout Hasher) {
        let done: Void? = string.utf8.withContiguousStorageIfAvailable { bytes in
            hasher.combine(bytes: UnsafeRawBufferPointer(bytes))
        }
        if done == nil {
            for byte in string.utf8 { hasher.combine(byte) }
        }
        hasher.combine(string.utf8.count)
    }
}

extension JSON {
    /// The largest integer magnitude a JSON number carries exactly (2^53).
    public static let maxExactInteger: Double = 9_007_199_254_740_992

    /// The string payload, or `nil` when this is not a string.
    @inlinable public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    /// The numeric payload, or `nil` when this is not a number.
    @inlinable public var numberValue: Double? {
        if case .number(let value) = self { return value }
        return nil
    }

    /// The number as an exact integer, or `nil` when this is not an integral number within ±2^53.
    @inlinable public var intValue: Int? {
        guard case .number(let value) = self, value.rounded(.towardZero) == value,
              abs(value) <= JSON.maxExactInteger else { return nil }
        return Int(value)
    }

    /// The number as an exact integer of zero or more, or `nil` when this is not an integral
    /// number within 0…2^53: a count or a sequence number from another process, converted
    /// without a trap whatever it sent (`-1`, `1e300`, `2.5`).
    @inlinable public var uint64Value: UInt64? {
        guard let value = intValue, value >= 0 else { return nil }
        return UInt64(value)
    }

    /// The Boolean payload, or `nil` when this is not a Boolean.
    @inlinable public var boolValue: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    /// The elements, or `nil` when this is not an array.
    @inlinable public var arrayValue: [JSON]? {
        if case .array(let value) = self { return value }
        return nil
    }

    /// The members, or `nil` when this is not an object.
    @inlinable public var objectValue: [JSONKey: JSON]? {
        if case .object(let value) = self { return value }
        return nil
    }

    /// Whether this is `null`.
    @inlinable public var isNull: Bool {
        if case .null = self { return true }
        return false
    }

    /// The member named `key` of an object; `nil` for a missing member or a non-object.
    @inlinable public subscript(key: String) -> JSON? {
        if case .object(let members) = self { return members[JSONKey(key)] }
        return nil
    }

    /// A short name of this value's kind ("null", "boolean", "number", "string", "array", "object"),
    /// for error messages.
    public var kindName: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .number: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }
}

extension JSON {
    /// How many containers are nested at the deepest point: 0 for a scalar, 1 for `[]` or
    /// `{"a":1}`, 2 for `[[1]]`. Computed without recursion, so any value is safe to measure.
    public var nestingDepth: Int {
        switch self {
        case .array, .object: break
        default: return 0
        }
        var deepest = 0
        var stack: [(JSON, Int)] = [(self, 1)]
        while let (value, depth) = stack.popLast() {
            switch value {
            case .array(let elements):
                deepest = max(deepest, depth)
                for element in elements where element.isContainer { stack.append((element, depth + 1)) }
            case .object(let members):
                deepest = max(deepest, depth)
                for member in members.values where member.isContainer { stack.append((member, depth + 1)) }
            default:
                break
            }
        }
        return deepest
    }

    /// Whether this is an array or an object.
    @inlinable public var isContainer: Bool {
        switch self {
        case .array, .object: true
        default: false
        }
    }
}

extension JSON: ExpressibleByNilLiteral {
    /// Creates `null`.
    @inlinable public init(nilLiteral: ()) { self = .null }
}

extension JSON: ExpressibleByBooleanLiteral {
    /// Creates a Boolean.
    @inlinable public init(booleanLiteral value: Bool) { self = .bool(value) }
}

extension JSON: ExpressibleByIntegerLiteral {
    /// Creates a number from an integer literal.
    @inlinable public init(integerLiteral value: Int) { self = .number(Double(value)) }
}

extension JSON: ExpressibleByFloatLiteral {
    /// Creates a number from a floating-point literal.
    @inlinable public init(floatLiteral value: Double) { self = .number(value) }
}

extension JSON: ExpressibleByStringLiteral {
    /// Creates a string.
    @inlinable public init(stringLiteral value: String) { self = .string(value) }
}

extension JSON: ExpressibleByArrayLiteral {
    /// Creates an array.
    @inlinable public init(arrayLiteral elements: JSON...) { self = .array(elements) }
}

extension JSON: ExpressibleByDictionaryLiteral {
    /// Creates an object. A repeated key keeps its last value.
    @inlinable public init(dictionaryLiteral elements: (String, JSON)...) {
        self = .object(Dictionary(elements.map { (JSONKey($0.0), $0.1) }, uniquingKeysWith: { _, last in last }))
    }
}

extension JSON {
    /// Creates a number from an integer.
    @inlinable public init(_ value: Int) { self = .number(Double(value)) }
    /// Creates a number from an unsigned 64-bit integer (exact up to 2^53).
    @inlinable public init(_ value: UInt64) { self = .number(Double(value)) }
}
