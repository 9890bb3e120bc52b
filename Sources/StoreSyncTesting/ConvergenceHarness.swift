#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import StoreReplica
import SyncCore
import SyncLocks
import Synchronization

/// Runs your app the way production does — a hub process and several replica processes on a
/// temporary socket — dispatches randomized concurrent actions, injects faults, and checks
/// that every process ends in the same state.
///
/// The processes are your own executables: a daemon built on ``StoreSyncCommands``'s
/// `HubCommand` and a CLI built on `ReplicaCommand` (or `hubd` and `replica-cli` for the
/// built-in apps). Each replica is the CLI's `attach --json`, fed one action per line.
///
/// ```swift
/// @Test func tallyConverges() async throws {
///     let harness = ConvergenceHarness(app: Tally(), hub: try builtExecutable("tally-hub"), cli: try builtExecutable("tally-cli"))
///     try await harness.run { random, replica in
///         .add(name: ["tea", "coffee"][Int(random.next() % 2)], amount: Int(random.next() % 5))
///     }
/// }
/// ```
///
/// After the run it asserts: every replica's digest equals the hub's; every replica saw each
/// seq exactly once and in order (across reconnects); every dispatch of a replica that was not
/// killed was sequenced exactly once or refused by the reducer (a refusal is an outcome: a
/// generator that cannot see the state may well produce actions the reducer refuses; they are
/// counted in ``Report/refused``); no replica ever saw a checkpoint disagree with its state.
///
/// **Several hubs.** With `hubs` > 1 and a `sharedLog` (`nats://HOST:PORT/STREAM`), that many
/// hubs share one order: replica `i` attaches to hub `i % hubs` and names the others as
/// alternatives (`--socket A,B,C`); ``ConvergenceFaults/hubRestart`` then kills hub 0 with
/// `SIGKILL` mid-run, its replicas move to another hub and resume there, and hub 0 is started
/// again later and catches up. Every hub's digest must equal every replica's at the end. On failure the error names the seed (pass it as `seed:`
/// to replay the same run) and, for a divergence, the first seq after which a replay of the
/// sequenced actions differs. Every process is killed by PID and the temporary directory
/// removed, also when the run fails.
public struct ConvergenceHarness<App: SyncApp>: Sendable {
    /// Faults to inject while actions flow.
    public typealias Faults = ConvergenceFaults

    /// What a successful run saw.
    public struct Report: Sendable, CustomStringConvertible {
        /// The seed (pass it back to replay the run).
        public let seed: UInt64
        /// The hub's final seq.
        public let seq: UInt64
        /// The hub's final digest, which every replica matched.
        public let digest: String
        /// Dispatches the hub refused with `rejected` or `bad-action` (the reducer said no),
        /// over every replica.
        public let refused: Int
        /// One line.
        public var description: String { "seed \(seed): \(seq) actions, \(refused) refused by the reducer, every digest \(digest)" }
    }

