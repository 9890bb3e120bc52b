import SyncCore
import SyncPOSIX
import SyncProtocol
import StoreReplica

/// `replica-cli` for a hub whose app this executable was not built with: `state`, `watch` and
/// `dispatch` speak the wire protocol directly, as raw canonical JSON, without the app's
/// reducer (the hub validates every dispatch). Only `attach` needs the app compiled in.
///
/// Without the reducer there is no local state to keep: `state` prints the welcome's state,
/// `watch` prints each sequenced action (and ends when the hub goes, as it cannot resume a
/// state it does not keep), and `dispatch` sends raw JSON actions and prints their seqs.
enum GenericClient {
    /// Runs `command` against the hub on `connection`, which serves `app`.
    ///
    /// - Parameters:
    ///   - app: The hub's app name (from its `status`).
    ///   - connection: A connection that has sent nothing yet.
    ///   - command: `state`, `watch` or `dispatch`.
    ///   - options: The command line.
    static func run(app: String, over connection: HubConnection, command: ReplicaOptions.Command, options: ReplicaOptions) throws(ReplicaError) {
        // Bad arguments first: a usage error never half-runs.
        let actions: [JSON] = options.arguments.map { text in
            do throws(AppCodingError) {
                return try AppCommandParsing.jsonObject(text)
            } catch {
                fail("\(text): \(error.message) (the hub's app \"\(app)\" is not built into \(ReplicaCommand.program): actions are JSON objects)", status: 2)
            }
        }
        if options.at != nil {
            fail("state --at runs the app's reducer, and the hub's app \"\(app)\" is not built into \(ReplicaCommand.program); use your app's own CLI", status: 2)
        }
        if options.diff {
            fail("watch --diff runs the app's reducer, and the hub's app \"\(app)\" is not built into \(ReplicaCommand.program); use your app's own CLI", status: 2)
        }
        if command == .watch { ReplicaCommand.exitOnTerminationSignal() }
        var connection = connection
        var welcome = try hello(over: connection, app: app, name: options.name)
        switch command {
        case .state:
            printState(welcome, options: options)
        case .dispatch:
            for (index, action) in actions.enumerated() {
                let id = DispatchID.number(index + 1)
                try connection.send(.dispatch(id: id, action: action))
                while true {
                    switch try connection.receive(timeoutMilliseconds: 60_000) {
                    case .action(let seq, let origin, let got, _, _) where got == id && origin == welcome.replica:
                        Console.out("\(seq)")
                    case .duplicate(let got, let seq) where got == id:
                        Console.out("\(seq)")
                    case .reject(let got, let error) where got == id:
                        fail("\(error.rawCode): \(error.message)")
                    case .upgraded(let notice):
                        // In order: this action was not sequenced before the upgrade, and the
                        // hub never applies it (it detaches this connection next).
                        fail("the history was upgraded from \(notice.from) to \(notice.to) at seq \(notice.seq) before this action was sequenced, so it was never applied\(index + 1 < actions.count ? " (nor the ones after it, not sent)" : ""); run the command again")
                    case .error(let error):
                        throw .hub(error)
                    default:
                        continue
                    }
                    break
                }
            }
        default:  // watch
            while true {
                let message = try connection.receive(timeoutMilliseconds: -1)
                switch message {
                case .action:
                    guard let sequenced = SequencedAction(message), options.filter.passes(sequenced) else { continue }
                    Console.out(sequenced.json().canonicalString)
                case .upgraded(let notice):
                    // Raw JSON has no version to outgrow: attach again (the hub detaches this
                    // connection after the notice), fill the gap from the hub's resume window,
                    // and go on, so every seq is printed once.
                    Console.error("\(ReplicaCommand.program): \(ControlCharacters.escaped("the history was upgraded from \(notice.from) to \(notice.to) at seq \(notice.seq) (digest \(notice.digest)); watching on"))")
                    connection.close()
                    connection = try HubConnection(path: connection.path)
                    welcome = try hello(over: connection, app: app, name: options.name)
                    if welcome.seq > notice.seq {
                        let filler = try HubConnection(path: connection.path)
                        defer { filler.close() }
                        try Self.actions(over: filler, from: notice.seq + 1, through: welcome.seq, name: options.name) { sequenced in
                            guard options.filter.passes(sequenced) else { return }
                            Console.out(sequenced.json().canonicalString)
                        }
                    }
                case .error(let error):
                    throw .hub(error)
                default:
                    continue
                }
            }
        }
    }

