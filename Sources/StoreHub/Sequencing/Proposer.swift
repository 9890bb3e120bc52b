import SyncCore

/// The first of the sequencer's three parts: turns a dispatch into a proposal for the log.
///
/// For each dispatch, in order: de-duplication on its session (against what the applier has
/// recorded, and against proposals still in flight), then the frame (an envelope that does
/// not fit one frame is refused before the reducer runs), then validation against the
/// **speculative** state (the applied state plus every proposal in flight). What passes is
/// proposed with the next speculative seq, its `action` frame encoded once into a buffer the
/// applier copies from. Nothing here touches the applied (root) state or advances the
/// applied seq.
///
/// On the event-loop thread only. Its hot stored properties are `@exclusivity(unchecked)`,
/// each with its line of proof: see ``HubLoop``'s note on exclusivity.
final class Proposer {
    /// A proposal the log has not yet appended.
    struct InFlight {
        let record: LogRecord
        /// The dispatcher's session, if any.
        let session: SessionEntry?
        /// Where its `action` frame (and its `checkpoint` frame, if one follows) lies in ``frames``.
        let frameStart: Int
        let frameEnd: Int
    }

    /// What became of a dispatch.
    enum Outcome: Equatable {
        /// Proposed as this seq; the `action` broadcast will acknowledge it.
        case proposed(UInt64)
        /// Refused; nothing changed.
        case refused(WireError)
        /// The session already had this id: sequenced as this seq (perhaps still in flight).
        case duplicate(UInt64)
    }

    /// The engine of the app version the history runs (replaced at an upgrade).
    var engine: HubEngine
    /// The seq of the last proposal (the applied seq when nothing is in flight).
    // Unchecked: read and advanced by every proposal; only assigned, never passed inout.
    @exclusivity(unchecked) private(set) var seq: UInt64 = 0
    /// Proposals not yet appended, oldest first (from `head`).
    // Unchecked: appended by every proposal and taken by every append; mutated in place only by `Array` methods, which call no code of ours.
    @exclusivity(unchecked) private var inFlight: [InFlight] = []
    // Unchecked: advanced by every append; only assigned, never passed inout.
    @exclusivity(unchecked) private var head = 0
    /// The frames of the proposals in flight, back to back (reset when none is in flight).
    // Unchecked: every proposal's envelope is written into it inout by `Frame.appendActionEnvelope`, a SyncProtocol function that holds no reference to the proposer.
    @exclusivity(unchecked) private(set) var frames: [UInt8] = []
    /// How a proposal gets a checkpoint digest.
    private let checkpointEvery: UInt64
    /// The generation of the speculative state: bumped whenever it is reset (proposals voided).
    /// One meaning, two uses: an encoded state cached with an older generation is stale, and a
    /// log drops the proposals of a generation it voided (``HubLog/propose(_:expectingLast:epoch:)``).
    // Unchecked: read by every proposal (`log.propose`); only assigned, never passed inout.
    @exclusivity(unchecked) private(set) var epoch = 0

    init(engine: HubEngine, checkpointEvery: UInt64) {
        self.engine = engine
        self.checkpointEvery = checkpointEvery
        frames.reserveCapacity(64 << 10)
    }

    /// The number of proposals in flight.
    var inFlightCount: Int { inFlight.count - head }

    /// The oldest proposal in flight.
    var oldest: InFlight? { head < inFlight.count ? inFlight[head] : nil }

    /// Whether a `checkpoint` follows the action with this seq.
    func isCheckpoint(_ seq: UInt64) -> Bool { checkpointEvery > 0 && seq % checkpointEvery == 0 }

    /// Set when a checkpoint is due by time (``Sequencer`` sets it once per
    /// `--checkpoint-interval` while actions flow): the next proposal carries one.
    // Unchecked: read by every proposal; only assigned, never passed inout.
    @exclusivity(unchecked) var checkpointDue = false

    /// Starts over from the applied state at `applied` (start-up, or after proposals were voided).
    func restart(at applied: UInt64) {
        for entry in inFlight[head...] { entry.session?.inFlight[entry.record.id] = nil }
        inFlight.removeAll(keepingCapacity: true)
        head = 0
        frames.removeAll(keepingCapacity: true)
        seq = applied
        engine.reset()
        epoch &+= 1
    }

    /// The seq a session's dispatch id was applied (or proposed) as, if it was.
    ///
    /// - Parameters:
    ///   - session: The dispatcher's session.
    ///   - id: The dispatcher's id.
    /// - Returns: The original's seq (perhaps still in flight), or `nil` for a new dispatch.
    func duplicate(session: SessionEntry?, id: DispatchID) -> UInt64? { session?.seq(of: id) }

