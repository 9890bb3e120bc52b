#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The hub's one copy of the sequenced `action` frames: every attached replica reads it at a
/// position of its own, and replicas that resume are served from it.
///
/// Like Redis's replication backlog, memory is O(backlog), not O(replicas × backlog): a frame
/// is encoded once, appended here once, and written to each socket straight from this memory.
///
/// Positions are absolute byte offsets in the stream of every frame ever appended (they only
/// grow, so a reader's position stays valid while old memory is freed). The bytes live in
/// blocks of ``blockBytes`` (a frame never straddles two), so freeing the oldest frames frees
/// whole blocks: no copying, no buffer that doubles. The backlog keeps at least
/// `minimumActions` frames, and more while they fit in `maximumBytes` (the resume window); a
/// reader whose position falls before the window keeps the bytes it still needs in memory, up
/// to the hub's per-replica limit (`--max-queue-bytes`); past it, the event loop detaches it,
/// and it comes back by resuming or re-attaching.
///
/// Owned by the ``Sequencer`` (which appends) and read by the ``HubCore`` (whose reactor writes),
/// both on the event-loop thread. Its hot stored properties are `@exclusivity(unchecked)`,
/// each with its line of proof: see ``HubLoop``'s note on exclusivity.
final class Backlog {
    /// One block of frames: its memory never moves, so a gathered write can point into it.
    private final class Block {
        /// The absolute position of the first byte.
        let start: UInt64
        let memory: UnsafeMutableRawBufferPointer
        // Unchecked: grows with every frame appended to the block; only assigned.
        @exclusivity(unchecked) var count = 0

        init(start: UInt64, capacity: Int) {
            self.start = start
            self.memory = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 16)
        }

        deinit { memory.deallocate() }