    /// Says `hello` without a fingerprint (any version of the hub's app, as raw JSON) and
    /// reads the welcome.
    ///
    /// - Parameters:
    ///   - connection: A connection that has sent nothing yet.
    ///   - app: The hub's app name.
    ///   - name: The replica's name.
    /// - Returns: The welcome.
    private static func hello(over connection: HubConnection, app: String, name: String?) throws(ReplicaError) -> Welcome {
        try connection.send(.hello(protocolVersion: 1, app: app, fingerprint: nil, name: name))
        switch try connection.receive() {
        case .welcome(let value): return value
        case .error(let error): throw .hub(error)
        default: throw .protocolViolation("the hub's first answer to hello was not a welcome")
        }
    }

    /// `history --from A [--to B]`: the actions A…B, from the hub's resume window, as NDJSON
    /// lines like `watch`'s. It needs no app: it resumes at A − 1 (a `hello` with `resume`,
    /// PROTOCOL.md §12), reads the replayed actions up to B, and leaves.
    ///
    /// - Parameters:
    ///   - connection: A connection that has sent nothing yet.
    ///   - options: The command line (`--from`, `--to` in ``ReplicaOptions/arguments``).
    static func history(over connection: HubConnection, options: ReplicaOptions) throws(ReplicaError) {
        let (from, end) = try historyRange(over: connection, options: options)
        try actions(over: connection, from: from, through: end, name: options.name, each: { sequenced in
            guard options.filter.passes(sequenced) else { return }
            Console.out(sequenced.json().canonicalString)
        }, upgrade: { notice in
            Console.out(upgradeJSON(notice).canonicalString)
        })
    }

    /// The line `history` prints at an upgrade (whatever the filters): `{"digest":…,"from":…,
    /// "seq":…,"to":…,"type":"upgrade"}`, with `patch` (the JSON Patch the migration made)
    /// for `--diff`.
    ///
    /// - Parameters:
    ///   - notice: The upgrade.
    ///   - patch: The migration's patch, if any.
    /// - Returns: The line's object.
    static func upgradeJSON(_ notice: UpgradeNotice, patch: [JSON]? = nil) -> JSON {
        var members: [JSONKey: JSON] = ["type": "upgrade", "seq": JSON(notice.seq), "from": .string(notice.from),
                                        "to": .string(notice.to), "digest": .string(notice.digest)]
        if let patch { members["patch"] = .array(patch) }
        return .object(members)
    }

    /// `--from` and `--to` of `history`, checked against the hub's seq (usage errors exit 2).
    ///
    /// - Returns: The first and the last seq.
    static func historyRange(over connection: HubConnection, options: ReplicaOptions) throws(ReplicaError) -> (UInt64, UInt64) {
        var from: UInt64?
        var to: UInt64?
        var arguments = options.arguments[...]
        while let argument = arguments.popFirst() {
            guard argument == "--from" || argument == "--to" else {
                fail("history takes --from SEQ, --to SEQ and --diff, not \"\(shown(argument))\"", status: 2)
            }
            guard let text = arguments.popFirst(), let number = UInt64(text), number >= 1 else {
                fail("history \(argument) needs a seq (a whole number from 1)", status: 2)
            }
            if argument == "--from" { from = number } else { to = number }
        }
        guard let from else { fail("history needs --from SEQ (and optionally --to SEQ)", status: 2) }
        if let to, from > to { fail("history --from \(from) is after --to \(to)", status: 2) }
        let status = try connection.status()
        let end = to ?? status.seq
        guard from <= end else { fail("history --from \(from) is after --to \(end) (the hub is at seq \(status.seq))", status: 2) }
        guard end <= status.seq else { fail("the hub is at seq \(status.seq); --to \(end) is not sequenced yet") }
        return (from, end)
    }

