#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import StoreReplica
import SyncCore
import SyncPOSIX

func fail(_ message: String, status: Int32 = 1) -> Never {
    // Text from the hub (and, through it, from other clients) never drives the terminal.
    Console.error("\(ReplicaCommand.program): \(ControlCharacters.escaped(message))")
    exit(status)
}

/// The whole of `replica-cli` as a library entry point, for a CLI of your own app:
///
/// ```swift
/// @main struct MyCLI {
///     static func main() async { await ReplicaCommand.main(app: MyApp()) }
/// }
/// ```
///
/// Every command (`attach`, `dispatch`, `state`, `watch`, `status`) and flag, the same output,
/// reconnection and exit statuses; `--help` and messages use the executable's name.
public enum ReplicaCommand {
    /// The executable's name, for usage and messages.
    static var program: String { executableName(CommandLine.arguments.first, otherwise: "replica-cli") }

    /// Runs the command line for one app; returns when the command is done.
    ///
    /// `@inlinable`, so the app's replica path is compiled for it in the caller's module and
    /// registered (``ReplicaSpecialization``): commands that apply every action (`attach`,
    /// `watch`, `inspect`) run it with no generic look-ups per action.
    ///
    /// - Parameter app: The app.
    @inlinable
    public static func main<App: SyncApp>(app: App) async {
        ReplicaSpecialization.register(App.self)
        await main(apps: [app])
    }

