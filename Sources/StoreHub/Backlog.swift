/// The hub's one copy of the sequenced `action` frames: every attached replica reads it at a
/// position of its own, and replicas that resume are served from it.
///
/// Like Redis's replication backlog, memory is O(backlog), not O(replicas × backlog): a frame
/// is encoded once, appended here once, and written to each socket straight from this buffer.
///
/// Positions are absolute byte offsets in the stream of every frame ever appended (they only
/// grow, so a reader's position stays valid while the buffer is compacted). The backlog keeps
/// at least `minimumActions` frames, and more while they fit in `maximumBytes`; a reader whose
/// position falls before ``heldStart`` keeps the bytes it still needs in memory, up to the
/// hub's per-replica limit (`--max-queue-bytes`); past it, the event loop detaches it, and it
/// comes back by resuming or re-attaching.
///
/// Owned by the ``Sequencer`` (which appends) and read by the ``HubLoop`` (which writes),
/// both on the event-loop thread.
final class Backlog {
    /// The bytes from absolute position `base` on (`bytes[0]` is at `base`).
    private var bytes: [UInt8] = []
    private var base: UInt64 = 0
    /// `offsets[i]` is the absolute position where the frame of seq `firstSeq + i - head` starts.
    private var offsets: [UInt64] = []
    /// The seq of `offsets[head]`, the oldest frame still held.
    private var firstSeq: UInt64 = 1
    private var head = 0
    /// The least number of frames held, whatever their size.
    let minimumActions: Int
    /// The most bytes held once `minimumActions` frames are.
    let maximumBytes: Int

    /// Creates an empty backlog.
    ///
    /// - Parameters:
    ///   - minimumActions: The least number of frames held.
    ///   - maximumBytes: The byte budget beyond that minimum.
    init(minimumActions: Int, maximumBytes: Int) {
        self.minimumActions = max(0, minimumActions)
        self.maximumBytes = max(0, maximumBytes)
    }

    /// The number of frames held.
    var count: Int { offsets.count - head }
    /// The seq of the newest frame held (or `firstSeq - 1` when empty).
    var lastSeq: UInt64 { firstSeq + UInt64(count) - 1 }
    /// The absolute position just past the newest byte: where the next frame will start.
    var end: UInt64 { base + UInt64(bytes.count) }
    /// The absolute position of the oldest frame held (``end`` when none is held).
    var heldStart: UInt64 { count == 0 ? end : offsets[head] }
    /// Bytes held.
    var byteCount: Int { Int(end - heldStart) }

    /// Starts the backlog after `seq` (nothing held), e.g. after recovery without journal records.
    ///
    /// Positions keep growing: a reader at the old ``end`` is still at the end.
    func reset(after seq: UInt64) {
        base = end
        bytes.removeAll()
        offsets.removeAll()
        head = 0
        firstSeq = seq + 1
    }

    /// Adds frames for consecutive seqs starting at `first`, then lets the oldest go past the
    /// budget (they stay in memory for readers still writing them, until ``compact(keepingFrom:)``).
    ///
    /// - Parameters:
    ///   - frames: The frames, back to back.
    ///   - starts: Where each frame starts in `frames`.
    ///   - first: The seq of the first frame.
    func append(_ frames: [UInt8], starts: [Int], first: UInt64) {
        guard !starts.isEmpty else { return }
        if count == 0 || first != lastSeq + 1 {
            // Empty, or not contiguous (cannot happen: the sequencer appends in order).
            reset(after: first - 1)
        }
        let at = end
        bytes.append(contentsOf: frames)
        for start in starts { offsets.append(at + UInt64(start)) }
        while count > minimumActions, byteCount > maximumBytes {
            head += 1
            firstSeq += 1
        }
    }

    /// Frees the memory before `position` (at most ``heldStart``), once it is at least half
    /// the buffer (amortised O(1) per byte).
    ///
    /// - Parameter position: The oldest position a reader still needs.
    func compact(keepingFrom position: UInt64) {
        // Cut at the start of the frame holding the oldest needed byte, so every byte in
        // memory belongs to a frame whose start is known.
        guard let index = frameIndex(containing: min(position, heldStart)) else { return }
        let cut = Int(offsets[index] - base)
        guard cut > 0, cut * 2 >= bytes.count else { return }
        bytes.removeSubrange(0..<cut)
        offsets.removeSubrange(0..<index)
        head -= index
        base += UInt64(cut)
    }

    /// Whether every frame after `seq` is held (true when `seq` is the newest).
    func covers(after seq: UInt64) -> Bool {
        seq == lastSeq || (seq + 1 >= firstSeq && seq < lastSeq)
    }

    /// The absolute position of the frame of seq `seq + 1` (``end`` when `seq` is the
    /// newest); `nil` when not every frame after `seq` is held.
    func position(after seq: UInt64) -> UInt64? {
        guard covers(after: seq) else { return nil }
        if seq == lastSeq { return end }
        return offsets[head + Int(seq + 1 - firstSeq)]
    }

    /// The end of the frame that contains `position` (`position` itself at a frame boundary
    /// or outside the held frames).
    func frameEnd(containing position: UInt64) -> UInt64 {
        guard let index = frameIndex(containing: position), offsets[index] != position else { return position }
        return index + 1 < offsets.count ? offsets[index + 1] : end
    }

    /// The seq of the newest frame wholly before `position` (`firstSeq - 1` when none is held
    /// there). Positions at or past ``end`` give ``lastSeq``.
    func seq(before position: UInt64) -> UInt64 {
        if position >= end { return lastSeq }
        // Whether `position` starts frame k or lies inside it, frame k - 1 is the last whole one.
        guard let index = frameIndex(containing: position) else { return firstSeq - UInt64(head) - 1 }
        return firstSeq + UInt64(index) - UInt64(head) - 1
    }

    /// The index in `offsets` of the last frame starting at or before `position` (including
    /// released frames still in memory), or `nil` when `position` precedes them all.
    private func frameIndex(containing position: UInt64) -> Int? {
        var low = 0, high = offsets.count
        while low < high {
            let middle = (low + high) / 2
            if offsets[middle] <= position { low = middle + 1 } else { high = middle }
        }
        return low == 0 ? nil : low - 1
    }

    /// Calls `body` with the held or released bytes from `from` to `to` (absolute positions
    /// still in memory).
    func withBytes<R>(from: UInt64, to: UInt64, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        let lower = Int(from - base), upper = Int(to - base)
        return bytes.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[lower..<upper])) }
    }

    /// Calls `body` with every byte in memory and the absolute position of the first.
    func withStream<R>(_ body: (UnsafeRawBufferPointer, UInt64) -> R) -> R {
        bytes.withUnsafeBytes { body($0, base) }
    }

    /// Whether the bytes at `position` are still in memory (held, or released and not yet compacted).
    func inMemory(_ position: UInt64) -> Bool { position >= base && position <= end }
}
