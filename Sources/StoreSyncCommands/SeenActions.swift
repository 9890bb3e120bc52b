import SyncCore
import SyncLocks

/// The actions `attach` has seen, for `:history` and `:diff`: the last ``capacity`` of them,
/// and the state before the oldest, so that the JSON Patch any of them made can be rebuilt
/// with the app's reducer (which is deterministic) when asked, at no cost per action.
///
/// ``record(_:)`` is called by the one event observer, in seq order; the queries come from the
/// input loop. The reducer never runs under the lock, and values that leave the lock (an
/// evicted entry, a replaced state) are released after it.
final class SeenActions<App: SyncApp>: Sendable {
    /// One action as seen here.
    struct Entry: Sendable {
        /// The action as printed.
        let sequenced: SequencedAction
        /// The action, decoded.
        let action: App.Action
        /// Whether this replica dispatched it.
        let own: Bool
    }

    /// What :diff answers.
    enum Diff {
        /// The action and the patch it made.
        case patch(Entry, [JSON])
        /// Why not.
        case unavailable(String)
    }

    /// How many actions are kept.
    let capacity: Int
    private let app: App
    /// The state before the oldest entry kept, and the entries, oldest first from `head` (those
    /// before it were folded into `base`, and leave the array once per `capacity` of them: an
    /// action costs no shift of the whole array).
    private let kept: Locked<(base: App.State, entries: [Entry], head: Int)>

    /// - Parameters:
    ///   - app: The app (its reducer replays the kept actions).
    ///   - start: The state before the first action that will be recorded.
    ///   - capacity: How many actions to keep.
    init(app: App, start: App.State, capacity: Int = 1000) {
        self.app = app
        self.capacity = max(1, capacity)
        kept = Locked((start, [], 0))
    }

    /// Records the next action applied here. Past the capacity, the oldest is folded into the
    /// base state (the reducer runs here, outside the lock).
    ///
    /// - Parameter entry: The action.
    func record(_ entry: Entry) {
        let full = kept.withLock { kept -> (App.State, Entry)? in
            kept.entries.append(entry)
            guard kept.entries.count - kept.head > capacity else { return nil }
            return (kept.base, kept.entries[kept.head])
        }
        guard let (base, oldest) = full else { return }
        var next = base
        // It was applied here already, to this very state: it cannot fail (if it did, the
        // replica would have diverged and re-hydrated, restarting this record).
        try? app.reduce(into: &next, action: oldest.action)
        let released = kept.withLock { kept -> (App.State, [Entry]) in
            let old = kept.base
            kept.base = next
            kept.head += 1
            guard kept.head >= capacity else { return (old, []) }
            let folded = Array(kept.entries[..<kept.head])
            kept.entries.removeFirst(kept.head)
            kept.head = 0
            return (old, folded)
        }
        withExtendedLifetime(released) {}
    }

    /// Forgets everything: the state was replaced (a re-hydration), not changed by an action.
    ///
    /// - Parameter state: The new state.
    func restart(at state: App.State) {
        let released = kept.withLock { kept -> (App.State, [Entry]) in
            defer { kept = (state, [], 0) }
            return (kept.base, kept.entries)
        }
        withExtendedLifetime(released) {}
    }

    /// The newest `count` actions, oldest first.
    func newest(_ count: Int) -> [Entry] {
        kept.withLock { Array($0.entries[$0.head...].suffix(max(0, count))) }
    }

    /// The JSON Patch action `seq` made (the newest when `nil`), rebuilt from the kept state.
    ///
    /// - Parameter seq: The action's seq.
    /// - Returns: The patch, or why it cannot be had.
    func diff(_ seq: UInt64?) -> Diff {
        let (base, entries) = kept.withLock { ($0.base, Array($0.entries[$0.head...])) }
        guard let first = entries.first, let last = entries.last else {
            return .unavailable("no action has been sequenced since this replica attached (or re-hydrated)")
        }
        let wanted = seq ?? last.sequenced.seq
        guard wanted >= first.sequenced.seq, wanted <= last.sequenced.seq,
              let index = entries.firstIndex(where: { $0.sequenced.seq == wanted }) else {
            return .unavailable("seq \(wanted) is not among the actions seen here (seq \(first.sequenced.seq) to \(last.sequenced.seq), the last \(capacity) at most); replica-cli history --from \(wanted) --to \(wanted) --diff rebuilds it from the hub")
        }
        var state = base
        var before = JSON.null
        for entry in entries[...index] {
            if entry.sequenced.seq == wanted { before = app.encodeState(state) }
            do throws(App.Failure) {
                try app.reduce(into: &state, action: entry.action)
            } catch {
                return .unavailable("this reducer refused seq \(entry.sequenced.seq) when replayed (\(app.describe(error))): it is not deterministic")
            }
        }
        return .patch(entries[index], JSONPatch.diff(from: before, to: app.encodeState(state)))
    }
}
