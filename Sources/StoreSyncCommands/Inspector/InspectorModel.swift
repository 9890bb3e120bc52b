import StoreHub
import SyncCore
import SyncLocks
import SyncPOSIX

/// What the inspector knows, for every view of its page: the recent actions, states taken
/// among them (so any state since the oldest can be rebuilt here), and the hub's last `status`.
///
/// Bounded: at most `keep` actions and 64 MiB of their JSON. States are taken from the
/// replica at the end of a read, every `keep / 16` actions or more (a value copy: no reducer
/// runs for it), and the oldest actions leave a stretch at a time, down to the next state
/// kept, so the inspector runs no reducer per action beyond its replica's. It keeps at least
/// half of `keep` (a stretch that would leave fewer goes one action at a time, each applied to
/// the base instead), and all but the last sixteenth or so while reads are short.
/// Older states are rebuilt, off the hub, from the hub's data directory when the inspector is
/// given it (`--data-dir`: the newest snapshot at or before the seq and the journal after it),
/// else from the hub's resume window when it still starts at seq 1. Thread-safe: the replica's
/// reader appends, the server's thread reads.
final class InspectorModel<App: SyncApp>: Sendable {
    /// One kept action.
    struct Entry: Sendable {
        /// The action as sequenced.
        let action: SequencedAction
        /// Its line for the page (`{"action":…,"id":…,"origin":…,"origin_name":…,"seq":…,"time":…,"type":…}`),
        /// or, for an action of more than ``InspectorModel/maxLineActionBytes``, its placeholder
        /// (`"action_bytes":N` instead of `"action"`).
        let line: [UInt8]
    }

    /// The largest action a page line holds whole (64 KiB of canonical JSON); a larger one's
    /// line says its size instead, and the page fetches it alone (`/api/action?seq=N`).
    static var maxLineActionBytes: Int { 64 << 10 }
    /// The most bytes (UTF-8) of an action's `type` a line repeats beside it.
    static var maxLineTypeBytes: Int { 200 }

    /// A state the inspector keeps: right after action `seq`.
    struct KeptState: Sendable {
        var seq: UInt64
        var state: App.State
    }

    /// Only touched under the model's lock; a state is copied out (a value) before it leaves it.
    private struct Ring: Sendable {
        var entries: [Entry] = []
        var head = 0
        var bytes = 0
        /// The state right before `entries[head]` (after its seq).
        var base: KeptState
        /// States after later kept actions, oldest first, each `stateEvery` or more after the one before.
        var later: [KeptState] = []

        /// The seq of the newest kept action (the base's when none is).
        var newest: UInt64 { base.seq + UInt64(entries.count - head) }
    }

    let app: App
    /// The most actions kept.
    let keep: Int
    /// How many actions apart the kept states are.
    let stateEvery: Int
    /// The most bytes of action lines kept.
    let maxBytes: Int
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
    ///   - maxBytes: The most bytes of action lines kept.
    ///   - dataDirectory: The hub's data directory, if the inspector may read it.
    init(app: App, state: App.State, seq: UInt64, keep: Int, maxBytes: Int = 64 << 20, dataDirectory: String?) {
        self.app = app
        self.keep = max(1, keep)
        self.stateEvery = max(1, keep / 16)
        self.maxBytes = maxBytes
        self.dataDirectory = dataDirectory
        ring = Locked(Ring(base: KeptState(seq: seq, state: state)))
    }

    /// Adds a sequenced action (the reader's thread), and returns its line. Nothing is
    /// computed from the state here: the patch an action made is computed when a page asks
    /// for it (``stateAndPatch(at:hubWindow:)``), so a page costs the hub's replicas nothing per action.
    ///
    /// - Parameters:
    ///   - action: The action.
    ///   - stateAfter: The state right after it, when the caller has it at hand (`nil`: it
    ///     has not); asked only when a state is due to be kept.
    /// - Returns: Its line for the page.
    @discardableResult
    func append(_ action: SequencedAction, stateAfter: () -> App.State? = { nil }) -> [UInt8] {
        let line = Self.line(for: action)
        let stateEvery = UInt64(self.stateEvery)
        let keep = self.keep, maxBytes = self.maxBytes
        // One hold of the lock per action; a second only when a state is due (every
        // `stateEvery` actions) or the oldest must go (a stretch at a time).
        let next = ring.withLock { ring -> AppendOutcome in
            ring.entries.append(Entry(action: action, line: line))
            ring.bytes += line.count
            let last = ring.later.last?.seq ?? ring.base.seq
            let kept = ring.entries.count - ring.head
            return AppendOutcome(due: action.seq > last && action.seq - last >= stateEvery,
                                 full: kept > keep || (ring.bytes > maxBytes && kept > 1))
        }
        guard next.due || next.full else { return line }
        // The state is read outside the model's lock, and states dropped are freed outside it.
        let state = next.due ? stateAfter() : nil
        let dropped = ring.withLock { ring -> [KeptState] in
            if let state, ring.newest == action.seq { ring.later.append(KeptState(seq: action.seq, state: state)) }
            return evict(&ring)
        }
        _ = dropped
        return line
    }