    /// Why a run failed.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// The seed, to replay the run.
        public let seed: UInt64
        /// What went wrong.
        public let message: String
        /// `seed S: message`.
        public var description: String { "convergence run with seed \(seed) failed: \(message)" }
    }

    /// The app (its reducer replays the sequenced actions to find a divergence).
    public let app: App
    /// The daemon executable.
    public let hub: URL
    /// The CLI executable.
    public let cli: URL
    /// Replica processes at the start.
    public let replicas: Int
    /// Actions each replica dispatches.
    public let actionsPerReplica: Int
    /// Faults to inject.
    public let faults: Faults
    /// The seed of the run.
    public let seed: UInt64
    /// Extra daemon arguments (the harness sets `--socket` and `--data-dir`, and `--log` with a
    /// shared log).
    public let hubArguments: [String]
    /// How many hubs run (more than one needs ``sharedLog``).
    public let hubs: Int
    /// The shared log every hub uses (`nats://HOST:PORT/STREAM`), or `nil` for one hub with a
    /// data directory.
    public let sharedLog: String?

    /// Creates a harness.
    ///
    /// - Parameters:
    ///   - app: The app.
    ///   - hub: The daemon executable (built on `HubCommand`).
    ///   - cli: The CLI executable (built on `ReplicaCommand`).
    ///   - replicas: Replica processes at the start (default 3).
    ///   - actionsPerReplica: Actions each dispatches (default 40).
    ///   - faults: Faults to inject (default all).
    ///   - seed: The seed; `nil` picks one (printed on failure).
    ///   - hubArguments: Extra daemon arguments.
    ///   - hubs: How many hubs (default 1; more need `sharedLog`).
    ///   - sharedLog: The shared log (`nats://HOST:PORT/STREAM`) the hubs use, if any.
    public init(app: App, hub: URL, cli: URL, replicas: Int = 3, actionsPerReplica: Int = 40, faults: Faults = .all,
                seed: UInt64? = nil, hubArguments: [String] = [], hubs: Int = 1, sharedLog: String? = nil) {
        self.app = app
        self.hub = hub
        self.cli = cli
        self.replicas = max(1, replicas)
        self.actionsPerReplica = max(1, actionsPerReplica)
        self.faults = faults
        self.seed = seed ?? UInt64.random(in: 0...UInt64.max)
        self.hubArguments = hubArguments
        self.hubs = max(1, hubs)
        self.sharedLog = sharedLog
    }

    /// Runs the processes, dispatches `generator`'s actions from every replica, injects the
    /// faults, and checks convergence.
    ///
    /// - Parameter generator: Makes the next action of replica `index` from the seeded generator.
    /// - Returns: The report.
    /// - Throws: ``Failure`` (with the seed) when anything does not converge or a process fails.
    @discardableResult
    public func run(_ generator: @escaping @Sendable (inout SeededGenerator, Int) -> App.Action) async throws -> Report {
        if hubs > 1, sharedLog == nil {
            throw Failure(seed: seed, message: "\(hubs) hubs need a shared log (sharedLog: \"nats://HOST:PORT/STREAM\"); one hub with a data directory needs hubs: 1")
        }
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("storesync-convergence-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let run = HarnessRun(harness: self, directory: directory)
        defer { run.tearDown() }
        do {
            return try await run.execute(generator)
        } catch let failure as Failure {
            throw failure
        } catch {
            throw Failure(seed: seed, message: String(describing: error))
        }
    }
}

/// Faults a ``ConvergenceHarness`` injects while actions flow.
public struct ConvergenceFaults: OptionSet, Sendable {
    /// The raw value.
    public let rawValue: Int
    /// Creates a set.
    ///
    /// - Parameter rawValue: The bits.
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// `SIGKILL` one replica midway (its in-flight dispatch may or may not be applied).
    public static let killReplica = ConvergenceFaults(rawValue: 1)
    /// Start one more replica midway: it must hydrate and converge.
    public static let lateJoiner = ConvergenceFaults(rawValue: 2)
    /// `SIGSTOP` one replica for a while, then `SIGCONT`: it falls behind and catches up.
    public static let slowConsumer = ConvergenceFaults(rawValue: 4)
    /// `SIGKILL` the hub midway and start it again on the same data directory: replicas
    /// come back by themselves, nothing acknowledged is lost. With several hubs: hub 0 is
    /// killed, its replicas move to another hub, and it is started again later.
    public static let hubRestart = ConvergenceFaults(rawValue: 8)
    /// Every fault.
    public static let all: ConvergenceFaults = [.killReplica, .lateJoiner, .slowConsumer, .hubRestart]
}


/// A small, fast, seedable random generator (SplitMix64), so a run can be replayed.
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// Creates a generator.
    ///
    /// - Parameter seed: The seed.
    public init(seed: UInt64) { state = seed }

    /// The next 64 random bits.
    ///
    /// - Returns: The bits.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// One run's processes and bookkeeping.
private final class HarnessRun<App: SyncApp>: Sendable {
    let harness: ConvergenceHarness<App>
    let directory: URL
    /// Each hub's socket and data directory.
    let sockets: [String]
    let data: [String]
    /// Every process started, for the teardown (process ids: `Process` is not `Sendable`).
    private let pids = Locked<[Int32]>([])

    init(harness: ConvergenceHarness<App>, directory: URL) {
        self.harness = harness
        self.directory = directory
        if harness.hubs == 1 {
            sockets = [directory.appendingPathComponent("hub.sock").path]
            data = [directory.appendingPathComponent("data").path]
        } else {
            sockets = (0..<harness.hubs).map { directory.appendingPathComponent("hub\($0).sock").path }
            data = (0..<harness.hubs).map { directory.appendingPathComponent("data\($0)").path }
        }
    }

    /// The `--socket` of replica `index`: its hub first, then the others in turn.
    func replicaSockets(_ index: Int) -> String {
        let first = index % sockets.count
        return (0..<sockets.count).map { sockets[(first + $0) % sockets.count] }.joined(separator: ",")
    }

