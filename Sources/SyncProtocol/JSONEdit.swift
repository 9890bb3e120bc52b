/// One edit of the `json` app: a change to a JSON document at a JSON Pointer.
///
/// Edits apply atomically (a failed edit leaves the document unchanged) and in place (the
/// containers along the path are mutated without being copied).
public enum JSONEdit: Sendable, Equatable {
    /// The deepest a document may become through edits: containers nested at most 500 levels,
    /// so a `welcome` carrying it (one level more) stays within the parser's 512.
    public static let maxDocumentDepth = 500

    /// Puts a value at the path, creating missing intermediate objects. `""` replaces the whole
    /// document; on an array, `-` or the element count appends, an existing index replaces.
    case set(JSONPointer, JSON)
    /// Removes the value at the path, which must exist. Removing `""` resets the document to `{}`;
    /// removing an array element shifts the later ones down.
    case remove(JSONPointer)
    /// Applies an RFC 7386 JSON Merge Patch at the path (a missing target starts as `null`).
    case merge(JSONPointer, JSON)
    /// Adds to the number at the path (a missing target starts at 0); the result must be finite.
    case increment(JSONPointer, by: Double)
    /// Appends to the array at the path (a missing target becomes a one-element array).
    case append(JSONPointer, JSON)
}

/// Why an edit could not be decoded or applied.
public struct JSONEditError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The class of failure.
    public enum Kind: Sendable, Equatable {
        /// The action is malformed: not an object, unknown type, missing or ill-typed member,
        /// or a path that is not a JSON Pointer.
        case badAction
        /// The action is well formed but cannot apply to the document (missing path on remove,
        /// non-number increment, non-array append, bad array index, path through a scalar, ...).
        case rejected
    }

    /// The class of failure.
    public let kind: Kind
    /// What happened, naming the edit and the path.
    public let message: String

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - kind: The class of failure.
    ///   - message: What happened, naming the edit and the path.
    public init(kind: Kind, message: String) {
        self.kind = kind
        self.message = message
    }

    /// The message.
    public var description: String { message }
}

// MARK: - Wire form

extension JSONEdit {
    /// Decodes an edit from its wire form.
    ///
    /// The forms are `{"type":"set","path":P,"value":V}`, `{"type":"remove","path":P}`,
    /// `{"type":"merge","path":P,"value":O}`, `{"type":"increment","path":P,"by":N}` (`by` is
    /// optional and defaults to 1) and `{"type":"append","path":P,"value":V}`, where `P` is a JSON
    /// Pointer string. Unknown members are ignored.
    ///
    /// - Parameters:
    ///   - action: The action object.
    /// - Throws: ``JSONEditError`` of kind ``JSONEditError/Kind/badAction`` when the action is not
    ///   an object, the type is missing or unknown, a required member is missing or ill-typed,
    ///   `path` is not a valid pointer, or `by` is not a finite number.
    public init(action: JSON) throws(JSONEditError) {
        guard case .object(let members) = action else {
            throw JSONEditError(kind: .badAction, message: "action is \(action.kindName.withArticle), not an object")
        }
        guard let typeValue = members["type"] else {
            throw JSONEditError(kind: .badAction, message: "action has no \"type\"")
        }
        guard case .string(let type) = typeValue else {
            throw JSONEditError(
                kind: .badAction, message: "action \"type\" is \(typeValue.kindName.withArticle), not a string")
        }
        guard ["set", "remove", "merge", "increment", "append"].contains(type) else {
            throw JSONEditError(kind: .badAction, message: "unknown action type \"\(type)\"")
        }
        guard let pathValue = members["path"] else {
            throw JSONEditError(kind: .badAction, message: "\(type) action has no \"path\"")
        }
        guard case .string(let pathText) = pathValue else {
            throw JSONEditError(
                kind: .badAction,
                message: "\(type) action \"path\" is \(pathValue.kindName.withArticle), not a string")
        }
        let path: JSONPointer
        do {
            path = try JSONPointer(pathText)
        } catch {
            throw JSONEditError(kind: .badAction, message: "\(type) action \"path\": \(error.description)")
        }
        func requiredValue() throws(JSONEditError) -> JSON {
            guard let value = members["value"] else {
                throw JSONEditError(kind: .badAction, message: "\(type) action has no \"value\"")
            }
            return value
        }
        switch type {
        case "set":
            self = .set(path, try requiredValue())
        case "remove":
            self = .remove(path)
        case "merge":
            self = .merge(path, try requiredValue())
        case "append":
            self = .append(path, try requiredValue())
        default:  // "increment"
            var by = 1.0
            if let byValue = members["by"] {
                guard case .number(let number) = byValue else {
                    throw JSONEditError(
                        kind: .badAction,
                        message: "increment action \"by\" is \(byValue.kindName.withArticle), not a number")
                }
                guard number.isFinite else {
                    throw JSONEditError(kind: .badAction, message: "increment action \"by\" is not finite")
                }
                by = number
            }
            self = .increment(path, by: by)
        }
    }