    /// Drops the oldest actions past `keep` or ``maxBytes``: down to the next kept state, or,
    /// when no later state is kept, one at a time, applied to the base.
    ///
    /// - Parameter ring: The ring, under the lock.
    /// - Returns: The states no longer kept, to be freed outside the lock.
    private func evict(_ ring: inout Ring) -> [KeptState] {
        var dropped: [KeptState] = []
        while ring.entries.count - ring.head > keep || (ring.bytes > maxBytes && ring.entries.count - ring.head > 1) {
            let kept = ring.entries.count - ring.head
            let overBytes = ring.bytes > maxBytes
            // Compared as seqs before any conversion: `count` is at most the kept actions. A
            // jump that would leave fewer than half of `keep` (states are taken at the end of a
            // read, and a read that catches up can be long) is made only for the byte bound;
            // else the oldest action is applied to the base, one at a time, until it is not.
            if let next = ring.later.first, next.seq > ring.base.seq, next.seq <= ring.newest,
               overBytes || kept - Int(next.seq - ring.base.seq) >= keep / 2 {
                let count = Int(next.seq - ring.base.seq)
                for entry in ring.entries[ring.head..<(ring.head + count)] { ring.bytes -= entry.line.count }
                ring.head += count
                dropped.append(ring.base)
                ring.base = next
                ring.later.removeFirst()
            } else {
                let oldest = ring.entries[ring.head]
                ReplicaCommand.apply(app, oldest.action.action, seq: oldest.action.seq, to: &ring.base.state)
                ring.base.seq = oldest.action.seq
                ring.bytes -= oldest.line.count
                ring.head += 1
            }
        }
        if ring.head > 1024, ring.head * 2 > ring.entries.count {
            ring.entries.removeFirst(ring.head)
            ring.head = 0
        }
        return dropped
    }

    /// An action's line for the page, written member by member in canonical order (the
    /// same bytes as the canonical form of ``SequencedAction``'s members plus `type`, with
    /// `time` as a number): the action's JSON is encoded once, and nothing is sorted.
    ///
    /// An action of more than ``maxLineActionBytes`` gets `"action_bytes":N` (its size)
    /// instead of `"action"`, and a `type` is cut to ``maxLineTypeBytes`` bytes, at a scalar's end (then
    /// `"type_cut":true`), so every line stays small whatever a client dispatched.
    ///
    /// - Parameters:
    ///   - action: The action.
    ///   - whole: Whether the action is written whatever its size (`/api/action?seq=N`).
    /// - Returns: `{"action":…,"id":…,"origin":…,"origin_name":…,"seq":…,"time":…,"type":…}`.
    static func line(for action: SequencedAction, whole: Bool = false) -> [UInt8] {
        var line: [UInt8] = []
        line.reserveCapacity(160)
        line += #"{"action":"#.utf8
        let start = line.count
        action.action.writeCanonical(into: &line)
        let size = line.count - start
        if size > maxLineActionBytes, !whole {
            line.removeSubrange(1...)
            line += #""action_bytes":"#.utf8
            JSON(size).writeCanonical(into: &line)
        }
        line += #","id":"#.utf8
        action.id.json.writeCanonical(into: &line)
        line += #","origin":"#.utf8
        JSON(action.origin).writeCanonical(into: &line)
        if let name = action.stamp.originName {
            line += #","origin_name":"#.utf8
            JSON.string(name).writeCanonical(into: &line)
        }
        line += #","seq":"#.utf8
        JSON(action.seq).writeCanonical(into: &line)
        if let time = action.stamp.time {
            line += #","time":"#.utf8
            JSON(Int(truncatingIfNeeded: time)).writeCanonical(into: &line)
        }
        if let type = action.action["type"]?.stringValue {
            line += #","type":"#.utf8
            if type.utf8.count > maxLineTypeBytes {
                // Cut by bytes, at a scalar's end: a character may hold any number of scalars.
                var cut = String.UnicodeScalarView()
                var bytes = 0
                for scalar in type.unicodeScalars {
                    bytes += UTF8.width(scalar)
                    guard bytes <= maxLineTypeBytes else { break }
                    cut.append(scalar)
                }
                JSON.string(String(cut)).writeCanonical(into: &line)
                line += #","type_cut":true"#.utf8
            } else {
                JSON.string(type).writeCanonical(into: &line)
            }
        }
        line.append(UInt8(ascii: "}"))
        return line
    }

    /// Starts again from a state that replaced the replica's (a re-hydration: no action led to it).
    func restart(state: App.State, seq: UInt64) {
        let old = ring.withLock { ring -> Ring in
            let old = ring
            ring = Ring(base: KeptState(seq: seq, state: state))
            return old
        }
        _ = old
    }