    /// Reads the sequenced actions `from`…`last` with the `history` request (PROTOCOL.md §3),
    /// page by page, without attaching; from a hub too old to know it, by resuming at
    /// `from` − 1 on a new connection. Exits 1 with the hub's reason when they are not kept.
    ///
    /// - Parameters:
    ///   - connection: A connection that has not attached.
    ///   - from: The first seq (≥ 1).
    ///   - last: The last seq (sequenced already).
    ///   - name: The replica's name, for the older hub's log.
    ///   - older: The message when they are not kept (`nil`: the hub's own).
    ///   - each: Called with each action, in order.
    ///   - upgrade: Called with each upgrade, in order among the actions (at its seq).
    static func actions(over connection: HubConnection, from: UInt64, through last: UInt64, name: String?, older: String? = nil,
                        each: (SequencedAction) -> Void, upgrade: (UpgradeNotice) -> Void = { _ in }) throws(ReplicaError) {
        guard from <= last else { return }
        var next = from
        do throws(ReplicaError) {
            while true {
                let page = try connection.history(from: next, to: last)
                var upgrades = page.upgrades.sorted { $0.seq < $1.seq }[...]
                for sequenced in page.actions.compactMap(SequencedAction.init) {
                    while let first = upgrades.first, first.seq < sequenced.seq { upgrade(first); upgrades.removeFirst() }
                    each(sequenced)
                }
                for notice in upgrades { upgrade(notice) }
                guard page.to < last, page.to >= next else { return }
                next = page.to + 1
            }
        } catch .hub(let error) where error.code == .historyUnavailable {
            fail(older ?? error.message)
        } catch .hub(let error) where error.code == .unknownType && next == from {
            // A hub older than the history request: read its resume window instead.
            let fresh = try HubConnection(path: connection.path)
            defer { fresh.close() }
            let status = try fresh.status()
            try replay(over: fresh, status: status, from: from, through: last, fingerprint: nil, name: name,
                       older: older ?? "the hub no longer holds seq \(from) in its resume window (it holds at least the last 10000 actions, more within --backlog-bytes); for older actions read its data directory with hubd --export DIR",
                       each: each)
        }
    }

    /// Reads the actions `from`…`last` from the hub's resume window: a `hello` resuming at
    /// `from` − 1 (PROTOCOL.md §12), then the replayed actions, each handed to `each`.
    ///
    /// - Parameters:
    ///   - connection: A connection that has only asked for `status`.
    ///   - status: The hub's status (its app and history).
    ///   - from: The first seq.
    ///   - last: The last seq.
    ///   - fingerprint: The app's fingerprint, when this program has the app.
    ///   - name: The replica's name.
    ///   - older: The message (exit 1) when the window no longer reaches `from`.
    ///   - each: Called with each action, in order.
    static func replay(over connection: HubConnection, status: HubStatus, from: UInt64, through last: UInt64, fingerprint: String?,
                       name: String?, older: String, each: (SequencedAction) -> Void) throws(ReplicaError) {
        guard let historyID = status.history else { throw .protocolViolation("the hub's status has no history id") }
        try connection.send(.hello(protocolVersion: 1, app: status.app, fingerprint: fingerprint, name: name ?? ReplicaCommand.program,
                                   resume: ResumePoint(history: historyID, seq: from - 1)))
        switch try connection.receive() {
        case .welcome(let welcome) where welcome.resumed:
            break
        case .welcome:
            fail(older)
        case .error(let error):
            throw .hub(error)
        default:
            throw .protocolViolation("the hub's first answer to hello was not a welcome")
        }
        while true {
            let message = try connection.receive(timeoutMilliseconds: 60_000)
            switch message {
            case .action(let seq, _, _, _, _):
                if let sequenced = SequencedAction(message) { each(sequenced) }
                if seq >= last { return }
            case .error(let error):
                throw .hub(error)
            default:
                continue
            }
        }
    }

    private static func printState(_ welcome: Welcome, options: ReplicaOptions) {
        ReplicaCommand.printState(welcome.state ?? .null, seq: welcome.seq, digest: welcome.digest, options: options)
    }
}