    /// Runs the command line for one of several apps (`--app`, or the hub's); returns when
    /// the command is done (errors exit the process with their status).
    ///
    /// The apps come as `any SyncApp`, so the replica path runs as generic code unless each
    /// app was registered with ``ReplicaSpecialization/register(_:)`` where its type is
    /// written (as `replica-cli` does; ``main(app:)`` does it for its app).
    ///
    /// - Parameters:
    ///   - apps: The apps this executable knows.
    ///   - commandLine: The arguments, the executable first (default: this process's).
    public static func main(apps: [any SyncApp], commandLine: [String] = CommandLine.arguments) async {
        let names = apps.map { type(of: $0).name }.joined(separator: ", ")
        // `NAME` (its newest version here) or `NAME@VERSION`.
        func app(named name: String) -> (any SyncApp)? {
            try? AppChoice.find(name, among: apps).get()
        }
        SignalPipe.unblockTerminationSignals()
        let options: ReplicaOptions
        do throws(UsageError) {
            options = try ReplicaOptions.parse(commandLine)
        } catch {
            fail(error.message, status: 2)
        }
        switch options.request {
        case .command:
            break
        case .help:
            Console.out(ReplicaOptions.usage(program: ReplicaCommand.program, apps: apps))
            exit(0)
        case .version:
            Console.out("\(ReplicaCommand.program) (StoreSync \(StoreSyncVersion.current))")
            exit(0)
        }
        // The library reads it from the environment, as every client of this process would.
        if let hubUID = options.hubUID { setenv(SocketPath.hubUIDVariable, hubUID, 1) }
        guard let command = options.command else {
            fail("missing command (attach, dispatch, state, watch, status, top, history or inspect); see \(ReplicaCommand.program) --help", status: 2)
        }
        guard ["attach", "dispatch", "state", "watch", "status", "top", "history", "inspect"].contains(command) else {
            fail("unknown command \"\(shown(command))\"; the commands are attach, dispatch, state, watch, status, top, history and inspect", status: 2)
        }
        if command == "inspect" {
            // Bad usage (a host that is not loopback) is said before anything connects.
            do throws(UsageError) {
                _ = try InspectorCommand.parse(options.arguments)
            } catch {
                fail(error.message, status: 2)
            }
        }
        if command == "dispatch" && options.arguments.isEmpty {
            fail("dispatch needs at least one ACTION, e.g. \(ReplicaCommand.program) dispatch '{\"type\":…}' (a JSON action of the hub's app)", status: 2)
        }
        // With --app, bad usage is reported (exit 2) before anything connects.
        if let name = options.app {
            let app: any SyncApp
            switch AppChoice.find(name, among: apps) {
            case .success(let chosen): app = chosen
            case .failure(let error) where name.contains("@"): fail(error.message, status: 2)
            case .failure: fail("unknown app \"\(shown(name))\"; \(ReplicaCommand.program) knows \(names)", status: 2)
            }
            if command == "dispatch" { _ = options.arguments.map { wireAction(app, $0) } }
        }
        // With no --app, a CLI of one app uses that app's default socket; replica-cli (several
        // apps) finds the one hub in the default directory, or says which to choose.
        let defaultApp = options.app.map(AppChoice.name) ?? (apps.count == 1 ? apps.first.map { type(of: $0).name } : nil)
        let paths: [String]
        do throws(SystemError) {
            paths = try SocketPath.locate(explicit: options.socket, app: defaultApp)
        } catch {
            fail(error.message)
        }
        do throws(ReplicaError) {
            let connection = try HubConnection(paths: paths)
            if command == "top" {
                try TopCommand.run(over: connection, options: options)
                return
            }
            if command == "history" {
                guard options.diff || options.devtools != nil else {
                    try GenericClient.history(over: connection, options: options)
                    return
                }
                // --diff runs the app's reducer: the hub's app must be built in.
                let hubApp: String
                if let named = options.app { hubApp = named } else { hubApp = try connection.status().app }
                guard let known = app(named: hubApp) else {
                    let flag = options.devtools != nil ? "--devtools" : "--diff"
                    fail("history \(flag) runs the app's reducer, and the hub's app \"\(ControlCharacters.escaped(hubApp))\" is not built into \(ReplicaCommand.program); use your app's own CLI (history without \(flag) works with any hub)", status: 2)
                }
                if let file = options.devtools {
                    try historyDevTools(known, over: connection, options: options, file: file)
                    return
                }
                try historyDiff(known, over: connection, options: options)
                return
            }
            var appName = options.app
            var hubFingerprint: String?
            if command == "status" || appName == nil {
                let status = try connection.status()
                if command == "status" {
                    if let asked = options.app, JSONKey(AppChoice.name(asked)) != JSONKey(status.app) {
                        Console.error("\(ReplicaCommand.program): note: the hub at \(connection.path) runs app \"\(status.app)\", not \"\(ControlCharacters.escaped(asked))\" (status does not attach, so --app changes nothing here)")
                    }
                    printStatus(status, json: options.json)
                    return
                }
                appName = status.app
                hubFingerprint = status.fingerprint
            }
            if let name = appName, app(named: name) == nil, options.app == nil, command != "attach", command != "inspect" {
                // Any hub can be read and written as raw JSON; only attach needs the reducer.
                try GenericClient.run(app: name, over: connection, command: command, options: options)
                return
            }
            guard let name = appName, var app = app(named: name) else {
                if options.app == nil {
                    // The hub's app, learned from its status: say which hub, and how to pick another.
                    fail("the hub at \(connection.path) serves app \"\(appName ?? "")\", which \(ReplicaCommand.program) does not know (it knows \(names)); attach and inspect need the app built in (state, watch and dispatch work with any hub); run your app's own CLI, or point this one at another hub with --socket PATH", status: 1)
                }
                fail("unknown app \"\(shown(appName ?? ""))\"; \(ReplicaCommand.program) knows \(names)", status: 2)
            }
            // The hub's app, learned from its status: the version its history runs, when this
            // executable carries it (a hub may serve an older version than the newest here).
            if let hubFingerprint, let version = app.versions.app(hubFingerprint) { app = version }
            try await run(app, over: connection, command: command, options: options)
        } catch {
            fail(error.description)
        }
    }

    static func printStatus(_ status: HubStatus, json: Bool) {
        if json {
            Console.out(HubMessage.status(status).json.canonicalString)
            return
        }
        let replicas = status.replicas.map { $0.name.isEmpty ? "\($0.replica)" : "\($0.replica) (\(ControlCharacters.escaped($0.name)))" }
        // What an operator must see first: a hub that refuses every dispatch, and a shared
        // log's health. A healthy hub on its own storage prints neither line.
        for line in healthLines(status) { Console.out(line) }
        Console.out("""
            hub          \(status.hub)
            app          \(status.app) (\(status.fingerprint))
            protocol     \(status.protocolVersion)
            seq          \(status.seq)
            digest       \(status.digest)
            replicas     \(replicas.isEmpty ? "none" : replicas.joined(separator: ", "))
            """)
    }