    /// Keeps the hub's latest `status`.
    func setStatus(_ status: JSON) { lastStatus.withLock { $0 = status } }

    /// The seqs the inspector can rebuild from what it keeps: the base's and the newest.
    var window: (base: UInt64, newest: UInt64) {
        ring.withLock { ring in (ring.base.seq, ring.newest) }
    }

    /// The kept actions after `after` and before `before`, as lines, oldest first: at most
    /// `limit` of them and `maxBytes` of lines (always at least one when there is one), the
    /// oldest of the range or the newest.
    ///
    /// - Parameters:
    ///   - after: The seq they follow.
    ///   - before: The seq they precede (`nil`: up to the newest).
    ///   - limit: The most lines.
    ///   - maxBytes: The most bytes of lines.
    ///   - newest: Whether the newest of the range are taken (else the oldest).
    /// - Returns: The lines, whether the range held more than they, and the seq of the first.
    func lines(after: UInt64, before: UInt64? = nil, limit: Int, maxBytes: Int = .max,
               newest: Bool = true) -> (lines: [[UInt8]], more: Bool, first: UInt64?) {
        ring.withLock { ring in
            let entries = ring.entries[ring.head...]
            // Kept actions are consecutive: the range is found by arithmetic, not by a scan.
            let first = ring.base.seq + 1
            guard after < UInt64.max else { return ([], false, nil) }
            let low = max(after + 1, first)
            let high = min(before.map { $0 == 0 ? 0 : $0 - 1 } ?? ring.newest, ring.newest)
            guard low <= high, high >= first else { return ([], false, nil) }
            let range = (entries.startIndex + Int(low - first))...(entries.startIndex + Int(high - first))
            var picked: [[UInt8]] = []
            var bytes = 0
            // Walked in place, newest or oldest first (no array of up to `--keep` indices).
            let (from, to) = newest ? (range.upperBound, range.lowerBound) : (range.lowerBound, range.upperBound)
            for index in stride(from: from, through: to, by: newest ? -1 : 1) {
                let line = entries[index].line
                guard picked.count < limit, picked.isEmpty || bytes + line.count <= maxBytes else { break }
                picked.append(line)
                bytes += line.count
            }
            let firstSeq = newest ? high - UInt64(picked.count) + 1 : low
            return (newest ? picked.reversed() : picked, picked.count < range.count, picked.isEmpty ? nil : firstSeq)
        }
    }

    /// The line of one kept action with the action whole, whatever its size.
    ///
    /// - Parameter seq: Its seq.
    /// - Returns: The line, or `nil` when that action is not kept.
    func wholeLine(at seq: UInt64) -> [UInt8]? {
        let action = ring.withLock { ring -> SequencedAction? in
            guard seq > ring.base.seq, seq <= ring.newest else { return nil }
            return ring.entries[ring.head + Int(seq - ring.base.seq - 1)].action
        }
        return action.map { Self.line(for: $0, whole: true) }
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
        // The newest kept state at or before `seq`, and the actions from it to `seq`.
        let kept = ring.withLock { ring -> KeptRun? in
            guard seq >= ring.base.seq, seq <= ring.newest else { return nil }
            let from = ring.later.last { $0.seq <= seq } ?? ring.base
            let start = ring.head + Int(from.seq - ring.base.seq)
            return KeptRun(from: from, actions: ring.entries[start..<(start + Int(seq - from.seq))].map(\.action))
        }
        if let kept {
            var state = kept.from.state
            for action in kept.actions { ReplicaCommand.apply(app, action.action, seq: action.seq, to: &state) }
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

    /// A kept state and the kept actions after it, copied out of the lock.
    private struct KeptRun {
        let from: KeptState
        let actions: [SequencedAction]
    }

    /// The most bytes of states one DevTools export holds (it holds the state after every action).
    static var maxExportBytes: Int { 256 << 20 }

    /// The inspector's page data in Redux DevTools' own format (the lifted state its Import
    /// reads): every kept action, the state before them as the committed state, and the state
    /// after each; refused when those states pass ``maxExportBytes``.
    func devTools() -> Result<JSON, InspectorError> {
        let kept = ring.withLock { ring in KeptRun(from: ring.base, actions: ring.entries[ring.head...].map(\.action)) }
        let base = kept.from.state, actions = kept.actions
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

/// What one append found, under the lock: whether a state is due to be kept, and whether the
/// oldest actions must go. A struct outside the generic model, not a tuple: its type needs no
/// run-time look-up on the reader's path.
private struct AppendOutcome {
    let due: Bool
    let full: Bool
}

/// Why the inspector cannot answer (said to the page).
struct InspectorError: Error, Sendable {
    /// What happened, and what to do.
    let message: String

    init(_ message: String) { self.message = message }
}
