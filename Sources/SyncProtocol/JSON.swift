/// A JSON value: the one data model of the wire, of states and of actions.
///
/// Numbers are IEEE-754 doubles, as in I-JSON (RFC 7493) and RFC 8785, so every
/// integer within ±2^53 is exact and `1` equals `1.0`. Objects are unordered; the
/// canonical writer (``JSON/canonicalBytes``) sorts their members, so two equal
/// values always serialise to the same bytes.
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
    /// An object; member order carries no meaning.
    case object([String: JSON])
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
    @inlinable public var objectValue: [String: JSON]? {
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
        if case .object(let members) = self { return members[key] }
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
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

extension JSON {
    /// Creates a number from an integer.
    @inlinable public init(_ value: Int) { self = .number(Double(value)) }
    /// Creates a number from an unsigned 64-bit integer (exact up to 2^53).
    @inlinable public init(_ value: UInt64) { self = .number(Double(value)) }
}
