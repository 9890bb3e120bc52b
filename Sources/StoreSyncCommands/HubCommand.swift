#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import StoreHub
import SyncCore
import SyncPOSIX

/// The whole of `hubd` as a library entry point, for a daemon of your own app:
///
/// ```swift
/// @main struct MyHub {
///     static func main() { HubCommand.main(app: MyApp()) }
/// }
/// ```
///
/// Every `hubd` flag (socket, limits, data directory, fsync, snapshots, resume window,
/// checkpoints, sessions, idle timeout, determinism check, `--check-data`), the same signals,
/// logging and exit statuses (0 after a clean stop, 1 when the hub cannot start, 2 for bad
/// usage). `--help` and messages use the executable's name.
public enum HubCommand {
    /// The executable's name, for usage and messages.
    static var program: String { executableName(CommandLine.arguments.first, otherwise: "hubd") }

    /// Runs a hub for one app, configured by the command line; never returns.
    ///
    /// `@inlinable`, so the app's hub engine is compiled for it in the caller's module and
    /// registered (``HubSpecialization``): the hub decodes, validates and applies every action
    /// with no generic look-ups.
    ///
    /// - Parameter app: The app.
    @inlinable
    public static func main<App: SyncApp>(app: App) -> Never {
        HubSpecialization.register(App.self)
        main(apps: [app])
    }

    /// Runs a hub for one of several apps (chosen with `--app`, the first by default),
    /// configured by the command line; never returns.
    ///
    /// The apps come as `any SyncApp`, so the hub's engine runs as generic code unless each
    /// app was registered with ``HubSpecialization/register(_:)`` where its type is written
    /// (as `hubd` does; ``main(app:)`` does it for its app).
    ///
    /// - Parameters:
    ///   - apps: The apps this executable serves (at least one).
    ///   - commandLine: The arguments, the executable first (default: this process's).
    public static func main(apps: [any SyncApp], commandLine: [String] = CommandLine.arguments) -> Never {
        let program = executableName(commandLine.first, otherwise: Self.program)
        guard let first = apps.first else { hubFail("no app to serve", status: 1) }
        let defaultApp = type(of: first).name
        let appNames = apps.map { type(of: $0).name }
        let options: HubOptions
        do throws(UsageError) {
            options = try HubOptions.parse(commandLine)
        } catch {
            hubFail(error.message, status: 2)
        }
        switch options.request {
        case .serve:
            break
        case .help:
            print(HubOptions.usage(program: program, apps: appNames))
            exit(0)
        case .version:
            print("\(program) (StoreSync \(StoreSyncVersion.current))")
            exit(0)
        case .listApps:
            for line in appLines(apps) { print(line) }
            exit(0)
        }
        let appName = options.appName ?? defaultApp
        if let export = options.export { exportData(export, at: options.exportAt, apps: apps, program: program) }
        let sharedLog = options.logURL.map { sharedLogConfiguration($0, options: options, program: program) }
        if let checkData = options.checkData { checkDataDirectory(checkData, repair: options.repair, apps: apps, program: program) }
        let app: any SyncApp
        switch AppChoice.find(appName, among: apps) {
        case .success(let chosen): app = chosen
        case .failure(let error): hubFail("\(error.message) (\(program) --list-apps)", status: 2)
        }
        let logs = LogWriter(prefix: "\(program): ")
        var configuration = hubConfiguration(options, appName: AppChoice.name(appName), sharedLog: sharedLog, program: program, logs: logs)
        // `--app NAME` carries every version of NAME: on a history of an older one the hub serves
        // that version and can upgrade it. `--app NAME@VERSION` runs that version alone.
        if !appName.contains("@") { configuration.versions = app.versions }
        configuration.upgradeAtStart = options.upgrade
        serve(app, configuration: configuration, logs: logs)
    }

