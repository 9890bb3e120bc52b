import SyncCore
import SyncPOSIX

/// Everything `replica-cli`'s command line says, as a value: read by ``parse(_:)``, a pure
/// function over one table of flags (``table(appNames:)``), from which the help's OPTIONS
/// section and "did you mean" are made too.
struct ReplicaOptions: Equatable {
    /// What the command line asks for besides a command.
    enum Request: Equatable {
        /// Run the command.
        case command
        /// Print the help.
        case help
        /// Print the version.
        case version
    }

    var request = Request.command
    var socket: String?
    var app: String?
    var name: String?
    var json = false
    var pointer: String?
    var noReconnect = false
    /// watch: print each action's RFC 6902 patch to the state.
    var diff = false
    /// state: the seq to rebuild the state at (time travel).
    var at: UInt64?
    /// `--type GLOB` and `--origin N[,N…]` (watch and history).
    var filter = ActionFilter()
    /// `history --devtools FILE`: write the actions in Redux DevTools' format.
    var devtools: String?
    /// `--hub-uid` (the command puts it in the environment, as every client of the process reads it).
    var hubUID: String?
    /// `upgrade --to NAME@VERSION`: the version to move the history to (`nil`: the newest the hub carries).
    var upgradeTo: String?
    /// `upgrade --dry-run`: run the migration and report, changing nothing.
    var dryRun = false
    /// The command: the first word that is not an option (`nil`: none given).
    var command: Command?
    var arguments: [String] = []

    /// A `replica-cli` command.
    enum Command: Equatable, Sendable, ExpressibleByStringLiteral {
        case attach, dispatch, state, watch, status, top, history, inspect, upgrade
        /// A word that names no command (refused, exit 2, before anything connects).
        case unknown(String)

        /// Every command, in the order the help and the messages list them.
        static let all: [Command] = [.attach, .dispatch, .state, .watch, .status, .top, .history, .inspect, .upgrade]

        /// The command a word names, or ``unknown(_:)``.
        ///
        /// - Parameter word: The word as typed.
        init(_ word: String) { self = Self.all.first { $0.word == word } ?? .unknown(word) }

        init(stringLiteral value: String) { self.init(value) }

        /// The word that names it.
        var word: String {
            switch self {
            case .attach: "attach"
            case .dispatch: "dispatch"
            case .state: "state"
            case .watch: "watch"
            case .status: "status"
            case .top: "top"
            case .history: "history"
            case .inspect: "inspect"
            case .upgrade: "upgrade"
            case .unknown(let word): word
            }
        }

        /// Whether its own flags (`--count`, `--from`, …) are left in ``ReplicaOptions/arguments``.
        var takesFlags: Bool {
            switch self {
            case .dispatch, .top, .history, .inspect, .upgrade: true
            case .attach, .state, .watch, .status, .unknown: false
            }
        }

        /// Whether it reads until stopped, riding through hub restarts (`attach`, `watch`).
        var rides: Bool { self == .attach || self == .watch }
    }

    /// Reads a command line: flags anywhere, the first other word as the command, the rest as
    /// its arguments (`--` ends the flags).
    ///
    /// - Parameter arguments: The arguments, the executable first.
    /// - Returns: The options.
    /// - Throws: ``UsageError``: an unknown flag (with the closest one), or a missing or bad value.
    static func parse(_ arguments: [String]) throws(UsageError) -> ReplicaOptions {
        let program = executableName(arguments.first, otherwise: "replica-cli")
        let table = table(appNames: "")
        var options = ReplicaOptions()
        var cursor = ArgumentCursor(arguments)
        while let argument = cursor.next() {
            if argument == "--" {
                options.arguments += cursor.rest()
                break
            }
            if let ends = try table.read(argument, from: &cursor, into: &options, program: program) {
                if ends { break }
                continue
            }
            if argument.hasPrefix("--"), !(options.command?.takesFlags ?? false) {
                throw table.unknownFlag(argument, program: program, word: "option")
            }
            if options.command == nil { options.command = Command(argument) } else { options.arguments.append(argument) }
        }
        if options.request == .command, options.command == .upgrade {
            try options.readUpgradeArguments(program: program)
        }
        return options
    }

