import BuiltinApps
import Foundation
@testable import StoreHub
@testable import StoreSyncCommands
import SyncCore
import Testing

/// `hubd` and `replica-cli` command lines read by pure functions over one flag table each:
/// parsing errors are values, checked here without starting a process.
@Suite("Command-line options: one flag table per command, parsed without a process")
struct CommandLineOptionsTests {
    /// Users and groups of a pretend system.
    let accounts = AccountLookup(uid: { ["alice": 1_001, "1002": 1_002][$0] },
                                 gid: { ["staff": 50][$0] })

    private func hub(_ arguments: String...) throws(UsageError) -> HubOptions {
        try HubOptions.parse(["hubd"] + arguments, accounts: accounts)
    }

    private func hubError(_ arguments: String...) -> String? {
        do throws(UsageError) {
            _ = try HubOptions.parse(["hubd"] + arguments, accounts: accounts)
            return nil
        } catch {
            return error.message
        }
    }

    @Test("no flag: the defaults; each flag sets its value")
    func hubValues() throws {
        #expect(try hub() == HubOptions())
        let options = try hub("--app", "counter", "--socket", "/run/s.sock", "--socket-mode", "0660", "--socket-group", "staff",
                              "--allow-uid", "alice,1002", "--max-clients", "9", "--data-dir", "/d", "--fsync", "always",
                              "--idle-timeout", "2.5", "--checkpoint-interval", "0", "--log-level", "notice", "--log-timestamps", "off")
        #expect(options.appName == "counter" && options.socket == "/run/s.sock")
        #expect(options.socketMode == 0o660 && options.socketGroup == 50 && options.allowedUIDs == [1_001, 1_002])
        #expect(options.maxClients == 9 && options.dataDirectory == "/d" && options.fsyncMode == .always)
        #expect(options.idleTimeout == .milliseconds(2_500) && options.checkpointInterval == .zero)
        #expect(options.logLevel == .notice && options.logTimestamps == false)
        #expect(try hub("--log", "file:/x").dataDirectory == "/x")
        #expect(try hub("--log", "nats://h:4222/S", "--nats-replicas", "3", "--log-unauthenticated").logURL == "nats://h:4222/S")
    }

    @Test("mistakes are values with the message hubd prints")
    func hubErrors() {
        #expect(hubError("--soket", "x") == #"unknown argument "--soket" (did you mean --socket?); see hubd --help"#)
        #expect(hubError("--bogus") == #"unknown argument "--bogus"; see hubd --help"#)
        #expect(hubError("--socket") == "--socket needs a value; see hubd --help")
        #expect(hubError("--max-clients", "0") == #"--max-clients needs a positive integer, got "0""#)
        #expect(hubError("--idle-timeout", "86401") == #"--idle-timeout needs a number of seconds above 0 and at most 86400, got "86401""#)
        #expect(hubError("--socket-group", "wheelz") == #"--socket-group: no group "wheelz" on this system"#)
        #expect(hubError("--allow-uid", "alice,bob") == #"--allow-uid: no user "bob" on this system"#)
        #expect(hubError("--socket-mode", "0444") != nil)
        #expect(hubError("--log", "redis://x") == #"--log is file:DIR or nats://[USER:PASS@]HOST:PORT[,HOST:PORT…]/STREAM, got "redis://x""#)
        #expect(hubError("--data-dir", "/a", "--log", "file:/b") == "--log file:/b and --data-dir /a name two directories; give one")
        #expect(hubError("--fsync", "batch") == "--fsync needs --data-dir (an in-memory hub has no journal)")
        #expect(hubError("--nats-replicas", "3") == "--nats-replicas needs --log nats://…")
        #expect(hubError("--log", "nats://h/S", "--log-key-file", "k", "--log-unauthenticated") == "--log-key-file and --log-unauthenticated: give one")
        #expect(hubError("--log", "nats://h/S", "--retain-actions", "5")?.hasPrefix("--retain-actions must be at least") == true)
        #expect(hubError("--repair") == "--repair needs --check-data DIR")
        #expect(hubError("--at", "3") == "--at needs --export DIR")
        #expect(hubError("--log-level", "loud") == #"--log-level is one of trace, debug, info, notice, warning, error, critical, got "loud""#)
    }

    @Test("--help, --version and --list-apps end the reading: what follows is not read")
    func requestsEndParsing() throws {
        #expect(try hub("--help", "--bogus").request == .help)
        #expect(try hub("-h").request == .help)
        #expect(try hub("--version", "--max-clients", "0").request == .version)
        #expect(try hub("--list-apps").request == .listApps)
        #expect(hubError("--bogus", "--help") != nil, "a mistake before --help is still one")
    }