    /// `--list-apps`: each version the executable carries, newest first (`--app NAME@VERSION`
    /// runs one), with the version it upgrades from.
    ///
    /// - Parameter apps: The apps, each its newest version.
    /// - Returns: One line per version.
    static func appLines(_ apps: [any SyncApp]) -> [String] {
        var lines: [String] = []
        for app in apps {
            let chain = app.versions
            for fingerprint in chain.fingerprints.reversed() {
                guard let version = chain.app(fingerprint) else { continue }
                let kind = type(of: version)
                let replaces = chain.previous(of: fingerprint).map { " (upgrades from \($0))" } ?? ""
                lines.append("\(hubPad(kind.name, 9)) \(hubPad(kind.fingerprint, 11)) \(kind.summary)\(replaces)")
            }
        }
        return lines
    }

    /// `--export DIR [--at SEQ]`: prints what a data directory holds (or the state at SEQ) and exits.
    private static func exportData(_ export: String, at exportAt: UInt64?, apps: [any SyncApp], program: String) -> Never {
        if let exportAt {
            let app = appOf(dataDirectory: export, apps: apps, program: program)
            func printState<App: SyncApp>(_ app: App) -> Never {
                do throws(StorageError) {
                    Console.out(try DataDirectory.state(export, app: app, at: exportAt).canonicalString)
                    exit(0)
                } catch {
                    hubFail(error.message, status: 1)
                }
            }
            printState(app)
        }
        do throws(StorageError) {
            try DataDirectory.export(export) { line in Console.out(line.canonicalString) }
            exit(0)
        } catch {
            hubFail(error.message, status: 1)
        }
    }

    /// `--check-data DIR [--repair]`: verifies a data directory offline and exits (0: usable, 1: not).
    private static func checkDataDirectory(_ directory: String, repair: Bool, apps: [any SyncApp], program: String) -> Never {
        func check<App: SyncApp>(_ app: App) -> Never {
            let report = DataDirectory.check(directory, app: app, repair: repair)
            for line in report.lines { print(line) }
            exit(report.healthy ? 0 : 1)
        }
        check(appOf(dataDirectory: directory, apps: apps, program: program))
    }

    /// The app that wrote a data directory (exit 1 when it is not one, or this program lacks the app).
    private static func appOf(dataDirectory directory: String, apps: [any SyncApp], program: String) -> any SyncApp {
        guard let fingerprint = DataDirectory.fingerprint(of: directory) else {
            hubFail("\(directory) is not a StoreSync data directory (no readable storesync.json)", status: 1)
        }
        // The newest version of the app whose chain has the directory's version (it reads every
        // version of the history, across its upgrades).
        guard let app = apps.first(where: { $0.versions.fingerprints.contains { JSONKey($0) == JSONKey(fingerprint) } }) else {
            hubFail("\(directory) was written by app \(fingerprint), which this \(program) does not have", status: 1)
        }
        return app
    }

    /// `--log nats://…` with its credentials and key (exit 2 when one is missing or unusable).
    private static func sharedLogConfiguration(_ logURL: String, options: HubOptions, program: String) -> SharedLogConfiguration {
        var configuration: SharedLogConfiguration
        switch SharedLogConfiguration.parse(logURL) {
        case .success(let parsed): configuration = parsed
        case .failure(let error): hubFail("--log: \(error.message)", status: 2)
        }
        if let natsReplicas = options.natsReplicas { configuration.replicas = natsReplicas }
        configuration.retainActions = options.retainActions.map { UInt64($0) }
        switch SharedLogCredentials.resolve(into: &configuration, file: options.natsCredentials,
                                            environment: environmentValues(["CREDENTIALS_DIRECTORY", "STORESYNC_NATS_USER", "STORESYNC_NATS_PASSWORD", "STORESYNC_NATS_TOKEN"])) {
        case .success(let source):
            if source != nil {
                // From here on the process holds a secret: no core dump may carry it.
                SecretFile.keepOutOfCoreDumps()
            }
            if source == "the --log URL" {
                Console.error("\(program): warning: the NATS credentials are in the --log URL, where every local user can read them (ps); put them in a file given with --nats-credentials FILE (docs/OPERATIONS.md §20, \"Credentials\")")
            }
        case .failure(let error):
            hubFail("--nats-credentials: \(error.message)", status: 2)
        }
        let credentialsDirectory = environmentValues(["CREDENTIALS_DIRECTORY"])["CREDENTIALS_DIRECTORY"]
        switch LogKeys.load(file: options.logKeyFile, credentialsDirectory: options.logUnauthenticated ? nil : credentialsDirectory) {
        case .success(let keys?):
            configuration.keys = keys
            SecretFile.keepOutOfCoreDumps()
        case .success(nil):
            guard options.logUnauthenticated else {
                hubFail("--log \(configuration.redacted) needs the key that authenticates the stream's records, shared by every hub of the stream: make one with `head -c 32 /dev/urandom | base64 > /etc/storesync/log-key; chmod 600 /etc/storesync/log-key`, copy it to every hub's host, and give it with --log-key-file FILE (or LoadCredential=storesync-log-key:FILE under systemd). On a network where every NATS user is trusted, --log-unauthenticated runs without one (docs/OPERATIONS.md §20)", status: 2)
            }
            configuration.keys = .unauthenticated
        case .failure(let error):
            hubFail("--log-key-file: \(error.message)", status: 2)
        }
        return configuration
    }