    /// Frames, validates and proposes one dispatch (already de-duplicated).
    ///
    /// - Parameters:
    ///   - action: The action's JSON.
    ///   - id: The dispatcher's id.
    ///   - origin: The dispatching replica.
    ///   - session: The dispatcher's session.
    ///   - stamp: When it is sequenced and its origin's name.
    ///   - snapshotDigest: Serialises the speculative state and returns its digest (for a checkpoint).
    /// - Returns: What became of it, and the record to propose to the log.
    func propose(_ action: WireAction, id: DispatchID, origin: Int, session: SessionEntry?, stamp: ActionStamp = .none,
                 snapshotDigest: () -> String) -> (Outcome, LogRecord?) {
        let next = seq + 1
        // The envelope is encoded before the reducer runs: its canonical form may be longer
        // than what the client sent, and an action that cannot be framed must be refused
        // before it changes the state.
        let start = frames.count
        do throws(FrameError) {
            try Frame.appendActionEnvelope(seq: next, origin: origin, id: id, action: action, stamp: stamp, to: &frames)
        } catch {
            return (.refused(WireError(.frameTooLarge, "the action's canonical form does not fit one frame (\(error.description)); split it into smaller actions")), nil)
        }
        let refusal: WireError?
        switch engine.propose(action) {
        case .applied: refusal = nil
        case .badAction(let message): refusal = WireError(.badAction, message)
        case .rejected(let message): refusal = WireError(.rejected, message)
        }
        if let refusal {
            frames.removeSubrange(start...)
            return (.refused(refusal), nil)
        }
        seq = next
        var checkpoint: String?
        if isCheckpoint(next) || checkpointDue {
            checkpointDue = false
            // The digest of the state right after this action (the speculative state now).
            let digest = snapshotDigest()
            checkpoint = digest
            if let bytes = try? Frame.encode(HubMessage.checkpoint(seq: next, digest: digest)) {
                frames.append(contentsOf: bytes)
            }
        }
        let record = LogRecord(seq: next, origin: origin, id: id, session: session?.name, wire: action, checkpoint: checkpoint,
                               stamp: stamp)
        inFlight.append(InFlight(record: record, session: session, frameStart: start, frameEnd: frames.count))
        session?.inFlight[id] = next
        return (.proposed(next), record)
    }

    /// Proposes an upgrade record at the next seq: nothing is validated against the
    /// speculative state (the migration was), and its frame is the `upgraded` notice.
    ///
    /// - Parameters:
    ///   - record: The record, at seq ``seq`` + 1.
    ///   - frame: Its `upgraded` frame.
    func proposeUpgrade(_ record: LogRecord, frame: [UInt8]) {
        let start = frames.count
        frames.append(contentsOf: frame)
        seq = record.seq
        inFlight.append(InFlight(record: record, session: nil, frameStart: start, frameEnd: frames.count))
    }

    /// Takes the oldest proposal out of flight because the log appended it.
    ///
    /// - Parameter record: The appended record, or `nil` when the log reports this hub's own
    ///   proposals accepted in order (the oldest is then taken as it is).
    /// - Returns: The proposal when the record is it (same seq, origin and id), else `nil`.
    func takeAppended(_ record: LogRecord?) -> InFlight? {
        guard let oldest else { return nil }
        if let record {
            guard oldest.record.seq == record.seq, oldest.record.origin == record.origin, oldest.record.id == record.id else {
                return nil
            }
        }
        head += 1
        oldest.session?.inFlight[oldest.record.id] = nil
        return oldest
    }

    /// Frees the frames of proposals already taken once none is in flight any more.
    func compactIfDrained() {
        guard head > 0, head == inFlight.count else { return }
        inFlight.removeAll(keepingCapacity: true)
        head = 0
        frames.removeAll(keepingCapacity: frames.capacity <= 4 << 20)
    }

    /// The proposals from seq `from` on, which the log will not append where they were
    /// proposed; they are forgotten (the caller judges their dispatches again).
    ///
    /// - Returns: How many were voided.
    @discardableResult
    func void(from: UInt64) -> Int {
        var voided = 0
        while inFlight.count > head, let last = inFlight.last, last.record.seq >= from {
            last.session?.inFlight[last.record.id] = nil
            inFlight.removeLast()
            voided += 1
        }
        return voided
    }
}
