/// RFC 6902 JSON Patch: the operations that turn one JSON value into another, as
/// `replica-cli watch --diff` prints them for each action (what Redux DevTools shows as an
/// action's "Diff").
///
/// ``diff(from:to:)`` writes only `add`, `remove` and `replace`, with RFC 6901 paths; object
/// members are visited in canonical (sorted) order, and arrays are compared index by index
/// (a common prefix is kept, the tail added or removed from the end), so the patch is
/// deterministic and applying it in order turns `from` into `to`. Equality is JSON's, as in the
/// canonical form: strings by Unicode scalars, `1` and `1.0` the same number.
public enum JSONPatch {
    /// The operations that turn `old` into `new` (empty when they are equal).
    ///
    /// - Parameters:
    ///   - old: The value before.
    ///   - new: The value after.
    /// - Returns: RFC 6902 operations, each `{"op":…,"path":…}` with `"value"` for `add` and
    ///   `replace`.
    public static func diff(from old: JSON, to new: JSON) -> [JSON] {
        var operations: [JSON] = []
        diff(old, new, path: [], into: &operations)
        return operations
    }

    /// Applies operations written by ``diff(from:to:)`` (`add`, `remove`, `replace`).
    ///
    /// - Parameters:
    ///   - operations: The patch.
    ///   - value: The document.
    /// - Returns: The patched document, or `nil` when an operation does not fit it.
    public static func apply(_ operations: [JSON], to value: JSON) -> JSON? {
        var document = value
        for operation in operations {
            guard let op = operation["op"]?.stringValue, let text = operation["path"]?.stringValue,
                  let pointer = try? JSONPointer(text) else { return nil }
            switch op {
            case "add", "replace":
                guard let new = operation["value"], let patched = set(document, pointer.tokens[...], new, adding: op == "add") else { return nil }
                document = patched
            case "remove":
                guard let patched = remove(document, pointer.tokens[...]) else { return nil }
                document = patched
            default:
                return nil
            }
        }
        return document
    }

    private static func diff(_ old: JSON, _ new: JSON, path: [String], into operations: inout [JSON]) {
        if old == new { return }
        switch (old, new) {
        case (.object(let before), .object(let after)):
            for key in before.keys.sorted() where after[key] == nil {
                operations.append(["op": "remove", "path": .string(JSONPointer(tokens: path + [key.string]).description)])
            }
            for key in after.keys.sorted() {
                guard let value = after[key] else { continue }
                if let previous = before[key] {
                    diff(previous, value, path: path + [key.string], into: &operations)
                } else {
                    operations.append(["op": "add", "path": .string(JSONPointer(tokens: path + [key.string]).description), "value": value])
                }
            }
        case (.array(let before), .array(let after)):
            let common = min(before.count, after.count)
            for index in 0..<common {
                diff(before[index], after[index], path: path + [String(index)], into: &operations)
            }
            if before.count > after.count {
                // From the end, so every index stays valid as the operations apply in order.
                for index in stride(from: before.count - 1, through: after.count, by: -1) {
                    operations.append(["op": "remove", "path": .string(JSONPointer(tokens: path + [String(index)]).description)])
                }
            } else {
                for index in common..<after.count {
                    operations.append(["op": "add", "path": .string(JSONPointer(tokens: path + [String(index)]).description), "value": after[index]])
                }
            }
        default:
            operations.append(["op": "replace", "path": .string(JSONPointer(tokens: path).description), "value": new])
        }
    }

    private static func set(_ document: JSON, _ tokens: ArraySlice<String>, _ value: JSON, adding: Bool) -> JSON? {
        guard let token = tokens.first else { return value }
        let rest = tokens.dropFirst()
        switch document {
        case .object(var members):
            let key = JSONKey(token)
            if rest.isEmpty {
                guard adding || members[key] != nil else { return nil }
                members[key] = value
            } else {
                guard let child = members[key], let patched = set(child, rest, value, adding: adding) else { return nil }
                members[key] = patched
            }
            return .object(members)
        case .array(var items):
            if rest.isEmpty, adding, token == "-" {
                items.append(value)
                return .array(items)
            }
            guard let index = JSONPointer.arrayIndex(token) else { return nil }
            if rest.isEmpty {
                if adding {
                    guard index <= items.count else { return nil }
                    items.insert(value, at: index)
                } else {
                    guard index < items.count else { return nil }
                    items[index] = value
                }
            } else {
                guard index < items.count, let patched = set(items[index], rest, value, adding: adding) else { return nil }
                items[index] = patched
            }
            return .array(items)
        default:
            return nil
        }
    }

    private static func remove(_ document: JSON, _ tokens: ArraySlice<String>) -> JSON? {
        guard let token = tokens.first else { return nil }
        let rest = tokens.dropFirst()
        switch document {
        case .object(var members):
            let key = JSONKey(token)
            guard let child = members[key] else { return nil }
            if rest.isEmpty {
                members[key] = nil
            } else {
                guard let patched = remove(child, rest) else { return nil }
                members[key] = patched
            }
            return .object(members)
        case .array(var items):
            guard let index = JSONPointer.arrayIndex(token), index < items.count else { return nil }
            if rest.isEmpty {
                items.remove(at: index)
            } else {
                guard let patched = remove(items[index], rest) else { return nil }
                items[index] = patched
            }
            return .array(items)
        default:
            return nil
        }
    }
}