    /// The hub's configuration from the options, with its logger writing `PROGRAM: …` lines.
    private static func hubConfiguration(_ options: HubOptions, appName: String, sharedLog: SharedLogConfiguration?,
                                         program: String, logs: LogWriter) -> HubConfiguration {
        let stamped = options.logTimestamps ?? LogTimestamp.standardErrorIsTerminal
        var configuration = HubConfiguration(
            socketPath: SocketPath.resolve(explicit: options.socket, app: appName),
            maxFrameBytes: options.maxFrameBytes,
            maxQueuedBytesPerReplica: options.maxQueueBytes,
            // The library names no program: each line is `PROGRAM: [warning: |error: ]MESSAGE`.
            logger: HubLogger(logLevel: options.logLevel) { level, message, metadata in
                let line = HubLogger.line(program: program, level: level, message: message, metadata: metadata)
                logs.write(stamped ? LogTimestamp.now() + " " + line : line)
            }
        )
        configuration.dataDirectory = options.dataDirectory
        configuration.sharedLog = sharedLog
        if let fsyncMode = options.fsyncMode { configuration.fsync = fsyncMode }
        if let snapshotEvery = options.snapshotEvery { configuration.snapshotEvery = snapshotEvery }
        if let dedupWindow = options.dedupWindow { configuration.dedupWindow = dedupWindow }
        if let backlogBytes = options.backlogBytes { configuration.backlogBytes = backlogBytes }
        if let checkpointEvery = options.checkpointEvery { configuration.checkpointEvery = checkpointEvery }
        if let checkpointInterval = options.checkpointInterval { configuration.checkpointInterval = checkpointInterval }
        if let idleTimeout = options.idleTimeout { configuration.idleTimeout = idleTimeout }
        if let welcomeTimeout = options.welcomeTimeout { configuration.welcomeTimeout = welcomeTimeout }
        if let socketMode = options.socketMode { configuration.socketMode = socketMode }
        configuration.socketGroup = options.socketGroup
        configuration.allowedUIDs = options.allowedUIDs
        configuration.maxClients = options.maxClients
        configuration.checkDeterminism = options.checkDeterminism
        return configuration
    }
}

/// The flag closest to a mistyped one (at most two edits away), for "did you mean".
///
/// - Parameters:
///   - typed: What was typed.
///   - flags: The known flags.
/// - Returns: The closest flag, or `nil` when none is close.
func closestFlag(_ typed: String, among flags: [String]) -> String? {
    guard typed.hasPrefix("-") else { return nil }
    let scored = flags.map { ($0, editDistance(typed, $0)) }.min { $0.1 < $1.1 }
    guard let (flag, distance) = scored, distance <= max(2, typed.count / 4) else { return nil }
    return flag
}

