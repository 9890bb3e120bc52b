import SyncCore
import SyncPOSIX

/// Judging requests and delivering their answers: what each request is answered, and the
/// bytes each answer queues for its connection.
extension HubCore {
    /// While the log cannot take anything, the answers that need neither the log nor the
    /// speculative state — a new dispatch refused `unavailable`, `status` and `welcome` from
    /// the applied state — go out at once, even while the sequencer waits for proposals in
    /// doubt (it judges nothing then). `nil` when the request must take its turn.
    ///
    /// On a shared log `status` and `welcome` go at once always (PROTOCOL.md §5, "Several hubs
    /// on one shared log"): proposals in flight there may wait on another server (an
    /// acknowledgement late for 5 s before it is in doubt, a catch-up with other hubs'
    /// records), and neither answer claims anything about them.
    func outageAnswer(_ connection: Connection, _ request: RequestPipeline.Request) -> RequestPipeline.Judgment? {
        guard let reason = sequencer.unavailableReason else {
            guard sequencer.log.isShared else { return nil }
            switch request {
            case .status:
                return .status(sequencer.appliedState())
            case .welcome(let replica, let resume):
                if let resume, sequencer.canResume(after: resume.seq) { return .resumed(replica: replica, seq: resume.seq) }
                return .full(replica: replica, state: sequencer.appliedState())
            default:
                return nil
            }
        }
        switch request {
        case .dispatch(let id, _):
            // A dispatch the session already has is answered `duplicate` in its turn.
            guard connection.attachedReplica != nil,
                  sequencer.sequencedSeq(of: id, session: connection.session, now: now) == nil else { return nil }
            return .reject(id, WireError(.unavailable, reason))
        case .status:
            return .status(sequencer.appliedState())
        case .welcome(let replica, let resume):
            if let resume, sequencer.canResume(after: resume.seq) { return .resumed(replica: replica, seq: resume.seq) }
            return .full(replica: replica, state: sequencer.appliedState())
        case .history(let from, let to, let id):
            // Only applied actions are kept: it can be answered now, from them.
            return .history(from: from, to: to, id: id)
        case .upgrade(let id, _, _):
            return .reject(id, WireError(.unavailable, "the log is unavailable (\(reason)); nothing changed — ask again once it is back"))
        case .refused, .sync, .end, .inDoubt:
            return nil
        }
    }