    /// The lines `status` prints before the rest: `refusing` while the hub refuses
    /// dispatches (with its reason), and `log` for a hub on a shared log.
    ///
    /// - Parameter status: The hub's answer.
    /// - Returns: Zero, one or two lines.
    static func healthLines(_ status: HubStatus) -> [String] {
        var lines: [String] = []
        let refusing = status.storage?["unavailable"]?.stringValue
        if let refusing {
            lines.append("refusing     every dispatch: \(ControlCharacters.escaped(refusing))")
        }
        if let log = status.log, log["kind"]?.stringValue == "nats" {
            let stream = ControlCharacters.escaped(log["stream"]?.stringValue ?? "?")
            let server = ControlCharacters.escaped(log["server"]?.stringValue ?? "")
            let connected = log["connected"]?.boolValue == true
            let applied = log["applied_seq"]?.uint64Value.map(String.init) ?? "?"
            let last = log["last_seq"]?.uint64Value.map(String.init) ?? "?"
            let leader = ControlCharacters.escaped(log["leader"]?.stringValue ?? "")
            let link = (connected ? "connected to \(server)" : "not connected") + (leader.isEmpty ? "" : ", stream leader \(leader)")
            let doubt = log["in_doubt"]?.boolValue == true ? ", proposals in doubt" : ""
            lines.append("log          NATS stream \(stream), \(link), applied seq \(applied) of the stream's \(last)\(doubt); \(refusing == nil ? "accepting" : "refusing") dispatches")
        }
        return lines
    }

    static func run<App: SyncApp>(_ app: App, over connection: HubConnection, command: String,
                                  options: ReplicaOptions) async throws(ReplicaError) {
        // Bad arguments are usage errors before anything attaches to the hub.
        let actions = command == "dispatch" ? options.arguments.map { wireAction(app, $0) } : []
        if command == "watch" || command == "attach" { exitOnTerminationSignal() }
        // Observers go in before reading starts, so no sequenced action is missed.
        // attach and watch ride through hub restarts; one-shot commands do not reconnect.
        let rides = (command == "watch" || command == "attach") && !options.noReconnect
        // dispatch: a dropped link is retried a few times on the same session, so the action
        // is applied once (the hub answers a re-sent one `duplicate`) or the command fails.
        let policy: ReconnectPolicy = rides ? .automatic
            : command == "dispatch" ? ReconnectPolicy(initialDelay: .milliseconds(50), maxDelay: .seconds(1), maxAttempts: 10)
            : .never
        if command == "inspect" {
            try await InspectorCommand.run(app, over: connection, options: options)
            return
        }
        if command == "state", let seq = options.at {
            try stateAt(seq, app: app, over: connection, options: options)
            return
        }
        let replica = try Replica.attach(app: app, over: connection, name: options.name, startReading: false,
                                         reconnect: policy)
        defer { replica.close() }
        switch command {
        case "state":
            try printState(replica, options: options)
        case "dispatch":
            replica.startReading()
            for json in actions {
                let seq = try await replica.dispatch(json: json)
                Console.out("\(seq)")
            }
        case "watch":
            // --diff: each action's effect on the state, as the store's subscriber saw it (one
            // state per applied action, in order; a re-hydration's state starts afresh).
            let diffs = options.diff ? StateDiffs(start: app.encodeState(replica.store.state)) : nil
            let subscription = diffs.map { diffs in replica.store.subscribe { state in diffs.applied(app.encodeState(state)) } }
            defer { subscription?.cancel() }
            let token = replica.observeEvents { event in
                switch event {
                case .action(let seq, let origin, let id, _, let json, let stamp):
                    let sequenced = SequencedAction(seq: seq, origin: origin, id: id, action: json, stamp: stamp)
                    // The patch is taken for every action (the diffs go in step), printed only if it passes.
                    let patch = diffs?.nextPatch()
                    guard options.filter.passes(sequenced) else { break }
                    Console.out(sequenced.json(patch: patch).canonicalString)
                case .connection(let change):
                    if case .rehydrated = change { diffs?.restart(at: app.encodeState(replica.store.state)) }
                    // stdout stays one action per line; the link's story goes to stderr.
                    if let line = linkLine(change) { Console.error("\(ReplicaCommand.program): \(line)") }
                case .hubLog(let available, let reason):
                    Console.error("\(ReplicaCommand.program): \(hubLogLine(available: available, reason: reason))")
                default:
                    break
                }
            }
            replica.startReading()
            let reason = await replica.waitUntilDisconnected()
            token.cancel()
            fail(reason.description)
        default:
            await Interactive(replica: replica, json: options.json).run()
        }
    }