/// The Levenshtein distance between two strings (by characters).
func editDistance(_ a: String, _ b: String) -> Int {
    let a = Array(a), b = Array(b)
    guard !a.isEmpty else { return b.count }
    guard !b.isEmpty else { return a.count }
    var previous = Array(0...b.count)
    var current = [Int](repeating: 0, count: b.count + 1)
    for i in 1...a.count {
        current[0] = i
        for j in 1...b.count {
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
        }
        swap(&previous, &current)
    }
    return previous[b.count]
}

fileprivate func hubPad(_ text: String, _ width: Int) -> String {
    text + String(repeating: " ", count: max(0, width - text.count))
}

fileprivate func hubFail(_ message: String, status: Int32) -> Never {
    Console.error("\(HubCommand.program): \(message)")
    exit(status)
}

fileprivate func serve<App: SyncApp>(_ app: App, configuration: HubConfiguration, logs: LogWriter) -> Never {
    var configuration = configuration
    if let shared = configuration.sharedLog, !shared.keys.isAuthenticated {
        logs.write("\(HubCommand.program): warning: the records of the shared log \(shared.redacted) are not authenticated (--log-unauthenticated): anyone who can publish to storesync.\(shared.stream).actions can forge actions; give every hub a key with --log-key-file (docs/OPERATIONS.md §20)")
    }
    // The library never changes SIGPIPE (its socket writes use MSG_NOSIGNAL / SO_NOSIGPIPE);
    // The hub, a daemon, ignores it so that a closed stderr pipe (its log) cannot kill it
    // before it has flushed its replicas and removed its socket.
    UnixSocket.ignoreBrokenPipes()
    func stop(_ message: String, status: Int32) -> Never {
        logs.write("\(HubCommand.program): \(message)")
        logs.flush()
        exit(status)
    }
    // Signals first: a SIGTERM that arrives as soon as the socket exists must still mean
    // "flush, remove the socket, exit 0".
    let signals: Int32
    do throws(SystemError) {
        signals = try SignalPipe.install()
    } catch {
        stop(error.message, status: 1)
    }
    let limit = DescriptorLimit.raise()
    configuration.logger.info(limit.after > limit.before
        ? "open-files limit raised from \(limit.before) to \(limit.after) (the hard limit is \(limit.hard))"
        : "open-files limit \(limit.after) (the hard limit is \(limit.hard))")
    if let passed = Systemd.listenDescriptors() {
        guard passed.count == 1, let fd = passed.first else {
            stop("the service manager passed \(passed.count) sockets (LISTEN_FDS); the hub serves exactly one: give the .socket unit one ListenStream=", status: 2)
        }
        configuration.listeningDescriptor = fd
    }
    configuration.stopDescriptor = signals
    let hub: Hub<App>
    do throws(HubError) {
        hub = try Hub(app: app, configuration: configuration)
    } catch {
        // SIGTERM while starting (waiting for a shared log): a clean stop, nothing served.
        if UnixSocket.waitUntil(signals, timeoutMilliseconds: 0) {
            stop("stopped before serving (\(error.message))", status: 0)
        }
        stop(error.message, status: error.kind == .dataUnusable ? 4 : 1)
    }
    do throws(HubError) {
        try hub.run(stopOn: signals)
    } catch {
        stop(error.message, status: error.kind == .logBroken ? 3 : 1)
    }
    logs.flush()
    exit(0)
}

/// The last path component of an executable's path (`/usr/local/bin/hubd` → `hubd`), for
/// usage and messages.
///
/// - Parameters:
///   - path: `argv[0]`, if any.
///   - fallback: The name when there is none.
/// - Returns: The name.
func executableName(_ path: String?, otherwise fallback: String) -> String {
    guard let path, let last = path.split(separator: "/").last else { return fallback }
    return String(last)
}

/// The values of the named environment variables that are set.
///
/// - Parameter names: The variables.
/// - Returns: Name to value, for the ones that are set.
private func environmentValues(_ names: [String]) -> [String: String] {
    var values: [String: String] = [:]
    for name in names {
        if let value = getenv(name) { values[name] = String(cString: value) }
    }
    return values
}