    func fail(_ message: String) -> ConvergenceHarness<App>.Failure {
        .init(seed: harness.seed, message: message + hubLogTails())
    }

    /// The last lines each hub logged, for a failure's message.
    private func hubLogTails() -> String {
        sockets.indices.compactMap { index -> String? in
            guard let data = FileManager.default.contents(atPath: directory.appendingPathComponent("hub\(index).log").path) else { return nil }
            let lines = String(decoding: data, as: UTF8.self).split(separator: "\n").suffix(8)
            // What the hub says of itself now (its log's health, each replica's lag).
            let status = (try? HubConnection.status(at: sockets[index])).map { status in
                "\nhub \(index)'s status: seq \(status.seq), log \(status.log?.canonicalString ?? "-"), replicas \(status.replicas.map { "\($0.replica) lag \($0.lag ?? 0) queued \($0.queuedBytes ?? 0)" })"
            } ?? "\nhub \(index) does not answer status"
            // Asked again: a lag the first question cleared is a hub that slept on work it had
            // (its loop not woken); the pause is part of the diagnosis, not a wait for a condition.
            usleep(500_000)
            let again = (try? HubConnection.status(at: sockets[index])).map { status in
                "; 0.5 s later: seq \(status.seq), replicas \(status.replicas.map { "\($0.replica) lag \($0.lag ?? 0)" })"
            } ?? "; 0.5 s later: no answer"
            return "\nhub \(index)'s last lines:\n  " + lines.joined(separator: "\n  ") + status + again
        }.joined()
    }

    /// Kills every process by PID and removes the directory.
    func tearDown() {
        for pid in pids.withLock({ $0 }) {
            kill(pid, SIGCONT)
            kill(pid, SIGKILL)
            var status: Int32 = 0
            _ = waitpid(pid, &status, 0)
        }
        try? FileManager.default.removeItem(at: directory)
    }

    private func track(_ process: Process) { pids.withLock { $0.append(process.processIdentifier) } }

    /// The run's shared-log key file (made once, readable by its owner only).
    private func sharedKeyFile() throws -> String {
        let path = directory.appendingPathComponent("log-key").path
        if !FileManager.default.fileExists(atPath: path) {
            let key = (0..<48).map { _ in UInt8.random(in: UInt8(ascii: "a")...UInt8(ascii: "z")) }
            guard FileManager.default.createFile(atPath: path, contents: Data(key + [10]), attributes: [.posixPermissions: 0o600]) else {
                throw fail("cannot write the shared log's key file \(path)")
            }
        }
        return path
    }

