import SyncCore

/// `watch` and `history`'s filters: `--type GLOB` (the action's `"type"`, with `*` and `?`)
/// and `--origin N[,N…]` (the replica ids that dispatched it). A line is printed when it
/// passes both; without them, every line is.
struct ActionFilter: Sendable, Equatable {
    /// The glob the action's type must match, if any.
    var typeGlob: String?
    /// The replica ids whose actions are printed, if limited.
    var origins: Set<Int>?

    /// Whether no filter is set.
    var isEmpty: Bool { typeGlob == nil && origins == nil && originNames == nil }

    /// The origin names whose actions are printed (`--origin alice`), if limited; compared by
    /// Unicode scalars.
    var originNames: Set<JSONKey>?

    /// Whether a sequenced action is printed.
    ///
    /// - Parameter sequenced: The action.
    /// - Returns: `true` when it passes every filter set.
    func passes(_ sequenced: SequencedAction) -> Bool {
        passes(sequenced.action, origin: sequenced.origin, name: sequenced.stamp.originName)
    }

    /// Whether an action is printed.
    ///
    /// - Parameters:
    ///   - action: The action's JSON.
    ///   - origin: The replica that dispatched it.
    ///   - name: Its origin's name, if it gave one.
    /// - Returns: `true` when it passes every filter set.
    func passes(_ action: JSON, origin: Int, name: String? = nil) -> Bool {
        if origins != nil || originNames != nil {
            let byID = origins?.contains(origin) ?? false
            let byName = name.map { originNames?.contains(JSONKey($0)) ?? false } ?? false
            guard byID || byName else { return false }
        }
        if let typeGlob {
            guard let type = action["type"]?.stringValue, Self.matches(type, glob: typeGlob) else { return false }
        }
        return true
    }

    /// Whether `text` matches `glob`, where `*` stands for any run of characters (none
    /// included) and `?` for one; everything else stands for itself, compared by Unicode scalars.
    ///
    /// - Parameters:
    ///   - text: The text.
    ///   - glob: The pattern.
    /// - Returns: Whether the whole text matches.
    static func matches(_ text: String, glob: String) -> Bool {
        let text = Array(text.unicodeScalars), pattern = Array(glob.unicodeScalars)
        var t = 0, p = 0
        var star: Int?, resume = 0
        while t < text.count {
            if p < pattern.count, pattern[p] == "?" || (pattern[p] != "*" && pattern[p] == text[t]) {
                t += 1
                p += 1
            } else if p < pattern.count, pattern[p] == "*" {
                star = p
                resume = t
                p += 1
            } else if let star {
                p = star + 1
                resume += 1
                t = resume
            } else {
                return false
            }
        }
        while p < pattern.count, pattern[p] == "*" { p += 1 }
        return p == pattern.count
    }
}