    @Test("the help's OPTIONS section is made from the table: every flag once, every flag of the synopsis in the table")
    func hubHelpFromTable() {
        let usage = HubOptions.usage(program: "hubd", apps: ["counter", "todos", "json"])
        let table = HubOptions.table(appList: "", accounts: accounts)
        for flag in table.flags {
            #expect(!flag.help.isEmpty, "\(flag.names) has an entry in OPTIONS")
            for (label, _) in flag.help { #expect(usage.contains("\n  \(label)"), "\(label)") }
        }
        let synopsis = usage.components(separatedBy: "OPTIONS:")[0]
        let mentioned = Set(synopsis.split(whereSeparator: { " [|]\n".contains($0) }).map(String.init).filter { $0.hasPrefix("--") })
        #expect(mentioned.subtracting(table.names).isEmpty, "flags in the synopsis but not in the table: \(mentioned.subtracting(table.names))")
        #expect(Set(table.names).count == table.names.count, "no flag twice")
        #expect(usage.contains("The app (reducer) to run: counter (default), todos, or json."))
        #expect(usage.contains("(default \(HubConfiguration.Defaults.dedupWindow))"))
        // Long flags put their description on the next line, at the same column.
        #expect(usage.contains("  --nats-credentials FILE\n" + String(repeating: " ", count: 25) + "With --log nats://"))
    }

    private func replica(_ arguments: String...) throws(UsageError) -> ReplicaOptions {
        try ReplicaOptions.parse(["replica-cli"] + arguments)
    }

    @Test("replica-cli: flags anywhere, the first word is the command, -- ends the flags; dispatch, top and history keep their own flags")
    func replicaParsing() throws {
        let options = try replica("--json", "watch", "--type", "todo/*", "--origin", "3,alice,07", "--name", "n")
        #expect(options.command == "watch" && options.json && options.name == "n")
        #expect(options.filter.typeGlob == "todo/*")
        #expect(options.filter.origins == [3, 7] && options.filter.originNames == [JSONKey("alice")])
        let dispatch = try replica("dispatch", "--", "--not-a-flag", "{}")
        #expect(dispatch.command == "dispatch" && dispatch.arguments == ["--not-a-flag", "{}"])
        #expect(try replica("history", "--from", "3", "--json").arguments == ["--from", "3"])
        #expect(try replica("--hub-uid", "alice", "status").hubUID == "alice")
        #expect(try replica("status", "--help", "--bogus").request == .help)
        #expect(try replica("state", "--at", "12").at == 12)
    }

    @Test("replica-cli mistakes are values with the message it prints")
    func replicaErrors() {
        func error(_ arguments: String...) -> String? {
            do throws(UsageError) {
                _ = try ReplicaOptions.parse(["replica-cli"] + arguments)
                return nil
            } catch {
                return error.message
            }
        }
        #expect(error("status", "--jsn") == #"unknown option "--jsn" (did you mean --json?); see replica-cli --help"#)
        #expect(error("--socket") == "--socket needs a value; see replica-cli --help")
        #expect(error("watch", "--origin", "3,,4")?.hasPrefix("--origin needs replica ids or names") == true)
        #expect(error("state", "--at", "x") == "--at needs a seq (a whole number)")
    }

    @Test("replica-cli's help lists every flag that has an entry, made from the table")
    func replicaHelpFromTable() {
        let usage = ReplicaOptions.usage(program: "replica-cli", apps: [JSONApp()])
        #expect(usage.contains("  --app NAME             The app to run (json). Default: the hub's app,"))
        for flag in ReplicaOptions.table(appNames: "").flags {
            for (label, _) in flag.help { #expect(usage.contains("\n  \(label)"), "\(label)") }
        }
    }

    @Test("--app NAME is the newest version; NAME@VERSION one of the chain exactly; anything else says what there is")
    func appChoice() throws {
        let apps: [any SyncApp] = [CounterApp(), TodosApp(), JSONApp()]
        #expect(try type(of: AppChoice.find("todos", among: apps).get()).fingerprint == "todos@2")
        #expect(try type(of: AppChoice.find("todos@1", among: apps).get()).fingerprint == "todos@1")
        #expect(AppChoice.name("todos@1") == "todos" && AppChoice.name("todos") == "todos")
        func message(_ text: String) -> String? {
            guard case .failure(let error) = AppChoice.find(text, among: apps) else { return nil }
            return error.message
        }
        #expect(message("todos@3") == #"todos has no version "3" here: this executable carries todos@1, todos@2"#)
        #expect(message("nope@1") == #"unknown app "nope@1"; the apps are counter, todos, json"#)
        #expect(message("nats://u:pw@h")?.contains("pw") == false)
    }

    @Test("--list-apps shows every version an app carries, newest first, and what each upgrades from")
    func listAppsChain() throws {
        #expect(HubCommand.appLines([CounterApp()]) == ["counter   counter@1   seed 000's counter: count, increment/decrement toggle, limit text, step toward the limit"])
        #expect(HubCommand.appLines([CounterV2()]) == [
            "counter   counter@2   the counter app (upgrades from counter@1)",
            "counter   counter@1   seed 000's counter: count, increment/decrement toggle, limit text, step toward the limit",
        ])
        let apps: [any SyncApp] = [CounterV2()]
        #expect(try type(of: AppChoice.find("counter@1", among: apps).get()).fingerprint == "counter@1")
        #expect(try type(of: AppChoice.find("counter", among: apps).get()).fingerprint == "counter@2")
    }
}

/// A second version of the counter, for the version chain's command-line tests.
private struct CounterV2: SyncApp, UpgradingApp {
    typealias State = CounterApp.State
    typealias Action = CounterApp.Action
    static let name = "counter"
    static let version = "2"
    var previous: CounterApp { CounterApp() }
    var initialState: State { CounterApp().initialState }
    func migrate(_ old: State) throws(MigrationError) -> State { old }
    func reduce(into state: inout State, action: Action) { CounterApp().reduce(into: &state, action: action) }
    func decodeAction(_ json: JSON) throws(AppCodingError) -> Action { try CounterApp().decodeAction(json) }
    func encodeAction(_ action: Action) -> JSON { CounterApp().encodeAction(action) }
    func encodeState(_ state: State) -> JSON { CounterApp().encodeState(state) }
    func decodeState(_ json: JSON) throws(AppCodingError) -> State { try CounterApp().decodeState(json) }
    func nothingSent(by line: String, state: State) -> String { CounterApp().nothingSent(by: line, state: state) }
}
