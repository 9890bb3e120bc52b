import StoreHub
import SyncCore
import SyncLocks
import SyncPOSIX

/// What the inspector knows, for every view of its page: the recent actions with the patch
/// each made, the state before the oldest of them (so any state since can be rebuilt here),
/// and the hub's last `status`.
///
/// Bounded: at most `keep` actions and 64 MiB of their JSON; the oldest leave first, applied
/// to the kept state as they go. Older states are rebuilt, off the hub, from the hub's data
/// directory when the inspector is given it (`--data-dir`: the newest snapshot at or before
/// the seq and the journal after it), else from the hub's resume window when it still starts
/// at seq 1. Thread-safe: the replica's reader appends, the server's thread reads.
final class InspectorModel<App: SyncApp>: Sendable {
    /// One kept action.
    struct Entry: Sendable {
        /// The action as sequenced.
        let action: SequencedAction
        /// Its line for the page (`{"action":…,"id":…,"origin":…,"origin_name":…,"seq":…,"time":…,"type":…}`).
        let line: [UInt8]
    }

    /// Only touched under the model's lock; the state is copied out (a value) before it leaves it.
    private struct Ring: Sendable {
        var entries: [Entry] = []
        var head = 0
        var bytes = 0
        /// The state right before `entries[head]` (after `baseSeq`).
        var base: App.State
        var baseSeq: UInt64
    }

    let app: App
    /// The most actions kept.
    let keep: Int
    /// The most bytes of action lines kept.
    let maxBytes = 64 << 20
    /// The hub's data directory, read to rebuild older states (read-only).
    let dataDirectory: String?
    private let ring: Locked<Ring>
    private let lastStatus = Locked<JSON?>(nil)

    /// Starts from the state a replica was welcomed with.
    ///
    /// - Parameters:
    ///   - app: The app (its reducer rebuilds states).
    ///   - state: The state at `seq`.
    ///   - seq: Its seq.
    ///   - keep: The most actions kept.
    ///   - dataDirectory: The hub's data directory, if the inspector may read it.
    init(app: App, state: App.State, seq: UInt64, keep: Int, dataDirectory: String?) {
        self.app = app
        self.keep = max(1, keep)
        self.dataDirectory = dataDirectory
        ring = Locked(Ring(base: state, baseSeq: seq))
    }

    /// Adds a sequenced action (the reader's thread), and returns its line. Nothing is
    /// computed from the state here: the patch an action made is computed when a page asks
    /// for it (``state(at:hubWindow:)``), so a page costs the hub's replicas nothing per action.
    ///
    /// - Parameter action: The action.
    /// - Returns: Its line for the page.
    @discardableResult
    func append(_ action: SequencedAction) -> [UInt8] {
        var members: [JSONKey: JSON] = ["seq": JSON(action.seq), "origin": JSON(action.origin), "id": action.id.json,
                                        "action": action.action]
        if let name = action.stamp.originName { members["origin_name"] = .string(name) }
        if let time = action.stamp.time { members["time"] = JSON(Int(truncatingIfNeeded: time)) }
        if let type = action.action["type"]?.stringValue { members["type"] = .string(type) }
        let line = JSON.object(members).canonicalBytes
        let app = self.app
        ring.withLock { ring in
            ring.entries.append(Entry(action: action, line: line))
            ring.bytes += line.count
            while ring.entries.count - ring.head > keep || (ring.bytes > maxBytes && ring.entries.count - ring.head > 1) {
                let oldest = ring.entries[ring.head]
                ReplicaCommand.apply(app, oldest.action.action, seq: oldest.action.seq, to: &ring.base)
                ring.baseSeq = oldest.action.seq
                ring.bytes -= oldest.line.count
                ring.head += 1
            }
            if ring.head > 1024, ring.head * 2 > ring.entries.count {
                ring.entries.removeFirst(ring.head)
                ring.head = 0
            }
        }
        return line
    }

    /// Starts again from a state that replaced the replica's (a re-hydration: no action led to it).
    func restart(state: App.State, seq: UInt64) {
        ring.withLock { $0 = Ring(base: state, baseSeq: seq) }
    }

    /// Keeps the hub's latest `status`.
    func setStatus(_ status: JSON) { lastStatus.withLock { $0 = status } }

    /// The seqs the inspector can rebuild from what it keeps: the base's and the newest.
    var window: (base: UInt64, newest: UInt64) {
        ring.withLock { ring in (ring.baseSeq, ring.baseSeq + UInt64(ring.entries.count - ring.head)) }
    }

    /// The kept actions after `seq`, at most `limit` (the newest ones), as lines.
    func lines(after seq: UInt64, limit: Int) -> [[UInt8]] {
        ring.withLock { ring in
            let kept = ring.entries[ring.head...].filter { $0.action.seq > seq }
            return kept.suffix(limit).map(\.line)
        }
    }

