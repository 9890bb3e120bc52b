import SyncCore

/// What the hub's protocol asks the event loop to do after a client message.
enum HubEffect {
    /// Queue this message for the connection, after every broadcast sequenced before it.
    case reply(HubMessage)
    /// Queue a welcome for the connection (it is now attached) and add it to the broadcast list;
    /// with `resumeFrom`, a resumed welcome followed by the actions after that seq.
    case attach(replica: Int, name: String, resumeFrom: UInt64?, session: String?)
    /// The dispatch's session already had its id sequenced: once that original is committed,
    /// answer `duplicate` with its seq (or, if it could not be made durable, dispatch again).
    case duplicate(id: DispatchID, action: JSON)
    /// Queue the hub's status (the loop knows the attached replicas), after committing.
    case status
    /// Commit, then queue `synced` with the committed seq: the barrier never names an action
    /// that a failed commit undid.
    case synced(id: DispatchID?)
    /// Queue this error, stop reading, flush and close the connection.
    case fail(WireError)
}

/// The per-connection protocol: decodes one client frame and decides the answer, given
/// the connection's state. No sockets: the event loop applies the effects (and tests can
/// drive it with bytes alone).
struct HubProtocol {
    let sequencer: Sequencer
    let maxFrameBytes: Int
    /// This run's id.
    let hubID: String

    /// Handles one frame from a connection in `state`.
    ///
    /// - Parameters:
    ///   - payload: The frame's payload bytes.
    ///   - connection: The connection it came on (its state is read, not changed).
    /// - Returns: What to do.
    func handle(_ payload: UnsafeRawBufferPointer, from connection: Connection) -> HubEffect? {
        let json: JSON
        do {
            json = try JSON(parsing: payload)
        } catch {
            return .fail(WireError(.badJSON, "frame payload is not valid JSON: \(error.description)"))
        }
        let message: ClientMessage
        do throws(WireError) {
            message = try ClientMessage(json: json)
        } catch {
            return .fail(error)
        }
        let engine = sequencer.engine
        switch message {
        case .status:
            return .status
        case .sync(let id):
            // The barrier: O(1), and in order with the actions this connection was sent.
            return .synced(id: id)
        case .hello(let version, let appName, let fingerprint, let name, let resume, let session):
            if case .attached(let replica, _, _) = connection.state {
                return .fail(WireError(.alreadyAttached, "this connection is already attached as replica \(replica); send hello once"))
            }
            guard version == syncProtocolVersion else {
                return .fail(WireError(.protocolMismatch, "this hub speaks protocol \(syncProtocolVersion), the client asked for \(version); upgrade the older side"))
            }
            // Names compare by Unicode scalars, as on the wire (never by canonical equivalence).
            guard JSONKey(appName) == JSONKey(engine.appName) else {
                return .fail(WireError(.appMismatch, "this hub runs app \"\(engine.appName)\", not \"\(appName)\"; start the replica with --app \(engine.appName) or run a hub for \(appName)"))
            }
            if let fingerprint, JSONKey(fingerprint) != JSONKey(engine.fingerprint) {
                return .fail(WireError(.appMismatch, "this hub runs \(engine.fingerprint), the replica has \(fingerprint); both sides must run the same reducer version"))
            }
            // Resumed only from this very history, never from the future (a hub that lost a
            // tail it had broadcast), and only while the backlog still holds every action after it.
            var resumeFrom: UInt64?
            if let resume, JSONKey(resume.history) == JSONKey(sequencer.history), sequencer.canResume(after: resume.seq) {
                resumeFrom = resume.seq
            }
            return .attach(replica: sequencer.takeReplicaID(), name: name ?? "", resumeFrom: resumeFrom, session: session)
        case .dispatch(let id, let action):
            return dispatch(action, id: id, from: connection)
        }
    }

    /// Sequences one dispatch from an attached connection.
    ///
    /// - Parameters:
    ///   - action: The action's JSON.
    ///   - id: The client's dispatch id.
    ///   - connection: The connection it came on.
    /// - Returns: What to do (`nil`: nothing now; the action goes out with the next commit).
    func dispatch(_ action: JSON, id: DispatchID, from connection: Connection) -> HubEffect? {
        guard case .attached(let origin, _, let session) = connection.state else {
            return .fail(WireError(.notAttached, "dispatch before hello; send {\"type\":\"hello\",\"protocol\":\(syncProtocolVersion),\"app\":\"\(sequencer.engine.appName)\"} first"))
        }
        switch sequencer.dispatch(action, id: id, origin: origin, session: session, from: connection) {
        case .sequenced: return nil
        case .refused(let error): return .reply(.reject(id: id, error: error))
        case .duplicate: return .duplicate(id: id, action: action)
        }
    }

    /// The `status` answer, given the attached replicas.
    func statusMessage(replicas: [ReplicaInfo]) -> HubStatus {
        let engine = sequencer.engine
        let storage = sequencer.storage
        var members: [JSONKey: JSON] = [
            "data_dir": storage.fsync == nil ? .null : .string(storage.location),
            "journal_bytes": JSON(storage.journalBytes), "segments": JSON(storage.segments),
            "snapshot_seq": JSON(storage.snapshotSeq), "last_fsync_us": JSON(storage.lastFsyncMicroseconds),
            "fsync": storage.fsync.map { .string($0.rawValue) } ?? .null,
        ]
        if let reason = sequencer.unavailableReason { members["unavailable"] = .string(reason) }
        return HubStatus(protocolVersion: syncProtocolVersion, app: engine.appName, fingerprint: engine.fingerprint,
                         hub: hubID, seq: sequencer.seq, digest: sequencer.currentSnapshot().digest,
                         replicas: replicas, maxFrameBytes: maxFrameBytes, history: sequencer.history,
                         storage: .object(members))
    }
}