        var end: UInt64 { start + UInt64(count) }
        var room: Int { memory.count - count }
    }

    /// The blocks in memory, oldest first; contiguous in positions.
    // Unchecked: read by every append, gather and lookup; mutated only by `Array` methods.
    @exclusivity(unchecked) private var blocks: [Block] = []
    /// The absolute position just past the newest byte.
    // Unchecked: read for every answer (its gate) and grown by every append; only assigned.
    @exclusivity(unchecked) private(set) var end: UInt64 = 0
    /// `offsets[i]` is the absolute position where the frame of seq `firstSeq + i - head` starts.
    // Unchecked: one entry per frame, read by every lookup; mutated only by `Array` methods.
    @exclusivity(unchecked) private var offsets: [UInt64] = []
    /// The seq of `offsets[head]`, the oldest frame in the window.
    // Unchecked: read by every lookup (`lastSeq`, `position`); only assigned.
    @exclusivity(unchecked) private var firstSeq: UInt64 = 1
    // Unchecked: read by every lookup (`count`); only assigned.
    @exclusivity(unchecked) private var head = 0
    /// The least number of frames held, whatever their size.
    let minimumActions: Int
    /// The most bytes held once `minimumActions` frames are.
    let maximumBytes: Int
    /// The size of a block (a larger frame gets a block of its own size).
    let blockBytes: Int

    /// Creates an empty backlog.
    ///
    /// - Parameters:
    ///   - minimumActions: The least number of frames held.
    ///   - maximumBytes: The byte budget beyond that minimum.
    ///   - blockBytes: The size of each block of memory (default 1 MiB).
    init(minimumActions: Int, maximumBytes: Int, blockBytes: Int = 1 << 20) {
        self.minimumActions = max(0, minimumActions)
        self.maximumBytes = max(0, maximumBytes)
        self.blockBytes = max(1, blockBytes)
    }

    /// The number of frames in the resume window.
    var count: Int { offsets.count - head }
    /// The seq of the newest frame held (or `firstSeq - 1` when empty).
    var lastSeq: UInt64 { firstSeq + UInt64(count) - 1 }
    /// The absolute position of the oldest frame in the window (``end`` when none is).
    var heldStart: UInt64 { count == 0 ? end : offsets[head] }
    /// Bytes in the window.
    var byteCount: Int { Int(end - heldStart) }
    /// The oldest position still in memory.
    private var base: UInt64 { blocks.first?.start ?? end }
    /// Bytes of memory the blocks take (for tests and monitoring).
    var residentBytes: Int { blocks.reduce(0) { $0 + $1.memory.count } }

    /// Starts the backlog after `seq` (nothing held), e.g. after recovery without journal records.
    ///
    /// Positions keep growing: a reader at the old ``end`` is still at the end.
    func reset(after seq: UInt64) {
        blocks.removeAll()
        offsets.removeAll()
        head = 0
        firstSeq = seq + 1
    }

    /// Adds frames for consecutive seqs starting at `first`, then lets the oldest leave the
    /// window past the budget (their memory is freed by ``compact(keepingFrom:)`` once no
    /// reader needs it).
    ///
    /// - Parameters:
    ///   - frames: The frames, back to back.
    ///   - starts: Where each frame starts in `frames`.
    ///   - first: The seq of the first frame.
    func append(_ frames: [UInt8], starts: [Int], first: UInt64) {
        guard !starts.isEmpty else { return }
        if first != lastSeq + 1 {
            // Not contiguous (cannot happen: the sequencer appends in order). An empty window
            // is not reset: readers may still be writing its released frames.
            reset(after: first - 1)
        }
        frames.withUnsafeBytes { source in
            for (index, start) in starts.enumerated() {
                let stop = index + 1 < starts.count ? starts[index + 1] : source.count
                let length = stop - start
                if blocks.last.map({ $0.room < length }) ?? true {
                    blocks.append(Block(start: end, capacity: max(blockBytes, length)))
                }
                let block = blocks[blocks.count - 1]
                if length > 0, let from = source.baseAddress, let into = block.memory.baseAddress {
                    (into + block.count).copyMemory(from: from + start, byteCount: length)
                }
                block.count += length
                offsets.append(end)
                end += UInt64(length)
            }
        }
        while count > minimumActions, byteCount > maximumBytes {
            head += 1
            firstSeq += 1
        }
    }

    /// Frees the blocks wholly before `position` (and before the window).
    ///
    /// - Parameter position: The oldest position a reader still needs.
    func compact(keepingFrom position: UInt64) {
        let keep = min(position, heldStart)
        var drop = 0
        while drop < blocks.count - 1, blocks[drop].end <= keep { drop += 1 }
        if drop > 0 { blocks.removeFirst(drop) }
        // Forget the offsets of frames no longer in memory, once they are half the array.
        let base = self.base
        var gone = 0
        while gone < head, offsets[gone] < base { gone += 1 }
        if gone > 0, gone * 2 >= offsets.count {
            offsets.removeFirst(gone)
            head -= gone
        }
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
    /// or outside the frames whose offsets are known).
    func frameEnd(containing position: UInt64) -> UInt64 {
        guard let index = frameIndex(containing: position), offsets[index] != position else { return position }
        return index + 1 < offsets.count ? offsets[index + 1] : end
    }

    /// The seq of the newest frame wholly before `position`. Positions at or past ``end``
    /// give ``lastSeq``.
    func seq(before position: UInt64) -> UInt64 {
        if position >= end { return lastSeq }
        // Whether `position` starts frame k or lies inside it, frame k - 1 is the last whole one.
        guard let index = frameIndex(containing: position) else { return firstSeq - UInt64(head) - 1 }
        return firstSeq + UInt64(index) - UInt64(head) - 1
    }

    /// The index in `offsets` of the last frame starting at or before `position`, or `nil`
    /// when `position` precedes them all.
    private func frameIndex(containing position: UInt64) -> Int? {
        var low = 0, high = offsets.count
        while low < high {
            let middle = (low + high) / 2
            if offsets[middle] <= position { low = middle + 1 } else { high = middle }
        }
        return low == 0 ? nil : low - 1
    }

    /// Whether the bytes at `position` are still in memory.
    func inMemory(_ position: UInt64) -> Bool { position >= base && position <= end }

    /// Appends buffers for the bytes from `from` to `to` (positions in memory) to `vectors`,
    /// at most `limit` buffers in all. The memory stays valid until the next ``compact(keepingFrom:)``
    /// or ``reset(after:)``.
    ///
    /// - Returns: The position the buffers reach (`to`, or less when `limit` ran out).
    func gather(from: UInt64, to: UInt64, into vectors: inout [iovec], limit: Int) -> UInt64 {
        guard from < to, inMemory(from), let first = blockIndex(containing: from) else { return from }
        var position = from
        var index = first
        while position < to, index < blocks.count, vectors.count < limit {
            let block = blocks[index]
            let upper = min(to, block.end)
            if upper > position, let start = block.memory.baseAddress {
                vectors.append(iovec(iov_base: start + Int(position - block.start), iov_len: Int(upper - position)))
                position = upper
            }
            index += 1
        }
        return position
    }

    /// A copy of the bytes from `from` to `to` (positions in memory).
    func copy(from: UInt64, to: UInt64) -> [UInt8] {
        var vectors: [iovec] = []
        _ = gather(from: from, to: to, into: &vectors, limit: Int.max)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(to - from))
        for vector in vectors {
            bytes.append(contentsOf: UnsafeRawBufferPointer(start: vector.iov_base, count: vector.iov_len))
        }
        return bytes
    }

    /// The index of the block holding `position` (the last block for ``end``).
    private func blockIndex(containing position: UInt64) -> Int? {
        var low = 0, high = blocks.count
        while low < high {
            let middle = (low + high) / 2
            if blocks[middle].start <= position { low = middle + 1 } else { high = middle }
        }
        return low == 0 ? nil : low - 1
    }
}