    /// `upgrade`'s own flags, `--to NAME@VERSION` and `--dry-run`, moved from ``arguments``
    /// to ``upgradeTo`` and ``dryRun`` (`--to` is also `history`'s, with another meaning).
    ///
    /// - Parameter program: The executable's name, for messages.
    /// - Throws: ``UsageError`` for anything else, or a `--to` that is not `NAME@VERSION`.
    private mutating func readUpgradeArguments(program: String) throws(UsageError) {
        var rest = arguments[...]
        arguments = []
        while let argument = rest.popFirst() {
            switch argument {
            case "--to":
                guard let value = rest.popFirst() else {
                    throw UsageError("upgrade --to needs NAME@VERSION, e.g. --to todos@2; see \(program) --help")
                }
                guard let at = value.firstIndex(of: "@"), at != value.startIndex, value.index(after: at) != value.endIndex,
                      value.utf8.count <= ClientMessage.maxNameBytes,
                      !value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
                    throw UsageError("upgrade --to needs NAME@VERSION, e.g. --to todos@2, got \"\(shown(value))\"")
                }
                upgradeTo = value
            case "--dry-run":
                dryRun = true
            default:
                throw UsageError("upgrade takes --to NAME@VERSION and --dry-run, not \"\(shown(argument))\"; see \(program) --help")
            }
        }
    }

    /// The help: the commands, the OPTIONS section made from the table, the shorthand of each app.
    ///
    /// - Parameters:
    ///   - program: The executable's name.
    ///   - apps: The apps it knows.
    /// - Returns: The text.
        static func usage(program: String, apps: [any SyncApp]) -> String {
        let shorthand = apps.map { "\(type(of: $0).name):\n\(type(of: $0).commandHelp)" }.joined(separator: "\n")
        return """
        \(program) — a StoreSync replica in a terminal: attach to a hub, dispatch, read state, watch.

        USAGE: \(program) [OPTIONS] COMMAND [ARGUMENTS]

        COMMANDS:
          attach                 Interactive replica. Each line read from stdin is an action (JSON
                                 or the app's shorthand, see below) or a command: :state, :digest,
                                 :status, :history [N], :diff [SEQ], :help, :quit. Every sequenced
                                 action is printed as "#SEQ from replica N: ACTION" ("(NAME)" when
                                 its replica gave a name, "(you)" marks this replica's own).
                                 :history [N] prints the last N actions seen here (default 20, at
                                 most 1000) with when the hub sequenced them; :diff [SEQ] the JSON
                                 Patch action SEQ (default: the newest) made to the state.
                                 Ends at end of input or :quit (exit 0); rides through hub restarts
                                 (see --no-reconnect, with which it ends when the hub goes, exit 1).
                                 On a terminal (without --json) the line is edited in place after
                                 a "> " prompt: Left/Right, Home/End, Ctrl-A/E/B/F, Backspace,
                                 Delete, Ctrl-K/U/W, Up/Down for history (the last 1000 lines, kept
                                 in $XDG_STATE_HOME/storesync/attach-history, else
                                 ~/.local/state/storesync/attach-history), Tab to complete
                                 :commands and shorthand words; Ctrl-D on an empty line ends it.
                                 Each line is dispatched and acknowledged before the next is read,
                                 so a later line (such as a thunk) sees the effect of earlier ones.
                                 :digest first waits for everything sequenced so far, then prints
                                 "seq N digest D", and compares with the hub's digest at seq N:
                                 if they differ, a second line says so. While actions flow the
                                 replica also compares digests with the hub about once a second
                                 and re-hydrates if they differ ("diverged from the hub at seq N
                                 (… both digests …); re-hydrating"). With --json each of these lines is one JSON
                                 object: {"type":"attached","app":…,"digest":…,"fingerprint":…,
                                 "hub":…,"replica":…,"seq":…} first, then each action as in watch,
                                 {"type":"rejected","id":…,"error":{…}} for a refusal by the hub,
                                 {"type":"error","error":{"code":…,…}} for a line that is not an
                                 action or a barrier that failed while reconnecting,
                                 {"type":"queued","message":…} for an action typed while the hub
                                 cannot be reached (kept, sent once the link is back; do not
                                 send it again; without --json "queued: …"), and
                                 {"type":"digest","digest":…,"seq":…} for :digest, with
                                 "hub_digest" when the hub was still at that seq,
                                 {"type":"history","actions":[…]} for :history and
                                 {"type":"diff","patch":[…],"seq":…} for :diff (:state, :status
                                 and :help still print text).
                                 SIGINT or SIGTERM ends it with exit 0.
          dispatch ACTION…       Send each ACTION (one argument each: JSON or shorthand) in order,
                                 print the seq the hub gave it, one per line, and exit 0. On a
                                 refusal print "\(program): CODE: MESSAGE" to stderr and exit 1
                                 without sending the rest.
          state [--pointer P] [--at SEQ]
                                 Print the current state as one line of JSON (the value at RFC 6901
                                 pointer P with --pointer) and exit. With --json print
                                 {"digest":…,"seq":…,"state":…}; the digest is always of the whole state.
                                 With --at SEQ: the state as it was right after SEQ, rebuilt here
                                 with the app's reducer from the hub's resume window (it must
                                 still start at seq 1; otherwise exit 1 saying so: use
                                 hubd --export DIR --at SEQ on the hub's data directory).
          watch [--diff] [--type GLOB] [--origin N|NAME[,…]]
                                 Print every sequenced action as one JSON line (NDJSON):
                                 {"action":…,"id":…,"origin":…,"origin_name":…,"seq":…,"time":…},
                                 until SIGINT or SIGTERM (exit 0); "origin_name" is the name the
                                 dispatching replica gave (absent if none), "time" when the hub
                                 sequenced it (RFC 3339, UTC). Rides through hub restarts, or with
                                 --no-reconnect ends when the hub goes (exit 1). With --diff each
                                 line also carries "patch": the RFC 6902 JSON Patch the action made
                                 to the state (add/remove/replace, computed here by the app's
                                 reducer). --type GLOB prints only actions whose "type" matches
                                 (* and ?), --origin only those dispatched by these replica ids or
                                 names.
          status                 Print the hub's status (hub id, app, fingerprint, seq, digest,
                                 attached replicas; "upgradable" when the hub carries a newer
                                 version of the app than its history runs). With --json print
                                 the hub's status message.
          upgrade [--to NAME@VERSION] [--dry-run]
                                 Ask the hub to move its history to a newer version of its app
                                 (NAME@VERSION; default: the newest the hub carries, its
                                 status's "upgradable_to") and print what it did, once durable:
                                 "upgraded todos@1 → todos@2 at seq 7, digest D (B bytes);
                                 detached 2 replicas (todos@1: 2)", the replicas counted by the
                                 version they ran ("generic": clients that named none). They
                                 attach again; those of the older version are told to run the
                                 newer one, and their actions not sequenced before the upgrade
                                 are never applied. Replicas of the newer version waiting for
                                 it attach. Asking for the version the history already runs
                                 changes nothing and says so ("the history already runs todos@2
                                 (seq 9, digest D); nothing changed"), so it is safe to repeat.
                                 --dry-run runs the migration and changes nothing: "dry run:
                                 todos@1 → todos@2 would migrate the state at seq 7 to digest D
                                 (B bytes) and detach 2 replicas (todos@1: 2); nothing changed".
                                 On a shared log both also name the hubs of the stream that lack
                                 the version ("; hubs of the shared log without todos@2: b pid 7
                                 (carries todos@1)"), and a hub built before upgrades refuses the
                                 upgrade until it is replaced.
                                 With --json print the hub's upgrade message instead. Only the
                                 hub's user and root may ask. A refusal changes nothing: it
                                 prints "\(program): upgrade refused: MESSAGE" (or "upgrade
                                 not-permitted: MESSAGE") to stderr and exits 1. Works with any
                                 app.
          history --from A [--to B] [--diff] [--devtools FILE] [--type GLOB] [--origin N|NAME[,…]]
                                 Print the sequenced actions A…B (B: the hub's seq by default) as
                                 NDJSON lines, as watch does, from the hub's resume window (at
                                 least the last 10000 actions); older ones: exit 1 saying so (read
                                 the data directory with hubd --export). Works with any app. With
                                 --diff each line also carries "patch", the RFC 6902 JSON Patch the
                                 action made, from the state before A rebuilt here with the app's
                                 reducer (the app must be built in, and the window reach seq 1).
                                 --devtools FILE writes them instead to FILE in Redux DevTools'
                                 own format (its Import reads it: every action, the state after
                                 each), under the same conditions as --diff.
                                 --type and --origin filter the lines as for watch.
                                 An upgrade of the app's version within A…B is a line of its
                                 own, whatever the filters: {"digest":…,"from":…,"seq":…,
                                 "to":…,"type":"upgrade"} (with --diff, "patch": what the
                                 migration changed). --diff, --devtools (an upgrade is a step
                                 "@@storesync/upgrade" there) and state --at rebuild across
                                 upgrades: each version's reducer, and the migrations between
                                 them, checked against the digest each upgrade recorded.
          inspect --http [HOST:]PORT [--data-dir DIR] [--keep N]
                                 Serve a page for a browser, on loopback only (HOST 127.0.0.1,
                                 localhost or ::1; PORT 0: any free port): the actions live (seq,
                                 time, origin by name, type; filter by type and origin; pause),
                                 the state at the selected seq as a tree (search by JSON Pointer),
                                 the diff that action made, a slider to travel in time, the
                                 replicas (name, uid, pid, lag) and the hub's and log's health;
                                 and an export for Redux DevTools. Prints the URL with a random
                                 token first: a request without it, from another origin, or with
                                 another Host gets 403. Keeps up to the last N actions (default
                                 10000; at least N/2); older states are rebuilt from the hub's
                                 data directory with --data-dir DIR (read only), else from the
                                 hub's resume window.
                                 Rides through hub restarts, and through an upgrade to a version
                                 this replica-cli carries (it attaches again as that version, on
                                 the same address and token); ends on SIGINT or SIGTERM (exit 0).
                                 The app must be built in. See docs/DEBUGGING.md.
          top [--count N] [--interval SECONDS]
                                 A live view of the hub, refreshed every SECONDS (default 1): seq,
                                 actions/s, max lag, digest, storage, and per replica its id, name,
                                 uid, pid, lag and queued bytes; redrawn in place on a terminal,
                                 else one line per refresh ("seq N  actions/s R  replicas K  max
                                 lag L  digest D"), or one JSON object with --json. Ends after N
                                 refreshes, or on SIGINT/SIGTERM (exit 0). Works with any app.

        ANY HUB: without --app, state, watch, dispatch and status also work with a hub whose app
        this program was not built with, as raw canonical JSON (the app is taken from the hub):
        state prints the hub's state, dispatch takes JSON actions only (the hub validates them),
        watch prints each action and ends when the hub goes (exit 1). attach needs the app built in.

        APP VERSIONS: attach, watch, state and dispatch run the version --app names (default: the
        one the hub's history runs). A newer version than the history's, which the hub carries,
        waits, saying so on stderr ("waiting: the hub's history runs todos@1; this replica runs
        todos@2 and attaches when the history is upgraded (\(program) upgrade)"), then attaches.
        An older one, or one whose history is upgraded while it runs, ends with exit 1 saying
        what to run ("\(program): the history was upgraded from todos@1 to todos@2 at seq 7;
        this replica runs todos@1: run \(program) --app todos@2 attach"); its actions not
        sequenced before the upgrade were never applied.

        OPTIONS:
        \(table(appNames: apps.map { type(of: $0).name }.joined(separator: ", ")).optionsHelp)

        SHORTHAND (besides actions written as JSON objects, {"type":…}):
        \(shorthand)

        Exit status: 0 success; 1 no hub, refused action or upgrade, an outdated app version, or
        lost connection (one line on stderr); 2 bad usage.
        """
    }

    /// `replica-cli`'s flags, in the order the help lists them (those described under a
    /// command last, with no entry of their own).
    ///
    /// - Parameter appNames: The apps, for `--app`'s help.
    /// - Returns: The table.
    static func table(appNames: String) -> FlagTable<ReplicaOptions> {
        FlagTable(flags: [
            .value("--socket", "--socket PATH[,PATH…]", help: [
                "The hub's socket. Default: $STORESYNC_SOCKET, else the app's socket,",
                "$XDG_RUNTIME_DIR/storesync/APP.sock, else ${TMPDIR:-/tmp}/storesync-UID/APP.sock",
                "(APP from --app). Without --app: the one hub socket in that",
                "directory; when several hubs listen there, name one with --app or --socket.",
                "Several paths (hubs on one shared log, hubd --log nats://…) are",
                "tried in order; after a drop, attach and watch move to the next",
                "one that answers and resume there (same history, same seqs).",
            ], into: \.socket),
            .value("--app", "--app NAME", help: [
                "The app to run (\(appNames)). Default: the hub's app,",
                "taken from its status. NAME@VERSION: that version exactly.",
            ], into: \.app),
            .value("--name", "--name NAME", help: [
                "This replica's name in the hub's status and logs.",
            ], into: \.name),
            .switch("--json", help: [
                "Machine-readable output for attach, state, status and upgrade.",
            ]) { options in options.json = true },
            .switch("--no-reconnect", help: [
                "attach and watch: end (exit 1) when the link to the hub drops,",
                "instead of reconnecting. By default they ride through a hub",
                "restart: one line when the link drops (\"link to the hub dropped:",
                "REASON; reconnecting\"), one when it is back (\"link back: resumed at",
                "seq N\", nothing missed, or \"link back: re-hydrated at seq N\", the",
                "state replaced by the hub's); watch prints every seq exactly once.",
                "watch writes these lines to stderr; attach to stdout (with --json",
                "as {\"type\":\"link\",\"state\":\"dropped\"|\"resumed\"|\"rehydrated\"|",
                "\"diverged\"|\"waiting\",…}; resumed and rehydrated carry \"replica\",",
                "the id this replica now has; waiting: the hub holds it until the",
                "history is upgraded to its version, said on stderr as well). dispatch",
                "always retries a dropped link (up to 10 attempts) on its session:",
                "an action is applied once, never twice.",
            ]) { options in options.noReconnect = true },
            .value("--pointer", "--pointer P", help: [
                "With state: print only the value at JSON Pointer P.",
            ], into: \.pointer),
            .value("--hub-uid", "--hub-uid UID", help: [
                "Trust a hub run by this user (name or number) besides yourself and",
                "root (the same as $STORESYNC_HUB_UID). Before connecting, the socket's",
                "directory must belong to one of them and be writable by no one else;",
                "after, the process serving the socket must run as one of them.",
                "Anything else is refused before a byte is sent.",
            ], into: \.hubUID),
            .switch("--version", ends: true, help: [
                "Print the StoreSync version and exit.",
            ]) { options in options.request = .version },
            .switch("-h", "--help", ends: true, help: [
                "Print this help and exit.",
            ]) { options in options.request = .help },
            .switch("--diff", help: []) { options in options.diff = true },
            .value("--type", help: [], into: \.filter.typeGlob),
            .value("--origin", help: []) { options, text throws(UsageError) in
                // Replica ids and names: a word of digits is an id, anything else a name.
                let words = text.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
                guard !words.isEmpty, words.allSatisfy({ !$0.isEmpty }) else {
                    throw UsageError("--origin needs replica ids or names, e.g. --origin 3, --origin 3,7 or --origin alice, got \"\(shown(text))\"")
                }
                func isID(_ word: String) -> Bool { word.allSatisfy(\.isASCII) && Int(word).map { $0 >= 0 } == true }
                let ids = words.filter(isID).compactMap { Int($0) }
                let names = words.filter { !isID($0) }
                options.filter.origins = ids.isEmpty ? nil : Set(ids)
                options.filter.originNames = names.isEmpty ? nil : Set(names.map { JSONKey($0) })
            },
            .value("--devtools", help: [], into: \.devtools),
            .value("--at", help: []) { options, text throws(UsageError) in
                guard let seq = UInt64(text) else { throw UsageError("--at needs a seq (a whole number)") }
                options.at = seq
            },
        ])
    }
}