    /// Judges one request against the speculative state: the answer and the seq it follows.
    ///
    /// While the log cannot take anything (``Sequencer/unavailableReason``), a refusal,
    /// `status` and `welcome` may go at once (`immediate`), answered from the applied state,
    /// since a proposal in flight may stay in doubt until the log is back.
    func judge(_ connection: Connection, _ request: RequestPipeline.Request) -> RequestPipeline.Judged {
        let outage = sequencer.unavailableReason != nil
        let proposed = sequencer.proposedSeq, applied = sequencer.appliedSeq
        switch request {
        case .refused(let id, let error):
            return (.reject(id, error), proposed, false)
        case .dispatch(let id, let action):
            guard let origin = connection.attachedReplica else {
                return (.reject(id, WireError(.notAttached, "the connection is no longer attached")), proposed, false)
            }
            if version > 0, let attachment = connection.phase.attachment, attachment.version != version {
                return (.reject(id, WireError(.appOutdated, "the history was upgraded to \(facts.fingerprint) after this replica attached; this dispatch was not applied — run \(facts.fingerprint)")), proposed, false)
            }
            switch sequencer.dispatch(action, id: id, origin: origin, originName: connection.phase.attachment?.name ?? "",
                                      session: connection.session, now: now) {
            case .proposed(let seq): return (.proposed, seq, false)
            case .refused(let error) where error.code == .unavailable: return (.reject(id, error), applied, true)
            case .refused(let error): return (.reject(id, error), proposed, false)
            case .duplicate(let seq): return (.duplicate(id, seq), max(seq, proposed), false)
            }
        case .status:
            if outage { return (.status(sequencer.appliedState()), applied, true) }
            return (.status(sequencer.speculativeState()), proposed, false)
        case .sync(let id):
            return (.synced(id, proposed), proposed, false)
        case .history(let from, let to, let id):
            // After every action judged before it: those are in the backlog when it is built.
            return (.history(from: from, to: to, id: id), proposed, false)
        case .welcome(let replica, let resume):
            // Resumed only from this very history (the protocol checked), never from the
            // future, and only while the backlog still holds every action after it.
            if let resume, sequencer.canResume(after: resume.seq) {
                return (.resumed(replica: replica, seq: resume.seq), outage ? applied : proposed, outage)
            }
            if outage { return (.full(replica: replica, state: sequencer.appliedState()), applied, true) }
            return (.full(replica: replica, state: sequencer.speculativeState()), proposed, false)
        case .upgrade(let id, let to, let dryRun):
            guard connection.peer.uid == hubUID || connection.peer.uid == 0 else {
                return (.reject(id, WireError(.notPermitted, "only the hub's own user (uid \(hubUID)) or root may upgrade its history; this is uid \(connection.peer.uid). Ask its operator")), proposed, false)
            }
            let detaches = streaming.compactMap { peer -> UpgradeReport.Detached? in
                guard !peer.isClosing, let attachment = peer.phase.attachment else { return nil }
                return UpgradeReport.Detached(replica: attachment.replica, name: attachment.name, fingerprint: attachment.fingerprint)
            }
            let attachment = connection.phase.attachment
            switch sequencer.upgrade(to: to, dryRun: dryRun, id: id, origin: attachment?.replica ?? 0,
                                     originName: attachment?.name ?? "", detaches: detaches) {
            case .refused(let error):
                return (.reject(id, error), error.code == .unavailable ? applied : proposed, error.code == .unavailable && outage)
            case .report(let report, let wasProposed):
                return (.upgrade(report), wasProposed ? report.seq : proposed, false)
            }
        case .inDoubt(let id, let error, let complete):
            if let seq = sequencer.sequencedSeq(of: id, session: connection.session, now: now) {
                return (.duplicate(id, seq), max(seq, proposed), false)
            }
            guard complete else { return (.silence, proposed, false) }
            return (.reject(id, WireError(.appOutdated, "this dispatch was not sequenced before the upgrade, so it was never applied: \(error.message)")), proposed, false)
        case .end(let error):
            return (.end(error), proposed, false)
        }
    }

    /// Queues one released answer for its connection, right after the frame of `seq`.
    mutating func deliver(_ judgment: RequestPipeline.Judgment, to connection: Connection, after seq: UInt64) {
        guard connections[connection.fd] === connection, !connection.isClosing else { return }
        // Right after the frame of `seq` (the backlog's end when that frame is the newest, or
        // has left the window, which cannot happen within one pass).
        let gate = seq >= backlog.lastSeq ? backlog.end : (backlog.position(after: seq) ?? backlog.end)
        switch judgment {
        case .proposed:
            break
        case .reject(let id, let error):
            send(.reject(id: id, error: error), to: connection, after: gate)
        case .duplicate(let id, let seq):
            send(.duplicate(id: id, seq: seq), to: connection, after: gate)
        case .synced(let id, let seq):
            send(.synced(seq: seq, id: id), to: connection, after: gate)
        case .history(let from, let to, let id):
            connection.output.queue(historyReply(from: from, to: to, id: id, upTo: min(seq, backlog.lastSeq)), after: gate)
        case .status(let state):
            send(.status(statusMessage(state)), to: connection, after: gate)
        case .upgrade(let report):
            send(.upgrade(report), to: connection, after: gate)
        case .silence:
            break
        case .resumed(let replica, let seq):
            startStream(connection, replica: replica, resumedAt: seq, state: nil)
        case .full(let replica, let state):
            startStream(connection, replica: replica, resumedAt: nil, state: state)
        case .end(let error?):
            tearDown(connection, .failed(error))
        case .end(nil):
            tearDown(connection, .finished)
        }
    }

