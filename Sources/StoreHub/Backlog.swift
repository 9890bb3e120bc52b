/// The most recent sequenced `action` frames, encoded once, for replicas that resume.
///
/// One contiguous byte buffer and the offset of each frame: a resume at seq N sends the
/// bytes from frame N+1 to the end in one piece. It keeps at least `minimumActions` frames,
/// and more while they fit in `maximumBytes`.
struct Backlog {
    private var bytes: [UInt8] = []
    /// `offsets[i]` is where the frame of seq `firstSeq + i` starts in `bytes`.
    private var offsets: [Int] = []
    /// The seq of `offsets[head]`, the oldest frame still held.
    private var firstSeq: UInt64 = 1
    private var head = 0
    let minimumActions: Int
    let maximumBytes: Int

    init(minimumActions: Int, maximumBytes: Int) {
        self.minimumActions = max(0, minimumActions)
        self.maximumBytes = max(0, maximumBytes)
    }

    /// The number of frames held.
    var count: Int { offsets.count - head }
    /// The seq of the newest frame held (or `firstSeq - 1` when empty).
    var lastSeq: UInt64 { firstSeq + UInt64(count) - 1 }
    /// Bytes held.
    var byteCount: Int { count == 0 ? 0 : bytes.count - offsets[head] }

    /// Starts the backlog after `seq` (nothing held), e.g. after recovery without journal records.
    mutating func reset(after seq: UInt64) {
        bytes.removeAll()
        offsets.removeAll()
        head = 0
        firstSeq = seq + 1
    }

    /// Adds frames for consecutive seqs starting at `first`.
    ///
    /// - Parameters:
    ///   - frames: The frames, back to back.
    ///   - starts: Where each frame starts in `frames`.
    ///   - first: The seq of the first frame.
    mutating func append(_ frames: [UInt8], starts: [Int], first: UInt64) {
        guard !starts.isEmpty else { return }
        if count == 0 { reset(after: first - 1) }
        guard first == lastSeq + 1 else {
            // Not contiguous (cannot happen: the sequencer appends in order); start over.
            reset(after: first - 1)
            return append(frames, starts: starts, first: first)
        }
        let base = bytes.count
        bytes.append(contentsOf: frames)
        for start in starts { offsets.append(base + start) }
        trim()
    }

    private mutating func trim() {
        while count > 0, count > minimumActions, byteCount > maximumBytes {
            head += 1
            firstSeq += 1
        }
        // Drop the released prefix once it is at least half the buffer (amortised O(1) per byte).
        if head > 0, head < offsets.count, offsets[head] * 2 >= bytes.count {
            let cut = offsets[head]
            bytes.removeSubrange(0..<cut)
            offsets.removeSubrange(0..<head)
            for index in offsets.indices { offsets[index] -= cut }
            head = 0
        }
    }

    /// Whether every frame after `seq` is held (true when `seq` is the newest).
    func covers(after seq: UInt64) -> Bool {
        seq == lastSeq || (seq + 1 >= firstSeq && seq < lastSeq)
    }

    /// The frames after `seq`, back to back; `nil` when not all are held.
    func frames(after seq: UInt64) -> [UInt8]? {
        guard covers(after: seq) else { return nil }
        if seq == lastSeq { return [] }
        return Array(bytes[offsets[head + Int(seq + 1 - firstSeq)]...])
    }
}
