import SyncCore
import SyncLocks
import Synchronization

/// The states `watch --diff` has seen, to turn each applied action into a JSON Patch.
///
/// The store's subscriber calls ``applied(_:)`` once per applied action, on the reader's
/// thread, in order; the action observer calls ``nextPatch()`` once per action, in the same
/// order, after the batch: the two are matched by position.
final class StateDiffs: Sendable {
    private let states: Locked<(previous: JSON, queue: [JSON])>

    init(start: JSON) { states = Locked((start, [])) }

    /// Records the state after one applied action.
    func applied(_ state: JSON) { states.withLock { $0.queue.append(state) } }

    /// The patch of the oldest action not yet printed.
    func nextPatch() -> [JSON] {
        let (before, after) = states.withLock { states -> (JSON, JSON?) in
            guard !states.queue.isEmpty else { return (states.previous, nil) }
            let after = states.queue.removeFirst()
            defer { states.previous = after }
            return (states.previous, after)
        }
        return after.map { JSONPatch.diff(from: before, to: $0) } ?? []
    }

    /// Starts again from a re-hydrated state (its replacement is not an action).
    func restart(at state: JSON) { states.withLock { $0 = (state, []) } }
}