    /// The state right after `seq`, the JSON Patch that action made (from the state after
    /// `seq` − 1; empty at seq 0), and where they were rebuilt from; or why they cannot be.
    ///
    /// - Parameters:
    ///   - seq: The seq.
    ///   - hubWindow: Reads the hub's actions 1…`seq` when its window reaches seq 1 (`nil`: it
    ///     does not).
    /// - Returns: The state's JSON, the patch, and the source; or the reason.
    func stateAndPatch(at seq: UInt64, hubWindow: (UInt64) -> [SequencedAction]?) -> Result<(JSON, [JSON], String), InspectorError> {
        switch state(at: seq, hubWindow: hubWindow) {
        case .failure(let error):
            return .failure(error)
        case .success(let (after, source)):
            guard seq > 0, case .success(let (before, _)) = state(at: seq - 1, hubWindow: hubWindow) else {
                return .success((after, [], source))
            }
            return .success((after, JSONPatch.diff(from: before, to: after), source))
        }
    }

    /// The state right after `seq`, and where it was rebuilt from; or why it cannot be.
    ///
    /// - Parameters:
    ///   - seq: The seq.
    ///   - hubWindow: Reads the hub's actions 1…`seq` when its window reaches seq 1 (`nil`: it
    ///     does not).
    /// - Returns: The state's JSON and its source, or the reason.
    func state(at seq: UInt64, hubWindow: (UInt64) -> [SequencedAction]?) -> Result<(JSON, String), InspectorError> {
        let kept = ring.withLock { ring -> (App.State, [SequencedAction])? in
            let newest = ring.baseSeq + UInt64(ring.entries.count - ring.head)
            guard seq >= ring.baseSeq, seq <= newest else { return nil }
            let actions = ring.entries[ring.head...].prefix(Int(seq - ring.baseSeq)).map(\.action)
            return (ring.base, actions)
        }
        if let (base, actions) = kept {
            var state = base
            for action in actions { ReplicaCommand.apply(app, action.action, seq: action.seq, to: &state) }
            return .success((app.encodeState(state), "inspector"))
        }
        let newest = window.newest
        guard seq <= newest else { return .failure(InspectorError("seq \(seq) is not sequenced yet (the inspector has seen up to seq \(newest))")) }
        if let dataDirectory {
            do throws(StorageError) {
                return .success((try DataDirectory.state(dataDirectory, app: app, at: seq), "data directory"))
            } catch {
                return .failure(InspectorError(error.message))
            }
        }
        if let actions = hubWindow(seq) {
            var state = app.initialState
            for action in actions { ReplicaCommand.apply(app, action.action, seq: action.seq, to: &state) }
            return .success((app.encodeState(state), "hub's resume window"))
        }
        return .failure(InspectorError("seq \(seq) is older than the \(keep) actions the inspector keeps, and the hub's resume window no longer starts at seq 1: give the inspector the hub's data directory (--data-dir DIR) to rebuild it from the newest snapshot at or before it"))
    }

    /// The most bytes of states one DevTools export holds (it holds the state after every action).
    static var maxExportBytes: Int { 256 << 20 }

    /// The inspector's page data in Redux DevTools' own format (the lifted state its Import
    /// reads): every kept action, the state before them as the committed state, and the state
    /// after each; refused when those states pass ``maxExportBytes``.
    func devTools() -> Result<JSON, InspectorError> {
        let (base, actions) = ring.withLock { ring in (ring.base, ring.entries[ring.head...].map(\.action)) }
        var state = base
        var states: [JSON] = []
        var bytes = 0
        states.reserveCapacity(actions.count)
        for action in actions {
            ReplicaCommand.apply(app, action.action, seq: action.seq, to: &state)
            let encoded = app.encodeState(state)
            bytes += encoded.canonicalBytes.count
            guard bytes <= Self.maxExportBytes else {
                return .failure(InspectorError("the states after the \(actions.count) kept actions pass \(Self.maxExportBytes >> 20) MiB; export a smaller range with replica-cli history --from A --to B --devtools FILE"))
            }
            states.append(encoded)
        }
        return .success(DevToolsExport.liftedState(committed: app.encodeState(base), actions: actions, states: states))
    }

    /// The last `status` with what the inspector keeps.
    func statusJSON() -> JSON {
        let (base, newest) = window
        var members: [JSONKey: JSON] = ["inspector": ["kept_from_seq": JSON(base), "seq": JSON(newest), "keep": JSON(keep),
                                                      "data_dir": dataDirectory.map { .string($0) } ?? .null]]
        if let status = lastStatus.withLock({ $0 }) { members["hub"] = status }
        return .object(members)
    }
}

/// Why the inspector cannot answer (said to the page).
struct InspectorError: Error, Sendable {
    /// What happened, and what to do.
    let message: String

    init(_ message: String) { self.message = message }
}