    /// The wire form of this edit (see ``init(action:)``); `increment` always carries `by`.
    public var action: JSON {
        switch self {
        case .set(let path, let value):
            return .object(["type": "set", "path": .string(path.description), "value": value])
        case .remove(let path):
            return .object(["type": "remove", "path": .string(path.description)])
        case .merge(let path, let patch):
            return .object(["type": "merge", "path": .string(path.description), "value": patch])
        case .increment(let path, let by):
            return .object(["type": "increment", "path": .string(path.description), "by": .number(by)])
        case .append(let path, let value):
            return .object(["type": "append", "path": .string(path.description), "value": value])
        }
    }

    /// The path this edit targets.
    internal var path: JSONPointer {
        switch self {
        case .set(let path, _), .remove(let path), .merge(let path, _), .increment(let path, _),
            .append(let path, _):
            return path
        }
    }

    /// The edit's wire type name.
    internal var typeName: String {
        switch self {
        case .set: "set"
        case .remove: "remove"
        case .merge: "merge"
        case .increment: "increment"
        case .append: "append"
        }
    }
}

// MARK: - Applying

extension JSONEdit {
    /// Applies this edit to a document, in place and atomically.
    ///
    /// - Parameters:
    ///   - document: The document to edit. When this method throws, it is left exactly unchanged.
    /// - Throws: ``JSONEditError`` of kind ``JSONEditError/Kind/rejected`` when the edit cannot
    ///   apply: `remove` of a missing path, `increment` of a non-number or to a non-finite result,
    ///   `append` to a non-array, an array index that is not canonical or out of range, a path
    ///   through a missing array element or through a scalar.
    public func apply(to document: inout JSON) throws(JSONEditError) {
        let tokens = path.tokens
        // Refuse documents nested deeper than `maxDocumentDepth` before touching anything:
        // a deeper state could not travel in a `welcome` (parsers stop at 512 levels).
        let added: Int
        switch self {
        case .set(_, let value), .merge(_, let value): added = value.nestingDepth
        case .append(_, let value): added = 1 + value.nestingDepth
        case .remove, .increment: added = 0
        }
        if tokens.count + added > Self.maxDocumentDepth {
            throw rejection(tokens, "the document would be nested \(tokens.count + added) levels deep, more than the \(Self.maxDocumentDepth) a state may have (a welcome must stay within the 512 levels every parser accepts)")
        }
        if tokens.isEmpty, case .remove = self {
            document = .object([:])
            return
        }
        try descend(&document, tokens: tokens, depth: 0)
    }

    /// Walks one level down `tokens` from `node` (the value at `tokens[..<depth]`), mutating in
    /// place. Atomic: on throw, `node` is unchanged.
    private func descend(_ node: inout JSON, tokens: [String], depth: Int) throws(JSONEditError) {
        guard depth < tokens.count else {
            try applyToExisting(&node, tokens: tokens)
            return
        }
        let token = tokens[depth]
        let isLast = depth == tokens.count - 1
        switch node {
        case .object(var members):
            // Take the buffer out of `node` so it stays uniquely referenced while mutated; put it
            // back on every exit (unchanged on throw, since every step below is atomic).
            node = .null
            defer { node = .object(members) }
            if let index = members.index(forKey: JSONKey(token)) {
                if isLast, case .remove = self {
                    members.remove(at: index)
                } else {
                    try descend(&members.values[index], tokens: tokens, depth: depth + 1)
                }
            } else {
                if case .remove = self {
                    throw rejection(tokens, "no value at \(Self.display(tokens[...depth]))")
                }
                var built = try valueForMissing(tokens: tokens)
                var level = tokens.count - 1
                while level > depth {
                    built = .object([JSONKey(tokens[level]): built])
                    level -= 1
                }
                members[JSONKey(token)] = built
            }
        case .array(var elements):
            node = .null
            defer { node = .array(elements) }
            let count = elements.count
            let index: Int
            if token == "-" {
                index = count
            } else if let parsed = JSONPointer.arrayIndex(token) {
                index = parsed
            } else {
                if case .remove = self {
                    throw rejection(tokens, "no value at \(Self.display(tokens[...depth])) "
                        + "(\"\(token)\" is not an array index)")
                }
                throw rejection(tokens, "\"\(token)\" is not an array index "
                    + "(in the array at \(Self.display(tokens[..<depth])))")
            }
            if index < count {
                if isLast, case .remove = self {
                    elements.remove(at: index)
                } else {
                    try descend(&elements[index], tokens: tokens, depth: depth + 1)
                }
            } else if case .remove = self {
                throw rejection(tokens, "no value at \(Self.display(tokens[...depth])) "
                    + "(the array has \(Self.elementsText(count)))")
            } else if !isLast {
                throw rejection(tokens, "no element at \(Self.display(tokens[...depth])) "
                    + "(the array has \(Self.elementsText(count)))")
            } else if index == count {
                elements.append(try valueForMissing(tokens: tokens))
            } else {
                throw rejection(tokens, "index \(token) is out of range for the array at "
                    + "\(Self.display(tokens[..<depth])) (\(Self.elementsText(count)); "
                    + "use \(count) or \"-\" to append)")
            }
        case .null, .bool, .number, .string:
            let parent = Self.display(tokens[..<depth])
            let kind = node.kindName.withArticle
            if case .remove = self {
                throw rejection(tokens, "no value at \(Self.display(tokens[...depth])) (\(parent) is \(kind))")
            }
            throw rejection(tokens, "cannot descend into \(parent): it is \(kind), not an object or array")
        }
    }

