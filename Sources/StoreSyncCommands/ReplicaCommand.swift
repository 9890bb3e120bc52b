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
import SyncLocks
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
            fail("missing command (attach, dispatch, state, watch, status, top, history, inspect or upgrade); see \(ReplicaCommand.program) --help", status: 2)
        }
        if case .unknown(let word) = command {
            fail("unknown command \"\(shown(word))\"; the commands are attach, dispatch, state, watch, status, top, history, inspect and upgrade", status: 2)
        }
        if command == .inspect {
            // Bad usage (a host that is not loopback) is said before anything connects.
            do throws(UsageError) {
                _ = try InspectorCommand.parse(options.arguments)
            } catch {
                fail(error.message, status: 2)
            }
        }
        if command == .dispatch && options.arguments.isEmpty {
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
            if command == .dispatch { _ = options.arguments.map { wireAction(app, $0) } }
        }
        // With no --app, a CLI of one app uses that app's default socket; replica-cli (several
        // apps) finds the one hub in the default directory, or says which to choose.
        // `upgrade --to NAME@VERSION` names the app too.
        let defaultApp = options.app.map(AppChoice.name) ?? options.upgradeTo.map(AppChoice.name)
            ?? (apps.count == 1 ? apps.first.map { type(of: $0).name } : nil)
        let paths: [String]
        do throws(SystemError) {
            paths = try SocketPath.locate(explicit: options.socket, app: defaultApp)
        } catch {
            fail(error.message)
        }
        do throws(ReplicaError) {
            let connection = try HubConnection(paths: paths)
            if command == .upgrade {
                try upgrade(over: connection, options: options)
                return
            }
            if command == .top {
                try TopCommand.run(over: connection, options: options)
                return
            }
            if command == .history {
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
                // Every version carried: the history may have been upgraded within the range.
                let chain = app(named: AppChoice.name(hubApp))?.versions
                if let file = options.devtools {
                    try historyDevTools(known, carried: chain, over: connection, options: options, file: file)
                    return
                }
                try historyDiff(known, carried: chain, over: connection, options: options)
                return
            }
            var appName = options.app
            var hubFingerprint: String?
            if command == .status || appName == nil {
                let status = try connection.status()
                if command == .status {
                    if let asked = options.app, JSONKey(AppChoice.name(asked)) != JSONKey(status.app) {
                        Console.error("\(ReplicaCommand.program): note: the hub at \(connection.path) runs app \"\(status.app)\", not \"\(ControlCharacters.escaped(asked))\" (status does not attach, so --app changes nothing here)")
                    }
                    printStatus(status, json: options.json)
                    return
                }
                appName = status.app
                hubFingerprint = status.fingerprint
            }
            if let name = appName, app(named: name) == nil, options.app == nil, command != .attach, command != .inspect {
                // Any hub can be read and written as raw JSON; only attach needs the reducer.
                try GenericClient.run(app: name, over: connection, command: command, options: options)
                return
            }
            // Every version this program carries of the app (the newest's chain), for what to
            // run when the history moves past the one chosen here.
            let carried = appName.flatMap { app(named: AppChoice.name($0)) }?.versions
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
            try await run(app, over: connection, command: command, options: options, carried: carried)
        } catch {
            if case .appOutdated(let outdated) = error {
                // The hub refused the hello: the history runs a newer version than this one.
                let carried = apps.first { JSONKey(type(of: $0).name) == JSONKey(AppChoice.name(outdated.fingerprint)) }?.versions
                exitOutdated(outdated, command: command, path: paths.first, carried: carried)
            }
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
            app          \(status.app) (\(status.fingerprint))\(status.upgradableTo.map { "\nupgradable   \(ControlCharacters.escaped($0)) (\(ReplicaCommand.program) upgrade)" } ?? "")
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

    static func run<App: SyncApp>(_ app: App, over connection: HubConnection, command: ReplicaOptions.Command,
                                  options: ReplicaOptions, carried: AppVersionChain? = nil) async throws(ReplicaError) {
        let carried = carried ?? app.versions
        // Bad arguments are usage errors before anything attaches to the hub.
        let actions = command == .dispatch ? options.arguments.map { wireAction(app, $0) } : []
        if command.rides { exitOnTerminationSignal() }
        // Observers go in before reading starts, so no sequenced action is missed.
        // attach and watch ride through hub restarts; one-shot commands do not reconnect.
        let rides = command.rides && !options.noReconnect
        // dispatch: a dropped link is retried a few times on the same session, so the action
        // is applied once (the hub answers a re-sent one `duplicate`) or the command fails.
        let policy: ReconnectPolicy = rides ? .automatic
            : command == .dispatch ? ReconnectPolicy(initialDelay: .milliseconds(50), maxDelay: .seconds(1), maxAttempts: 10)
            : .never
        if command == .inspect {
            try await InspectorCommand.run(app, over: connection, options: options, carried: carried)
            return
        }
        if command == .state, let seq = options.at {
            try stateAt(seq, app: app, carried: carried, over: connection, options: options)
            return
        }
        // A hub that holds the hello until the history is upgraded to this version: say so
        // (once per wait) and wait.
        let waiting = WaitingReporter(path: connection.path, fingerprint: App.fingerprint)
        let replica = try Replica.attach(app: app, over: connection, name: options.name, startReading: false,
                                         reconnect: policy, onWaiting: { waiting.report($0) })
        defer { replica.close() }
        waiting.reset()
        switch command {
        case .state:
            try printState(replica, options: options)
        case .dispatch:
            replica.startReading()
            for json in actions {
                let seq: UInt64
                do throws(ReplicaError) {
                    seq = try await replica.dispatch(json: json)
                } catch .appOutdated(let outdated) {
                    exitOutdated(outdated, command: command, path: replica.socketPath, carried: carried, notApplied: true)
                }
                Console.out("\(seq)")
            }
        case .watch:
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
                case .connection(.waiting(let notice)):
                    waiting.report(notice)
                case .connection(let change):
                    if case .rehydrated = change { diffs?.restart(at: app.encodeState(replica.store.state)) }
                    if case .resumed = change { waiting.reset() }
                    if case .rehydrated = change { waiting.reset() }
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
            if case .appOutdated(let outdated) = reason {
                exitOutdated(outdated, command: command, path: replica.socketPath, carried: carried)
            }
            fail(reason.description)
        default:
            await Interactive(replica: replica, json: options.json, waiting: waiting, carried: carried).run()
        }
    }

    /// `upgrade [--to NAME@VERSION] [--dry-run]`: asks the hub (no `hello`) and prints its
    /// answer in one line (``upgradeLine(_:)``), or with `--json` the hub's message; a
    /// refusal is one line on stderr and exit 1.
    ///
    /// - Parameters:
    ///   - connection: A connection that has sent nothing yet.
    ///   - options: The command line.
    static func upgrade(over connection: HubConnection, options: ReplicaOptions) throws(ReplicaError) {
        let id = DispatchID.string("replica-cli-upgrade")
        let report: UpgradeReport
        do throws(ReplicaError) {
            report = try connection.upgrade(to: options.upgradeTo, dryRun: options.dryRun, id: id)
        } catch .rejected(let error) {
            if options.json { Console.out(HubMessage.reject(id: id, error: error).json.canonicalString) }
            fail(error.code == .upgradeRefused ? "upgrade refused: \(error.message)" : "upgrade \(error.rawCode): \(error.message)")
        } catch .hub(let error) where error.code == .unknownType {
            fail("the hub at \(connection.path) does not know upgrade requests (\(error.message)): it predates app upgrades; run a newer hubd")
        }
        Console.out(options.json ? HubMessage.upgrade(report).json.canonicalString : upgradeLine(report))
    }

    /// What `upgrade` prints for the hub's report, in one line (terminal-safe):
    /// - `upgraded todos@1 → todos@2 at seq 7, digest D (B bytes); detached 2 replicas (todos@1: 2)`;
    /// - `the history already runs todos@2 (seq 9, digest D); nothing changed`;
    /// - `dry run: todos@1 → todos@2 would migrate the state at seq 7 to digest D (B bytes) and
    ///   detach 2 replicas (todos@1: 2); nothing changed`, or for the version the history
    ///   already runs `dry run: the history already runs todos@2 (seq 9, digest D); nothing would change`.
    ///
    /// - Parameter report: The hub's answer.
    /// - Returns: The line.
    static func upgradeLine(_ report: UpgradeReport) -> String {
        let from = ControlCharacters.escaped(report.from), to = ControlCharacters.escaped(report.to)
        let digest = ControlCharacters.escaped(report.digest)
        let size = report.stateBytes == 1 ? "1 byte" : "\(report.stateBytes) bytes"
        let replicas = detachedText(report.detaches)
        if report.dryRun {
            guard JSONKey(report.from) != JSONKey(report.to) else {
                return "dry run: the history already runs \(to) (seq \(report.seq), digest \(digest)); nothing would change"
            }
            return "dry run: \(from) → \(to) would migrate the state at seq \(report.seq) to digest \(digest) (\(size)) and detach \(replicas)\(lackingText(report)); nothing changed"
        }
        guard report.changed else {
            return "the history already runs \(to) (seq \(report.seq), digest \(digest)); nothing changed"
        }
        return "upgraded \(from) → \(to) at seq \(report.seq), digest \(digest) (\(size)); detached \(replicas)\(lackingText(report))"
    }

    /// `; hubs of the shared log without todos@2: b pid 7 (carries todos@1), consumer X (predates
    /// upgrades)`, or nothing when every hub has the target.
    ///
    /// - Parameter report: The hub's answer.
    /// - Returns: The words, starting with `; `.
    static func lackingText(_ report: UpgradeReport) -> String {
        guard !report.hubsLacking.isEmpty else { return "" }
        let hubs = report.hubsLacking.prefix(16).map { hub in
            let what = hub.versions.map { "carries " + $0.map(ControlCharacters.escaped).joined(separator: ", ") } ?? "predates upgrades"
            return "\(ControlCharacters.escaped(hub.name)) (\(what))"
        }
        let more = report.hubsLacking.count > 16 ? ", and \(report.hubsLacking.count - 16) more" : ""
        return "; hubs of the shared log without \(ControlCharacters.escaped(report.to)): \(hubs.joined(separator: ", "))\(more)"
    }

    /// `2 replicas (todos@1: 2)`: how many, and how many per version their `hello` named, in
    /// the versions' order (`generic`: clients that named none, last); `no replicas` for none.
    ///
    /// - Parameter detaches: The replicas an upgrade detaches.
    /// - Returns: The words.
    static func detachedText(_ detaches: [UpgradeReport.Detached]) -> String {
        guard !detaches.isEmpty else { return "no replicas" }
        var counts: [String: Int] = [:]
        var generic = 0
        for entry in detaches {
            if let fingerprint = entry.fingerprint {
                counts[ControlCharacters.escaped(fingerprint), default: 0] += 1
            } else {
                generic += 1
            }
        }
        var groups = counts.keys.sorted().map { "\($0): \(counts[$0] ?? 0)" }
        if generic > 0 { groups.append("generic: \(generic)") }
        return "\(detaches.count) replica\(detaches.count == 1 ? "" : "s") (\(groups.joined(separator: ", ")))"
    }

    /// Says why this replica's app version cannot go on (the history was upgraded past it, or
    /// runs a newer version already) and what to run instead; exits 1.
    ///
    /// - Parameters:
    ///   - outdated: Why.
    ///   - command: The command that ran (`attach`, `watch`, …), for what to run.
    ///   - path: The hub's socket, to ask which version its history runs when the hub's
    ///     refusal did not say.
    ///   - carried: The versions of the app this program carries.
    ///   - notApplied: Whether an action this command dispatched was never applied because of it.
    static func exitOutdated(_ outdated: AppOutdated, command: ReplicaOptions.Command, path: String?, carried: AppVersionChain?,
                             notApplied: Bool = false) -> Never {
        let target = outdated.historyFingerprint ?? path.flatMap { try? HubConnection.status(at: $0).fingerprint }
        var text: String
        if let notice = outdated.notice {
            text = "the history was upgraded from \(notice.from) to \(notice.to) at seq \(notice.seq)"
            if notApplied { text += " before this action was sequenced, so it was never applied" }
            text += "; this replica runs \(outdated.fingerprint)"
        } else if let target, JSONKey(target) != JSONKey(outdated.fingerprint) {
            text = "the hub's history runs \(target), a newer version than this replica's \(outdated.fingerprint)"
            if notApplied { text += "; this action was never applied" }
        } else {
            text = "\(outdated.error.rawCode): \(outdated.error.message)"
        }
        guard let target, JSONKey(target) != JSONKey(outdated.fingerprint) else {
            fail("\(text): run a newer version of the app")
        }
        if carried?.contains(target) == true {
            fail("\(text): run \(ReplicaCommand.program) --app \(target) \(command.word)")
        }
        fail("\(text): run a \(ReplicaCommand.program) that carries \(target)")
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
    /// reducers from the initial state of the version the history started with and the
    /// actions 1…SEQ of the hub's resume window, migrated at each upgrade on the way (the app
    /// versions `carried`). Refused, saying why, when the window no longer starts at 1.
    static func stateAt<App: SyncApp>(_ seq: UInt64, app: App, carried: AppVersionChain? = nil, over connection: HubConnection,
                                      options: ReplicaOptions) throws(ReplicaError) {
        let status = try connection.status()
        guard seq <= status.seq else { fail("the hub is at seq \(status.seq); seq \(seq) is not sequenced yet") }
        let older = "the state at seq \(seq) cannot be rebuilt: the hub's resume window no longer starts at seq 1 (it holds at least the last 10000 actions); with a data directory, hubd --export DIR --at \(seq) rebuilds it from the newest snapshot at or before it"
        let items = try historyItems(over: connection, from: 1, through: seq, options: options, older: older)
        var rebuilt = try rebuildStart(carried ?? app.versions, items: items, through: seq, status: status, over: connection,
                                       options: options, older: older)
        advance(&rebuilt, through: items[...])
        printState(rebuilt.state, seq: seq, options: options)
    }

    /// A state rebuilt here, in its JSON form, and the app version it is of (it changes at
    /// each upgrade on the way).
    struct RebuiltState {
        /// The state.
        var state: JSON
        /// Its version's fingerprint.
        var version: String
        /// Every version this program carries.
        let chain: AppVersionChain
    }

    /// One item of the history, in seq order: an action, or an upgrade.
    enum HistoryItem {
        /// A sequenced action.
        case action(SequencedAction)
        /// An upgrade record (it takes its seq; no action has it).
        case upgrade(UpgradeNotice)
    }

    /// The actions and upgrades `from`…`last` of the hub's resume window, in seq order.
    static func historyItems(over connection: HubConnection, from: UInt64, through last: UInt64, options: ReplicaOptions,
                             older: String) throws(ReplicaError) -> [HistoryItem] {
        var items: [HistoryItem] = []
        try GenericClient.actions(over: connection, from: from, through: last, name: options.name, older: older,
                                  each: { items.append(.action($0)) }, upgrade: { items.append(.upgrade($0)) })
        return items
    }

    /// The initial state of the version the history started with: the `from` of its first
    /// upgrade among `items` (seqs 1…`last`), else the version it ran right after `last` (the
    /// `from` of the next upgrade after it, else the version it runs now).
    static func rebuildStart(_ chain: AppVersionChain, items: [HistoryItem], through last: UInt64, status: HubStatus,
                             over connection: HubConnection, options: ReplicaOptions, older: String) throws(ReplicaError) -> RebuiltState {
        var genesis: String?
        for case .upgrade(let notice) in items {
            genesis = notice.from
            break
        }
        if genesis == nil, last < status.seq {
            for case .upgrade(let notice) in try historyItems(over: connection, from: last + 1, through: status.seq, options: options, older: older) {
                genesis = notice.from
                break
            }
        }
        let version = genesis ?? status.fingerprint
        guard let app = chain.app(version) else {
            fail("the history ran \(version) at seq \(last), a version of its app this program does not carry (it carries \(chain.fingerprints.joined(separator: ", "))): its reducer cannot rebuild the state here; use hubd --export DIR --at SEQ on the hub's data directory")
        }
        return RebuiltState(state: initialJSON(app), version: version, chain: chain)
    }

    /// The app's initial state, in its JSON form.
    static func initialJSON<App: SyncApp>(_ app: App) -> JSON { app.encodeState(app.initialState) }

    /// Applies `items` in order: actions with the reducer of the version they were sequenced
    /// under (consecutive ones in one go), upgrades with the chain's migration.
    static func advance(_ rebuilt: inout RebuiltState, through items: ArraySlice<HistoryItem>) {
        var run: [SequencedAction] = []
        for item in items {
            switch item {
            case .action(let sequenced):
                run.append(sequenced)
            case .upgrade(let notice):
                replay(&rebuilt, run)
                run = []
                migrate(&rebuilt, notice)
            }
        }
        replay(&rebuilt, run)
    }

    /// Applies actions sequenced under ``RebuiltState/version`` with its reducer.
    static func replay(_ rebuilt: inout RebuiltState, _ actions: [SequencedAction]) {
        guard let first = actions.first else { return }
        guard let app = rebuilt.chain.app(rebuilt.version) else {
            fail("action \(first.seq) was sequenced under \(rebuilt.version), a version this program does not carry")
        }
        rebuilt.state = replay(app, rebuilt.state, actions)
    }

    /// Applies `actions` to a state of `app`'s version with its reducer.
    static func replay<App: SyncApp>(_ app: App, _ state: JSON, _ actions: [SequencedAction]) -> JSON {
        var typed: App.State
        do throws(AppCodingError) {
            typed = try app.decodeState(state)
        } catch {
            fail("the state rebuilt here before seq \(actions.first?.seq ?? 0) is not a state of \(App.fingerprint): \(error.message)")
        }
        for action in actions { apply(app, action.action, seq: action.seq, to: &typed) }
        return app.encodeState(typed)
    }

    /// Migrates the state at an upgrade, as every hub did, and checks the digest its record names.
    static func migrate(_ rebuilt: inout RebuiltState, _ notice: UpgradeNotice) {
        let from = ControlCharacters.escaped(notice.from), to = ControlCharacters.escaped(notice.to)
        guard JSONKey(notice.from) == JSONKey(rebuilt.version) else {
            fail("the upgrade at seq \(notice.seq) moves the history from \(from), but the state rebuilt here is of \(ControlCharacters.escaped(rebuilt.version))")
        }
        do throws(MigrationError) {
            rebuilt.state = try rebuilt.chain.migrate(rebuilt.state, from: notice.from, to: notice.to)
        } catch {
            fail("the upgrade at seq \(notice.seq) from \(from) to \(to) cannot be replayed here: \(error.message)")
        }
        let digest = Digest.of(rebuilt.state)
        guard digest == notice.digest else {
            fail("the state migrated here at seq \(notice.seq) (\(from) → \(to)) has digest \(digest), the hub's record says \(ControlCharacters.escaped(notice.digest)): this program's migration differs from the hub's")
        }
        rebuilt.version = notice.to
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
    /// JSON Patch it made, from the state before A rebuilt here (the window must reach seq 1);
    /// each upgrade as its own line with the patch its migration made.
    static func historyDiff<App: SyncApp>(_ app: App, carried: AppVersionChain? = nil, over connection: HubConnection,
                                          options: ReplicaOptions) throws(ReplicaError) {
        let (from, end) = try GenericClient.historyRange(over: connection, options: options)
        let older = "history --diff needs the state before seq \(from), rebuilt from seq 1, and the hub's resume window no longer starts at seq 1 (it holds at least the last 10000 actions); use history without --diff, watch --diff while actions flow, or hubd --export DIR --at \(from - 1) on its data directory"
        let (items, split, status) = try itemsSplit(over: connection, from: from, through: end, options: options, older: older)
        var rebuilt = try rebuildStart(carried ?? app.versions, items: items, through: end, status: status, over: connection,
                                       options: options, older: older)
        advance(&rebuilt, through: items[..<split])
        for item in items[split...] {
            let before = rebuilt.state
            switch item {
            case .action(let sequenced):
                replay(&rebuilt, [sequenced])
                guard options.filter.passes(sequenced) else { continue }
                Console.out(sequenced.json(patch: JSONPatch.diff(from: before, to: rebuilt.state)).canonicalString)
            case .upgrade(let notice):
                migrate(&rebuilt, notice)
                Console.out(GenericClient.upgradeJSON(notice, patch: JSONPatch.diff(from: before, to: rebuilt.state)).canonicalString)
            }
        }
    }

    /// The items 1…`end` of the window, where those of `from`… start among them, and the hub's status.
    private static func itemsSplit(over connection: HubConnection, from: UInt64, through end: UInt64, options: ReplicaOptions,
                                   older: String) throws(ReplicaError) -> ([HistoryItem], Int, HubStatus) {
        let status = try connection.status()
        let items = try historyItems(over: connection, from: 1, through: end, options: options, older: older)
        let split = items.firstIndex { item in
            switch item {
            case .action(let sequenced): sequenced.seq >= from
            case .upgrade(let notice): notice.seq >= from
            }
        } ?? items.count
        return (items, split, status)
    }

    /// `history --devtools FILE`: the actions A…B in Redux DevTools' own format (the lifted
    /// state its Import reads), with the state before A as the committed state and the state
    /// after each action, rebuilt here with the app's reducers; an upgrade is a step of its own,
    /// `{"type":"@@storesync/upgrade","from":…,"to":…,"digest":…}`, with the migrated state.
    static func historyDevTools<App: SyncApp>(_ app: App, carried: AppVersionChain? = nil, over connection: HubConnection,
                                              options: ReplicaOptions, file: String) throws(ReplicaError) {
        let (from, end) = try GenericClient.historyRange(over: connection, options: options)
        let older = "history --devtools needs the state before seq \(from), rebuilt from seq 1, and the hub's resume window no longer starts at seq 1 (it holds at least the last 10000 actions); use the inspector (replica-cli inspect --data-dir DIR) to export from the hub's data directory"
        let (items, split, status) = try itemsSplit(over: connection, from: from, through: end, options: options, older: older)
        var rebuilt = try rebuildStart(carried ?? app.versions, items: items, through: end, status: status, over: connection,
                                       options: options, older: older)
        advance(&rebuilt, through: items[..<split])
        let committed = rebuilt.state
        var actions: [SequencedAction] = []
        var states: [JSON] = []
        for item in items[split...] {
            switch item {
            case .action(let sequenced):
                replay(&rebuilt, [sequenced])
                guard options.filter.passes(sequenced) else { continue }
                actions.append(sequenced)
            case .upgrade(let notice):
                migrate(&rebuilt, notice)
                actions.append(SequencedAction(seq: notice.seq, origin: 0, id: .string("upgrade"),
                                               action: ["type": "@@storesync/upgrade", "from": .string(notice.from),
                                                        "to": .string(notice.to), "digest": .string(notice.digest)],
                                               stamp: .none))
            }
            states.append(rebuilt.state)
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
    // On stderr, by the ``WaitingReporter``, with the history's version.
    case .waiting: nil
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
    case .waiting(let notice): ["type": "link", "state": "waiting", "fingerprint": .string(notice.fingerprint), "message": .string(notice.message)]
    }
}

/// What `attach`, `watch`, `state` and `dispatch` say on stderr while the hub holds them until
/// the history is upgraded to their version (or cannot hold them now, `app-ahead`, and they
/// retry): `waiting: the hub's history runs todos@1; this replica runs todos@2 and attaches
/// when the history is upgraded (replica-cli upgrade)`, once per wait.
final class WaitingReporter: Sendable {
    /// The hub's socket, asked for the version its history runs.
    let path: String
    /// The version this replica runs.
    let fingerprint: String
    private let said = Locked(false)

    init(path: String, fingerprint: String) {
        self.path = path
        self.fingerprint = fingerprint
    }

    /// Prints the line, unless it was printed since the last ``reset()``.
    ///
    /// - Parameter notice: What the hub (or the library, for `app-ahead`) said.
    func report(_ notice: WaitingNotice) {
        guard said.withLock({ said in defer { said = true }; return !said }) else { return }
        // A hub that holds this replica answers `status` on another connection.
        let history = (try? HubConnection.status(at: path))?.fingerprint
        Console.error(Self.line(history: history, running: fingerprint, program: ReplicaCommand.program))
    }

    /// The wait is over (the replica attached): the next wait is said again.
    func reset() { said.withLock { $0 = false } }

    /// The line, terminal-safe.
    ///
    /// - Parameters:
    ///   - history: The version the hub's history runs, if known.
    ///   - running: The version this replica runs.
    ///   - program: The executable's name.
    /// - Returns: The line.
    static func line(history: String?, running: String, program: String) -> String {
        let runs = history.map { "runs \(ControlCharacters.escaped($0))" } ?? "runs an older version of the app"
        return "waiting: the hub's history \(runs); this replica runs \(ControlCharacters.escaped(running)) and attaches when the history is upgraded (\(program) upgrade)"
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