    /// Ends the process with status 0 on SIGINT or SIGTERM (watch and attach run until then).
    static func exitOnTerminationSignal() {
        let signals: Int32
        do throws(SystemError) {
            signals = try SignalPipe.install()
        } catch {
            return
        }
        Thread.detachNewThread {
            _ = UnixSocket.waitUntil(signals, timeoutMilliseconds: -1)
            exit(0)
        }
    }

    static func wireAction<App: SyncApp>(_ app: App, _ text: String) -> JSON {
        do {
            switch try app.command(text) {
            case .action(let json): return json
            case .local:
                fail("\"\(text)\" runs locally and only in attach mode; use \(ReplicaCommand.program) attach", status: 2)
            }
        } catch {
            fail("\(text): \(AppCodingError.message(of: error))", status: 2)
        }
    }

    /// `state --at SEQ`: the state as it was right after SEQ, rebuilt here with the app's
    /// reducer from the initial state and the actions 1…SEQ of the hub's resume window (a
    /// `hello` resuming at seq 0). Refused, saying why, when the window no longer starts at 1.
    static func stateAt<App: SyncApp>(_ seq: UInt64, app: App, over connection: HubConnection, options: ReplicaOptions) throws(ReplicaError) {
        let status = try connection.status()
        guard seq <= status.seq else { fail("the hub is at seq \(status.seq); seq \(seq) is not sequenced yet") }
        let state = try rebuild(app, through: seq, over: connection, options: options,
                                older: "the state at seq \(seq) cannot be rebuilt: the hub's resume window no longer starts at seq 1 (it holds at least the last 10000 actions); with a data directory, hubd --export DIR --at \(seq) rebuilds it from the newest snapshot at or before it")
        printState(app.encodeState(state), seq: seq, options: options)
    }

    /// The state right after `seq`, rebuilt here with the app's reducer from its initial
    /// state and the actions 1…`seq` of the hub's resume window (the `history` request).
    static func rebuild<App: SyncApp>(_ app: App, through seq: UInt64, over connection: HubConnection, options: ReplicaOptions,
                                      older: String) throws(ReplicaError) -> App.State {
        var state = app.initialState
        try GenericClient.actions(over: connection, from: 1, through: seq, name: options.name, older: older) { sequenced in
            apply(app, sequenced.action, seq: sequenced.seq, to: &state)
        }
        return state
    }

    /// Applies a sequenced action with the app's reducer; one that does not decode or is
    /// refused here means this program's app differs from the hub's (exit 1).
    static func apply<App: SyncApp>(_ app: App, _ json: JSON, seq: UInt64, to state: inout App.State) {
        let action: App.Action
        do throws(AppCodingError) { action = try app.decodeAction(json) } catch {
            fail("sequenced action \(seq) does not decode here: \(error.message)")
        }
        do throws(App.Failure) { try app.reduce(into: &state, action: action) } catch {
            fail("sequenced action \(seq) is refused by this reducer (\(app.describe(error))): this program's app differs from the hub's")
        }
    }

    /// `history --from A --to B --diff`: each action A…B as `watch --diff` prints it, with the
    /// JSON Patch it made, from the state before A rebuilt here (the window must reach seq 1).
    static func historyDiff<App: SyncApp>(_ app: App, over connection: HubConnection, options: ReplicaOptions) throws(ReplicaError) {
        let (from, end) = try GenericClient.historyRange(over: connection, options: options)
        var state = try rebuild(app, through: from - 1, over: connection, options: options,
                                older: "history --diff needs the state before seq \(from), rebuilt from seq 1, and the hub's resume window no longer starts at seq 1 (it holds at least the last 10000 actions); use history without --diff, watch --diff while actions flow, or hubd --export DIR --at \(from - 1) on its data directory")
        var before = app.encodeState(state)
        try GenericClient.actions(over: connection, from: from, through: end, name: options.name) { sequenced in
            apply(app, sequenced.action, seq: sequenced.seq, to: &state)
            let after = app.encodeState(state)
            defer { before = after }
            guard options.filter.passes(sequenced) else { return }
            Console.out(sequenced.json(patch: JSONPatch.diff(from: before, to: after)).canonicalString)
        }
    }