    /// Applies the edit to an existing target value (the end of the path). Atomic.
    private func applyToExisting(_ target: inout JSON, tokens: [String]) throws(JSONEditError) {
        switch self {
        case .set(_, let value):
            target = value
        case .remove:
            // Only the root reaches here, and `apply` handles it; resetting keeps this total.
            target = .object([:])
        case .merge(_, let patch):
            JSON.mergeInPlace(&target, patch: patch)
        case .increment(_, let by):
            guard case .number(let number) = target else {
                throw rejection(tokens, "target is \(target.kindName.withArticle), not a number")
            }
            let result = number + by
            guard result.isFinite else {
                throw rejection(tokens, "\(number) + \(by) is not finite")
            }
            target = .number(result)
        case .append(_, let value):
            guard case .array(var elements) = target else {
                throw rejection(tokens, "target is \(target.kindName.withArticle), not an array")
            }
            target = .null
            elements.append(value)
            target = .array(elements)
        }
    }

    /// The value a missing target takes. Throws only when that value is not allowed.
    private func valueForMissing(tokens: [String]) throws(JSONEditError) -> JSON {
        switch self {
        case .set(_, let value):
            return value
        case .remove:
            throw rejection(tokens, "no value at \(Self.display(tokens[...]))")
        case .merge(_, let patch):
            return JSON.null.merging(patch: patch)
        case .increment(_, let by):
            let result = 0 + by
            guard result.isFinite else {
                throw rejection(tokens, "0 + \(by) is not finite")
            }
            return .number(result)
        case .append(_, let value):
            return .array([value])
        }
    }

    /// A `.rejected` error whose message starts with this edit's type and path.
    private func rejection(_ tokens: [String], _ detail: String) -> JSONEditError {
        JSONEditError(kind: .rejected, message: "\(typeName) \(Self.display(tokens[...])): \(detail)")
    }

    /// The pointer text of a token prefix, with the root shown as `""`.
    private static func display(_ tokens: ArraySlice<String>) -> String {
        tokens.isEmpty ? "\"\"" : JSONPointer(tokens: Array(tokens)).description
    }

    private static func elementsText(_ count: Int) -> String {
        count == 1 ? "1 element" : "\(count) elements"
    }
}

// MARK: - Merge Patch

extension JSON {
    /// Applies an RFC 7386 JSON Merge Patch to this value.
    ///
    /// A non-object patch replaces the value. An object patch turns a non-object value into `{}`
    /// first, then for each member removes it when the patch member is `null` and otherwise
    /// merges the patch member into it recursively.
    ///
    /// - Parameters:
    ///   - patch: The merge patch.
    /// - Returns: The patched value.
    public func merging(patch: JSON) -> JSON {
        var result = self
        JSON.mergeInPlace(&result, patch: patch)
        return result
    }

    /// RFC 7386 merge into `target`, in place (uniquely referenced containers are not copied).
    internal static func mergeInPlace(_ target: inout JSON, patch: JSON) {
        guard case .object(let patchMembers) = patch else {
            target = patch
            return
        }
        var members: [JSONKey: JSON]
        if case .object(let existing) = target {
            members = existing
        } else {
            members = [:]
        }
        target = .null
        for (key, value) in patchMembers {
            if case .null = value {
                members.removeValue(forKey: key)
            } else if let index = members.index(forKey: key) {
                mergeInPlace(&members.values[index], patch: value)
            } else {
                members[key] = JSON.null.merging(patch: value)
            }
        }
        target = .object(members)
    }
}

extension String {
    /// "a string", "an object", "null", ... for kind names in messages.
    fileprivate var withArticle: String {
        switch unicodeScalars.first {
        case _ where self == "null": self
        case "a", "e", "i", "o", "u": "an \(self)"
        default: "a \(self)"
        }
    }
}