    func startHub(_ index: Int = 0) async throws -> Process {
        let process = Process()
        process.executableURL = harness.hub
        var arguments = ["--socket", sockets[index], "--data-dir", data[index]]
        if let log = harness.sharedLog {
            // The hubs of one run share a key of their own (a new stream per run), unless the
            // test gave a key file or --log-unauthenticated itself.
            arguments += ["--log", log]
            if !harness.hubArguments.contains("--log-key-file"), !harness.hubArguments.contains("--log-unauthenticated") {
                arguments += ["--log-key-file", try sharedKeyFile()]
            }
        }
        process.arguments = arguments + harness.hubArguments
        // Its log, appended across restarts, for a failure's message (the directory goes at the end).
        let logPath = directory.appendingPathComponent("hub\(index).log").path
        if !FileManager.default.fileExists(atPath: logPath) { _ = FileManager.default.createFile(atPath: logPath, contents: nil) }
        let log = FileHandle(forWritingAtPath: logPath)
        _ = try? log?.seekToEnd()
        process.standardError = log ?? FileHandle.nullDevice
        defer { try? log?.close() }
        try process.run()
        track(process)
        let deadline = ContinuousClock.now + .seconds(30)
        while (try? HubConnection.status(at: sockets[index])) == nil {
            guard process.isRunning, ContinuousClock.now < deadline else {
                throw fail("the hub \(harness.hub.lastPathComponent) did not start on \(sockets[index])")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        return process
    }

    /// Every hub's status once all have applied the same seq (the newest any has), or a failure.
    func settledStatuses() async throws -> HubStatus {
        let deadline = ContinuousClock.now + .seconds(60)
        while true {
            let statuses = sockets.compactMap { try? HubConnection.status(at: $0) }
            if statuses.count == sockets.count, let first = statuses.first,
               statuses.allSatisfy({ $0.seq == first.seq }) {
                guard statuses.allSatisfy({ $0.digest == first.digest }) else {
                    throw fail("the hubs applied seq \(first.seq) each but their digests differ: \(statuses.map(\.digest))")
                }
                return first
            }
            guard ContinuousClock.now < deadline else {
                throw fail("the hubs did not settle on one seq within 60 s: \(statuses.map(\.seq))")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    func startReplica(_ index: Int) throws -> ReplicaProcess {
        let replica = try ReplicaProcess(cli: harness.cli, socket: replicaSockets(index), name: "harness-\(index)")
        track(replica.process)
        return replica
    }

    func execute(_ generator: @escaping @Sendable (inout SeededGenerator, Int) -> App.Action) async throws
        -> ConvergenceHarness<App>.Report {
        let app = harness.app
        var random = SeededGenerator(seed: harness.seed)
        var hubs: [Process] = []
        for index in sockets.indices { hubs.append(try await startHub(index)) }
        var replicas = try (0..<harness.replicas).map { try startReplica($0) }
        for replica in replicas { try await replica.waitAttached(fail) }
        let faults = harness.faults
        let count = harness.actionsPerReplica
        // Each replica's lines, chosen up front from the seed (the run is replayable).
        var lines: [[String]] = []
        for index in 0..<replicas.count {
            var mine = SeededGenerator(seed: random.next())
            lines.append((0..<count).map { _ in app.encodeAction(generator(&mine, index)).canonicalString })
        }
        let killed = faults.contains(.killReplica) && replicas.count > 1 ? replicas.count - 1 : nil
        let half = count / 2
        // First half from everyone, concurrently (the pipes hold them; each CLI sends one at a time).
        for (index, replica) in replicas.enumerated() { replica.send(lines[index][..<half]) }
        try await waitForLines(replicas, sent: half)
        if let killed {
            kill(replicas[killed].process.processIdentifier, SIGKILL)
            replicas[killed].process.waitUntilExit()
        }
        if faults.contains(.slowConsumer) { kill(replicas[0].process.processIdentifier, SIGSTOP) }
        if faults.contains(.hubRestart) {
            kill(hubs[0].processIdentifier, SIGKILL)
            hubs[0].waitUntilExit()
            // One hub: start it again at once. Several: its replicas move to another hub
            // while the second half flows, and it comes back later.
            if sockets.count == 1 { hubs[0] = try await startHub(0) }
        }
        for (index, replica) in replicas.enumerated() where index != killed {
            replica.send(lines[index][half...])
        }
        if faults.contains(.hubRestart), sockets.count > 1 {
            try await Task.sleep(for: .milliseconds(Int(random.next() % 300) + 200))
            hubs[0] = try await startHub(0)
        }
        if faults.contains(.slowConsumer) {
            try await Task.sleep(for: .milliseconds(Int(random.next() % 300) + 100))
            kill(replicas[0].process.processIdentifier, SIGCONT)
        }
        if faults.contains(.lateJoiner) {
            let late = try startReplica(replicas.count)
            try await late.waitAttached(fail)
            replicas.append(late)
        }
        let survivors = replicas.indices.filter { $0 != killed }
        // Every survivor of the first ones sent all its lines (a late joiner sends none).
        try await waitForLines(survivors.filter { $0 < harness.replicas }.map { replicas[$0] }, sent: count)
        // Settle: every survivor asks for its digest after everything sequenced so far.
        for index in survivors { replicas[index].send([":digest"]) }
        let status = try await settledStatuses()
        var refusedTotal = 0
        for index in survivors {
            let replica = replicas[index]
            let digest = try await replica.waitDigest(fail)
            let events = replica.events()
            // Every seq once and in order, across reconnects.
            let seqs = events.compactMap(\.seq)
            if let first = seqs.first, seqs != Array(first...(first + UInt64(seqs.count) - 1)) {
                throw fail("replica \(index) saw seqs out of order or twice: \(seqs.prefix(20))…")
            }
            if digest.seq < status.seq {
                // It settled before the last actions of others; ask again.
                replica.send([":digest"])
                let again = try await replica.waitDigest(fail, after: digest.seq)
                guard again.digest == status.digest else {
                    throw fail(divergence(replica: index, digest: again.digest, hub: status.digest, log: events))
                }
            } else if digest.digest != status.digest {
                throw fail(divergence(replica: index, digest: digest.digest, hub: status.digest, log: events))
            }
            if let divergence = replica.divergences.first {
                throw fail("replica \(index) diverged from the hub (a checkpoint disagreed; a deterministic reducer never does): \(divergence)")
            }
            // Exactly once: each line this replica sent was sequenced once (as its own action),
            // or refused by the reducer.
            if index < lines.count {
                let own = events.filter(\.isOwn).count
                let refused = replica.refused
                refusedTotal += refused
                if own + refused != lines[index].count {
                    throw fail("replica \(index) sent \(lines[index].count) actions, \(own) were sequenced as its own and \(refused) refused (each exactly once expected)")
                }
            }
        }
        withExtendedLifetime(hubs) {}
        return .init(seed: harness.seed, seq: status.seq, digest: status.digest, refused: refusedTotal)
    }

    /// Waits until every replica (but `skip`) has seen `sent` of its own actions sequenced.
    private func waitForLines(_ replicas: [ReplicaProcess], sent: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(120)
        for (index, replica) in replicas.enumerated() {
            // An action's outcome: sequenced as its own, or refused by the reducer.
            while replica.events().filter(\.isOwn).count + replica.refused < sent {
                guard ContinuousClock.now < deadline else {
                    throw fail("replica \(index) had \(replica.events().filter(\.isOwn).count) of \(sent) actions sequenced and \(replica.refused) refused after 120 s; \(replica.story)")
                }
                guard replica.process.isRunning else { throw fail("replica \(index) exited: \(replica.story)") }
                try await Task.sleep(for: .milliseconds(10))
            }
        }
    }

    /// Replays the sequenced actions the replica saw, to find where they stop agreeing.
    private func divergence(replica: Int, digest: String, hub: String, log: [ReplicaProcess.Event]) -> String {
        var message = "replica \(replica) ended with digest \(digest), the hub with \(hub)"
        let actions = log.compactMap { event -> App.Action? in try? harness.app.decodeAction(event.action) }
        if let first = log.first?.seq, first == 1, let divergence = DeterminismCheck.check(harness.app, actions: actions) {
            message += "; replaying the sequenced actions, the first divergence is at seq \(divergence.index + 1): \(divergence)"
        }
        return message
    }
}

/// One replica process: the CLI's `attach --json`, its stdin and the events it printed.
private final class ReplicaProcess: @unchecked Sendable {
    // @unchecked: `state` is guarded by `lock`; `process` and `input` are set once in init.
    struct Event {
        var seq: UInt64?
        var origin: Int?
        var action: JSON
        var isOwn: Bool
    }

    private struct State {
        var events: [Event] = []
        var ownIDs: Set<Int> = []
        var digests: [(seq: UInt64, digest: String)] = []
        var attached = false
        var errors: [String] = []
        /// Checkpoints that disagreed with the hub (each healed by re-hydrating, but a
        /// deterministic reducer never diverges).
        var divergences: [String] = []
        /// `rejected` lines whose code says the reducer refused (`rejected`, `bad-action`).
        var refused = 0
        var partial: [UInt8] = []
        /// The latest lines that were not actions (the link's story, digests, errors), for a
        /// failure's message.
        var news: [String] = []
        /// The latest lines of standard error.
        var stderr: [UInt8] = []
    }

    let process = Process()
    private let input = Pipe()
    private let output = Pipe()
    private let errorOutput = Pipe()
    private let lock = NSLock()
    private var state = State()

    init(cli: URL, socket: String, name: String) throws {
        process.executableURL = cli
        process.arguments = ["--socket", socket, "--name", name, "--json", "attach"]
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errorOutput
        errorOutput.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            if data.isEmpty { handle.readabilityHandler = nil }
            guard let self else { return }
            self.lock.withLock {
                self.state.stderr.append(contentsOf: data)
                if self.state.stderr.count > 4096 { self.state.stderr.removeFirst(self.state.stderr.count - 4096) }
            }
        }
        output.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            // End of file: stop being called (an empty read would repeat forever).
            if data.isEmpty { handle.readabilityHandler = nil }
            self?.consume(data)
        }
        try process.run()
    }

    var errors: [String] { lock.withLock { state.errors } }

    /// What to show of this process when a run fails: its latest errors, the latest lines that
    /// were not actions, and the end of its standard error.
    var story: String {
        lock.withLock {
            let stderr = String(decoding: state.stderr, as: UTF8.self).split(separator: "\n").suffix(5)
            return "errors: \(state.errors.suffix(3)); last news: \(state.news.suffix(6)); last action seen: \(state.events.last.map { "seq \($0.seq ?? 0) from \($0.origin ?? -1)" } ?? "none"); stderr: \(Array(stderr))"
        }
    }

    var divergences: [String] { lock.withLock { state.divergences } }

    var refused: Int { lock.withLock { state.refused } }

    func events() -> [Event] { lock.withLock { state.events } }

    func send<S: Sequence>(_ lines: S) where S.Element == String {
        let text = lines.map { $0 + "\n" }.joined()
        try? input.fileHandleForWriting.write(contentsOf: Data(text.utf8))
    }

    private func consume(_ data: Data) {
        lock.withLock {
            state.partial.append(contentsOf: data)
            while let newline = state.partial.firstIndex(of: 0x0A) {
                let line = Array(state.partial[..<newline])
                state.partial.removeSubrange(...newline)
                guard let json = try? JSON(parsing: line) else { continue }
                handle(json)
            }
        }
    }

    /// Called under `lock`.
    private func handle(_ json: JSON) {
        if json["type"] != nil {
            state.news.append(json.canonicalString)
            if state.news.count > 20 { state.news.removeFirst(state.news.count - 20) }
        }
        switch json["type"]?.stringValue {
        case "attached"?:
            state.attached = true
            if let id = json["replica"]?.intValue { state.ownIDs.insert(id) }
        case "link"?:
            if let id = json["replica"]?.intValue { state.ownIDs.insert(id) }
            if json["state"] == "diverged" { state.divergences.append(json.canonicalString) }
        case "digest"?:
            if let seq = json["seq"]?.intValue, let digest = json["digest"]?.stringValue {
                state.digests.append((UInt64(seq), digest))
            }
        case "rejected"?:
            let code = json["error"]?["code"]?.stringValue
            if code == "rejected" || code == "bad-action" {
                state.refused += 1
            } else {
                state.errors.append(json.canonicalString)
            }
        case "error"?:
            state.errors.append(json.canonicalString)
        case nil:
            if let seq = json["seq"]?.intValue, let action = json["action"] {
                let origin = json["origin"]?.intValue
                state.events.append(Event(seq: UInt64(seq), origin: origin, action: action,
                                          isOwn: origin.map { state.ownIDs.contains($0) } ?? false))
            }
        default:
            break
        }
    }

    func waitAttached(_ fail: (String) -> Error) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while !lock.withLock({ state.attached }) {
            guard process.isRunning, ContinuousClock.now < deadline else { throw fail("a replica did not attach") }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    func waitDigest(_ fail: (String) -> Error, after seq: UInt64? = nil) async throws -> (seq: UInt64, digest: String) {
        let deadline = ContinuousClock.now + .seconds(60)
        while true {
            if let found = lock.withLock({ state.digests.last(where: { seq == nil || $0.seq > seq ?? 0 }) }) { return found }
            guard process.isRunning, ContinuousClock.now < deadline else { throw fail("a replica did not report its digest") }
            try await Task.sleep(for: .milliseconds(10))
        }
    }
}

/// A product of the package under test, built next to the test bundle (`swift test` builds
/// the executables first): for ``ConvergenceHarness``'s `hub` and `cli`.
///
/// - Parameter name: The executable product's name, e.g. `"tally-hub"`.
/// - Returns: Its URL.
/// - Throws: ``ConvergenceHarness/Failure``-like error text when it is not there.
public func builtExecutable(_ name: String) throws -> URL {
    var directories: [URL] = []
    if let here = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
        directories.append(URL(fileURLWithPath: here).deletingLastPathComponent())
    }
    directories.append(Bundle.main.bundleURL.deletingLastPathComponent())
    directories.append(Bundle.main.bundleURL)
    for directory in directories {
        let url = directory.appendingPathComponent(name)
        if FileManager.default.isExecutableFile(atPath: url.path) { return url }
    }
    throw ExecutableNotFound(name: name, searched: directories.map(\.path))
}

/// ``builtExecutable(_:)`` found nothing.
public struct ExecutableNotFound: Error, Sendable, CustomStringConvertible {
    /// The product's name.
    public let name: String
    /// Where it looked.
    public let searched: [String]
    /// What to do.
    public var description: String {
        "cannot find the executable \(name) next to the test bundle (looked in \(searched)); declare it as an executable product of the package and run swift build or swift test"
    }
}