    /// `history --devtools FILE`: the actions A…B in Redux DevTools' own format (the lifted
    /// state its Import reads), with the state before A as the committed state and the state
    /// after each action, rebuilt here with the app's reducer.
    static func historyDevTools<App: SyncApp>(_ app: App, over connection: HubConnection, options: ReplicaOptions,
                                              file: String) throws(ReplicaError) {
        let (from, end) = try GenericClient.historyRange(over: connection, options: options)
        var state = try rebuild(app, through: from - 1, over: connection, options: options,
                                older: "history --devtools needs the state before seq \(from), rebuilt from seq 1, and the hub's resume window no longer starts at seq 1 (it holds at least the last 10000 actions); use the inspector (replica-cli inspect --data-dir DIR) to export from the hub's data directory")
        let committed = app.encodeState(state)
        var actions: [SequencedAction] = []
        var states: [JSON] = []
        try GenericClient.actions(over: connection, from: from, through: end, name: options.name) { sequenced in
            apply(app, sequenced.action, seq: sequenced.seq, to: &state)
            guard options.filter.passes(sequenced) else { return }
            actions.append(sequenced)
            states.append(app.encodeState(state))
        }
        let lifted = DevToolsExport.liftedState(committed: committed, actions: actions, states: states)
        do {
            try Data(lifted.canonicalBytes).write(to: URL(fileURLWithPath: file))
        } catch {
            fail("history --devtools: cannot write \(file): \(error.localizedDescription)")
        }
        Console.out("wrote \(actions.count) actions (seq \(from)…\(end)) to \(file): open Redux DevTools, then Import it")
    }

    static func printState<App: SyncApp>(_ replica: Replica<App>, options: ReplicaOptions) throws(ReplicaError) {
        printState(replica.app.encodeState(replica.store.state), seq: replica.seq, options: options)
    }

    /// Prints a state as `state` does: the whole of it, or the value at `--pointer`, as one
    /// line of canonical JSON; with `--json`, `{"digest":…,"seq":…,"state":…}` (the digest is
    /// always of the whole state).
    ///
    /// - Parameters:
    ///   - whole: The state's JSON.
    ///   - seq: The seq it is the state after.
    ///   - digest: Its digest when known (else computed).
    ///   - options: The command line.
    static func printState(_ whole: JSON, seq: UInt64, digest: String? = nil, options: ReplicaOptions) {
        var shown = whole
        if let pointerText = options.pointer {
            let pointer: JSONPointer
            do { pointer = try JSONPointer(pointerText) } catch { fail(error.description, status: 2) }
            guard let value = whole.value(at: pointer) else { fail("no value at \(pointerText) in the state at seq \(seq)") }
            shown = value
        }
        if options.json {
            Console.out(JSON.object(["seq": JSON(seq), "digest": .string(digest ?? Digest.of(whole)), "state": shown]).canonicalString)
        } else {
            Console.out(shown.canonicalString)
        }
    }
}

/// The line `attach` and `watch` print for a change of the link (`nil`: say nothing).
func linkLine(_ change: ConnectionChange) -> String? {
    switch change {
    case .dropped(let reason): "link to the hub dropped: \(reason); reconnecting"
    case .reconnecting: nil
    case .resumed(let seq): "link back: resumed at seq \(seq)"
    case .rehydrated(let seq): "link back: re-hydrated at seq \(seq) (state replaced by the hub's)"
    case .diverged(let seq, let reason): "diverged from the hub at seq \(seq) (\(reason)); re-hydrating"
    }
}

/// The JSON line `attach --json` prints for a change of the link (`nil`: say nothing).
func linkJSON(_ change: ConnectionChange, replica: Int) -> JSON? {
    switch change {
    case .dropped(let reason): ["type": "link", "state": "dropped", "reason": .string(reason)]
    case .reconnecting: nil
    // `replica`: the id this replica now has (its own actions carry it as `origin`).
    case .resumed(let seq): ["type": "link", "state": "resumed", "seq": JSON(seq), "replica": JSON(replica)]
    case .rehydrated(let seq): ["type": "link", "state": "rehydrated", "seq": JSON(seq), "replica": JSON(replica)]
    case .diverged(let seq, let reason): ["type": "link", "state": "diverged", "seq": JSON(seq), "reason": .string(reason)]
    }
}

/// What `attach` and `watch` print when the hub stops or starts taking dispatches.
///
/// - Parameters:
///   - available: Whether it takes them again.
///   - reason: Why not, while it does not.
/// - Returns: One line.
func hubLogLine(available: Bool, reason: String?) -> String {
    available
        ? "the hub takes dispatches again (its log can be written)"
        : "the hub refuses every dispatch for now: \(ControlCharacters.escaped(reason ?? "its log cannot be written")); actions already sequenced keep coming"
}