    /// Starts the stream for a connection whose `hello` was answered: its welcome, gated after
    /// exactly the actions it covers, then every action after it.
    private mutating func startStream(_ connection: Connection, replica: Int, resumedAt: UInt64?, state: EncodedState?) {
        let seq = resumedAt ?? state?.seq ?? 0
        guard let position = seq >= backlog.lastSeq ? backlog.end : backlog.position(after: seq) else {
            tearDown(connection, .failed(WireError(.slowConsumer, "the actions after seq \(seq) left the hub's backlog while this connection attached; attach again")))
            return
        }
        if let resumedAt {
            let welcome = Welcome.resumed(hub: hubID, replica: replica, seq: resumedAt, history: sequencer.history,
                                          maxFrameBytes: configuration.maxFrameBytes, fingerprint: facts.fingerprint)
            // The welcome, then the missed frames straight from the backlog, then whatever follows.
            send(.welcome(welcome), to: connection, after: position)
        } else if let state {
            do throws(FrameError) {
                let (prefix, suffix) = try Welcome.frame(hub: hubID, history: sequencer.history, replica: replica, seq: state.seq,
                                                         digest: state.digest, fingerprint: facts.fingerprint,
                                                         maxFrameBytes: configuration.maxFrameBytes,
                                                         stateByteCount: state.bytes.count)
                connection.output.queue(prefix, after: position)
                connection.output.queue(shared: state.bytes, after: position, counted: false)
                connection.output.queue(suffix, after: position)
                connection.output.mustBeRead(by: now + configuration.welcomeTimeout)
            } catch {
                // A frame's length is 32 bits: a state this large cannot be sent in one welcome.
                tearDown(connection, .failed(WireError(.frameTooLarge, "the state is \(state.bytes.count) bytes, more than one frame can carry (4 GiB); it cannot be sent to a new replica")))
                return
            }
        }
        connection.output.cursor = position
        connection.output.follows = true
        startBroadcasts(to: connection)
        let peer = "uid \(connection.peer.uid), pid \(connection.peer.pid)"
        if let resumedAt {
            configuration.logger.info("\(connection.label) resumed at seq \(resumedAt) (\(sequencer.appliedSeq - min(resumedAt, sequencer.appliedSeq)) actions replayed; \(peer))")
        } else {
            configuration.logger.info("\(connection.label) attached at seq \(seq) (\(peer))")
        }
    }

    /// The `status` answer for an encoded state.
    private func statusMessage(_ state: EncodedState) -> HubStatus {
        let replicas = streaming.compactMap { peer -> ReplicaInfo? in
            guard let attachment = peer.phase.attachment else { return nil }
            return ReplicaInfo(replica: attachment.replica, name: attachment.name, queuedBytes: peer.output.pending(end: backlog.end),
                               lag: Int(clamping: sequencer.appliedSeq &- min(sequencer.appliedSeq, writtenSeq(of: peer))),
                               uid: Int(peer.peer.uid), pid: Int(peer.peer.pid), checked: peer.reportedCheck)
        }
        let storage = sequencer.logStatus
        var members: [JSONKey: JSON] = [
            "data_dir": storage.dataDirectory.map { .string($0) } ?? .null,
            "journal_bytes": JSON(storage.journalBytes), "segments": JSON(storage.segments),
            "snapshot_seq": JSON(storage.snapshotSeq), "last_fsync_us": JSON(storage.lastFsyncMicroseconds),
            "fsync": storage.fsync.map { .string($0.rawValue) } ?? .null, "commits": JSON(storage.commits),
        ]
        if let reason = sequencer.unavailableReason { members["unavailable"] = .string(reason) }
        var status = HubStatus(protocolVersion: syncProtocolVersion, app: facts.appName, fingerprint: facts.fingerprint,
                               hub: hubID, seq: state.seq, digest: state.digest, replicas: replicas,
                               maxFrameBytes: configuration.maxFrameBytes, history: sequencer.history,
                               storage: .object(members))
        let newest = sequencer.versions.newest
        if JSONKey(newest) != JSONKey(facts.fingerprint) { status.upgradableTo = newest }
        if case .object(var shared)? = storage.shared {
            shared["applied_seq"] = JSON(sequencer.appliedSeq)
            status.log = .object(shared)
        }
        return status
    }

