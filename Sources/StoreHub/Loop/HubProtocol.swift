import SyncCore

/// What the hub's protocol decided about one client frame.
enum HubDecision: Equatable {
    /// A valid `hello` from a connection that is not attached: attach it.
    case hello(HelloRequest)
    /// A dispatch from an attached connection: sequence it. A dispatch written canonically
    /// keeps its action's bytes, which the hub forwards as they are.
    case dispatch(id: DispatchID, action: WireAction)
    /// Answer `status`, in order with what this connection was sent; `checked` is the
    /// digest comparison the client reported with it, if any.
    case status(checked: DigestCheck?)
    /// Answer `synced`, in order with what this connection was sent.
    case sync(id: DispatchID?)
    /// Answer `history` (the actions `from`…`to` still kept), in order with what this
    /// connection was sent.
    case history(from: UInt64, to: UInt64?, id: DispatchID?)
    /// Refuse this dispatch alone (`reject`); the connection goes on.
    case reject(id: DispatchID, WireError)
    /// Judge an `upgrade` request, in order with what this connection was sent.
    case upgrade(id: DispatchID, to: String?, dryRun: Bool)
    /// Send this error, stop reading, flush and close the connection.
    case fail(WireError)
    /// A `hello` of a version the history was upgraded past: answer each dispatch of the
    /// session it has in doubt (`duplicate`, or `reject` with `error`), then fail with `error`.
    case outdated(session: String, inDoubt: [DispatchID], WireError)
}

/// A `hello` that passed every check.
struct HelloRequest: Equatable {
    /// The name, `""` when none was given.
    var name: String
    /// Where the client asks to resume from, if it names this hub's history.
    var resume: ResumePoint?
    /// The client's session, if any.
    var session: String?
    /// The fingerprint the replica runs, if it named one.
    var fingerprint: String? = nil
    /// Whether it runs a newer version the hub carries than the history's: the hub holds it
    /// until the history is upgraded.
    var waitsForUpgrade = false
}

/// What the protocol needs to know about the hub: fixed for its run.
struct HubFacts: Equatable {
    /// The app's name.
    var appName: String
    /// The app's fingerprint.
    var fingerprint: String
    /// The history id.
    var history: String
    /// Every version of the app the hub carries, oldest first (one when it carries only its own).
    var versions: [String] = []

    /// Where a fingerprint stands against the history's version: `nil` when the hub does not
    /// carry it, negative when older, 0 when the same, positive when newer.
    func order(of other: String) -> Int? {
        let key = JSONKey(other)
        if key == JSONKey(fingerprint) { return 0 }
        guard let index = versions.firstIndex(where: { JSONKey($0) == key }),
              let current = versions.firstIndex(where: { JSONKey($0) == JSONKey(fingerprint) }) else { return nil }
        return index - current
    }
}

/// The per-connection protocol as one pure function: a frame's bytes and whether (as which
/// replica) the connection is attached in, a ``HubDecision`` out. No sockets, no sequencer: tests drive it with bytes alone,
/// and the event loop carries out what it decides.
enum HubProtocol {
    /// Decides what one frame from a connection asks for.
    ///
    /// Checked in this order: the payload is JSON (`bad-json`), a client message of a known
    /// type with members of the right types (`bad-json`, `unknown-type`, `bad-frame`,
    /// `bad-hello`); then, for `hello`: not attached yet (`already-attached`), the protocol
    /// version (`protocol-mismatch`), the app and fingerprint (`app-mismatch`); for `dispatch`:
    /// attached (`not-attached`), a string id of at most 128 bytes (else `reject` `bad-action`).
    ///
    /// - Parameters:
    ///   - payload: The frame's payload bytes.
    ///   - replica: The replica id the connection attached as (`nil`: not attached).
    ///   - facts: The hub's app and history.
    /// - Returns: The decision.
    static func decide(_ payload: UnsafeRawBufferPointer, attachedAs replica: Int?, facts: HubFacts) -> HubDecision {
        decideCanonicalDispatch(payload, attached: replica != nil) ?? decideParsing(payload, attachedAs: replica, facts: facts)
    }