    /// The most actions one `history` reply carries, and the most bytes of them (a page: the
    /// client asks again from the next seq).
    static let historyPageActions = 4_096
    static let historyPageBytes = 1 << 20

    /// A framed `history` reply: the actions `from`…`to` (at most up to `seq`, the last one
    /// applied before the request), as their `action` messages from the backlog, one page at
    /// most; or the refusal when they are not all kept.
    private func historyReply(from: UInt64, to: UInt64?, id: DispatchID?, upTo seq: UInt64) -> [UInt8] {
        let wanted = min(to ?? seq, seq)
        let oldest = backlog.count > 0 ? backlog.lastSeq - UInt64(backlog.count) + 1 : seq + 1
        func refusal(_ message: String) -> [UInt8] {
            Self.framed(HistoryReply.refusalPayload(from: from, id: id, seq: seq, to: to ?? seq, message: message))
        }
        guard from <= seq, from <= wanted else {
            return refusal("the hub is at seq \(seq); seq \(from) is not sequenced yet — ask again once it is (sync, or watch the actions)")
        }
        guard backlog.count > 0, from >= oldest, let start = backlog.position(after: from - 1) else {
            return refusal("the hub no longer keeps seq \(from): its resume window holds seq \(oldest)…\(seq) (at least the last \(HubConfiguration.Defaults.retainedActions) actions, more within --backlog-bytes); older actions are in its data directory: hubd --export DIR")
        }
        // At most a page is copied out of the backlog, however wide the range asked.
        let pageEnd = min(wanted, from + UInt64(Self.historyPageActions) - 1)
        let end = pageEnd >= backlog.lastSeq ? backlog.end : (backlog.position(after: pageEnd) ?? backlog.end)
        let frames = backlog.copy(from: start, to: end)
        var actions: [UInt8] = []
        var upgrades: [UpgradeNotice] = []
        var last = from - 1
        var count = 0
        var offset = 0
        // The backlog's frames are `action` frames, each maybe followed by its `checkpoint`.
        // An action frame is told from a checkpoint by its first members alone: its `id`
        // (an integer, a negative one, or a string with escapes or any Unicode) is copied
        // with the rest, never read, so every action of the range is in the reply whatever
        // its dispatcher chose as id.
        while offset + Frame.headerSize <= frames.count, count < Self.historyPageActions, actions.count < Self.historyPageBytes {
            let length = frames.withUnsafeBufferPointer { Frame.announcedLength(in: $0, at: offset) }
            let payload = frames[(offset + Frame.headerSize)..<min(frames.count, offset + Frame.headerSize + length)]
            offset += Frame.headerSize + length
            guard let seq = payload.withUnsafeBytes({ HubMessage.actionSeq($0) }) else {
                // Not an action: a checkpoint, or an upgrade (rare: parsed), which takes its seq.
                if let json = try? JSON(parsing: Array(payload)), json["type"] == "upgraded",
                   case .upgraded(let notice)? = try? HubMessage(json: json) {
                    upgrades.append(notice)
                    last = notice.seq
                }
                continue
            }
            if count > 0 { actions.append(UInt8(ascii: ",")) }
            actions += payload
            last = seq
            count += 1
        }
        return Self.framed(HistoryReply.payload(from: from, id: id, seq: seq, to: last, actionPayloads: actions, upgrades: upgrades))
    }

    /// A `history` payload with its length header.
    private static func framed(_ payload: [UInt8]) -> [UInt8] {
        var frame: [UInt8] = []
        frame.reserveCapacity(Frame.headerSize + payload.count)
        // Cannot throw: the payload is not empty, and it is at most a page (under
        // `historyPageBytes` of actions, plus one frame of at most --max-frame-bytes, 1 GiB at
        // most) and the envelope: under the header's 4 GiB.
        try? Frame.append(payload: payload, to: &frame)
        return frame
    }
}