    /// The common case of ``decide(_:attachedAs:facts:)``: a canonical dispatch from an
    /// attached replica parses nothing, its action's bytes kept as they are. `nil` for every
    /// other frame, which ``decideParsing(_:attachedAs:facts:)`` decides.
    ///
    /// - Parameters:
    ///   - payload: The frame's payload bytes.
    ///   - attached: Whether the connection is attached.
    /// - Returns: The dispatch, or `nil`.
    static func decideCanonicalDispatch(_ payload: UnsafeRawBufferPointer, attached: Bool) -> HubDecision? {
        guard attached, let (id, action) = ClientMessage.canonicalDispatch(payload) else { return nil }
        return .dispatch(id: id, action: WireAction(canonical: Array(payload[action])))
    }

    /// ``decide(_:attachedAs:facts:)`` by parsing the frame: every frame but a canonical
    /// dispatch from an attached replica (for which it decides the same, only slower).
    ///
    /// - Parameters:
    ///   - payload: The frame's payload bytes.
    ///   - replica: The replica id the connection attached as (`nil`: not attached).
    ///   - facts: The hub's app and history.
    /// - Returns: The decision.
    static func decideParsing(_ payload: UnsafeRawBufferPointer, attachedAs replica: Int?, facts: HubFacts) -> HubDecision {
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
        switch message {
        case .status(let checked):
            return .status(checked: checked)
        case .sync(let id):
            return .sync(id: id)
        case .history(let from, let to, let id):
            return .history(from: from, to: to, id: id)
        case .upgrade(let id, let to, let dryRun):
            return .upgrade(id: id, to: to, dryRun: dryRun)
        case .hello(let version, let appName, let fingerprint, let name, let resume, let session, let inDoubt):
            if let replica {
                return .fail(WireError(.alreadyAttached, "this connection is already attached as replica \(replica); send hello once"))
            }
            guard version == syncProtocolVersion else {
                return .fail(WireError(.protocolMismatch, "this hub speaks protocol \(syncProtocolVersion), the client asked for \(version); upgrade the older side"))
            }
            // Names compare by Unicode scalars, as on the wire (never by canonical equivalence).
            guard JSONKey(appName) == JSONKey(facts.appName) else {
                return .fail(WireError(.appMismatch, "this hub runs app \"\(facts.appName)\", not \"\(ControlCharacters.escaped(appName))\"; start the replica with --app \(facts.appName) or run a hub for \(ControlCharacters.escaped(appName))"))
            }
            var waits = false
            if let fingerprint, JSONKey(fingerprint) != JSONKey(facts.fingerprint) {
                switch facts.order(of: fingerprint) {
                case let order? where order < 0:
                    let error = WireError(.appOutdated, "the history runs \(facts.fingerprint), newer than this replica's \(ControlCharacters.escaped(fingerprint)) (it was upgraded); run the newer version of the app (--app \(facts.fingerprint))")
                    if let session, !inDoubt.isEmpty { return .outdated(session: session, inDoubt: inDoubt, error) }
                    return .fail(error)
                case let order? where order > 0:
                    waits = true
                default:
                    return .fail(WireError(.appMismatch, "this hub runs \(facts.fingerprint), the replica has \(ControlCharacters.escaped(fingerprint)); both sides must run the same reducer version"))
                }
            }
            // A resume point names this very history, or it is no resume at all.
            let point = resume.flatMap { JSONKey($0.history) == JSONKey(facts.history) ? $0 : nil }
            return .hello(HelloRequest(name: name ?? "", resume: point, session: session, fingerprint: fingerprint,
                                       waitsForUpgrade: waits))
        case .dispatch(let id, let action):
            guard replica != nil else {
                return .fail(WireError(.notAttached, "dispatch before hello; send {\"type\":\"hello\",\"protocol\":\(syncProtocolVersion),\"app\":\"\(facts.appName)\"} first"))
            }
            if case .string(let text) = id, text.utf8.count > ClientMessage.maxIDBytes {
                return .reject(id: id, WireError(.badAction, "the dispatch id is \(text.utf8.count) bytes; a string id is at most \(ClientMessage.maxIDBytes) bytes (UTF-8) — use a shorter one, or an integer"))
            }
            return .dispatch(id: id, action: WireAction(action))
        }
    }
}
