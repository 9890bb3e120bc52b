#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Foundation
import NATSClient
import SyncCore
import SyncPOSIX
import SyncLocks
import Synchronization

extension JetStreamLog {
    /// What the hub's thread asks the worker to do.
    enum Command {
        case propose([LogRecord], expectingLast: UInt64, epoch: Int)
        case snapshot(StoredSnapshot)
        case lease(from: Int, count: Int, answer: LeaseAnswer)
        /// A question the hub's thread waits for (``Worker/ask(_:timeout:)``), numbered.
        case ask(Question, number: Int)
    }

    /// What the hub's thread asks the worker and waits for (an upgrade's checks).
    enum Question: Equatable {
        /// The hubs reading the stream (``LogPeer``), from its consumers.
        case hubs
        /// Move the stream to ``StreamLayout/records`` (done already: nothing to do).
        case moveToRecords
    }

    /// The worker's answer to a ``Question``.
    enum Answer: Equatable {
        case hubs(Result<[LogPeer], StorageError>)
        case moved(Result<StreamLayout, StorageError>)
    }

    /// Where a lease's result goes: to the thread waiting in ``Worker/reserve(from:count:)``,
    /// or to the hub's events.
    enum LeaseAnswer {
        case waiter, event
    }

    /// Facts the worker publishes for `status`.
    struct Facts: Sendable, Equatable {
        var connected = false
        var server = ""
        /// The stream sequence of the stream's last message, as last seen.
        var streamLast: UInt64 = 0
        /// The hub seq of the newest record read back from the stream.
        var readSeq: UInt64 = 0
        /// The stream sequence of the last message read (valid or skipped).
        var streamRead: UInt64 = 0
        /// Messages skipped as not valid records of this history.
        var skipped = 0
        var sharedSnapshotSeq: UInt64 = 0
        /// The hub seq of the oldest action the stream still holds (0: none yet).
        var firstSeq: UInt64 = 0
        var inDoubt = false
        /// Proposal batches sent and not yet read back (or voided).
        var proposals = 0
        /// Messages read and held until this hub's oldest proposal is acknowledged.
        var held = 0
        /// Reading record by record from the stream's leader (no consumer).
        var polling = false
        /// The server leading the stream, as NATS last named it (`""`: none named, or none now).
        var leader = ""
    }

    /// The worker thread that owns the NATS connection, and the queues it shares with the hub.
    ///
    /// Lock order: `shared` only (never held while calling out: no I/O, no user code under it).
    /// The hub's thread touches only `shared` and the two pipes; everything in ``State`` belongs
    /// to the worker thread (handed over once, by ``start(connection:history:next:)``).
    final class Worker: Sendable {
        private struct Shared {
            var commands: [Command] = []
            var events: [LogEvent] = []
            var facts = Facts()
            var available = false
            var stopping = false
            var lease: Result<Range<Int>, StorageError>?
            /// The number of the question the hub's thread waits for, and its answer once given.
            var asked = 0
            var answer: Answer?
        }

        private let shared = Locked(Shared())
        private let configuration: SharedLogConfiguration
        private let names: Names
        let logger: HubLogger
        /// hub → worker: a byte means "look at the commands".
        private let wakeRead: Int32
        private let wakeWrite: Int32
        /// worker → hub: a byte means "events wait"; the hub polls the read end.
        let readyFD: Int32
        private let readyWrite: Int32
        private let leaseDone = DispatchSemaphore(value: 0)
        private let answered = DispatchSemaphore(value: 0)
        /// What this hub's consumers say about it (``LogPeer/metadata(label:versions:)``).
        let metadata: JSON
        private let finished = DispatchSemaphore(value: 0)
        private let running = Atomic<Bool>(false)

        init(configuration: SharedLogConfiguration, names: Names, metadata: JSON, logger: HubLogger) {
            self.configuration = configuration
            self.metadata = metadata
            self.names = names
            self.logger = logger
            let wake = (try? UnixSocket.makePipe()) ?? (-1, -1)
            let ready = (try? UnixSocket.makePipe()) ?? (-1, -1)
            wakeRead = wake.0
            wakeWrite = wake.1
            readyFD = ready.0
            readyWrite = ready.1
        }

        deinit {
            for fd in [wakeRead, wakeWrite, readyFD, readyWrite] where fd >= 0 { UnixSocket.close(fd) }
        }

        /// Connects to the first server that answers, and refuses one whose release this hub
        /// does not support (``JetStreamLog/supportProblem(_:)``).
        ///
        /// - Parameters:
        ///   - servers: `host:port` each, tried in order.
        ///   - timeoutMilliseconds: The longest wait for each step.
        func connect(servers: [String]? = nil, timeoutMilliseconds: Int32 = 2_000) throws(NATSError) -> NATSConnection {
            let connection = try NATSConnection.connect(servers: servers ?? configuration.servers, user: configuration.user,
                                                        password: configuration.password, token: configuration.token,
                                                        name: "storesync-hub \(names.stream)", timeoutMilliseconds: timeoutMilliseconds)
            if let problem = JetStreamLog.supportProblem(connection) {
                connection.close()
                throw NATSError(.unsupported, problem)
            }
            if connection.serverVersion == nil, !warnedUnknownVersion.exchange(true, ordering: .relaxed) {
                logger.warning("NATS at \(connection.server) does not say which release it runs; this hub supports nats-server \(JetStreamLog.supportedServers)")
            }
            return connection
        }

        /// Whether the warning about a server that does not say its release was written.
        private let warnedUnknownVersion = Atomic<Bool>(false)

        /// Starts the worker thread on an open connection, reading the stream from hub seq `next`.
        /// The chain check (``State/lastReadHash``) starts with the first record it reads: only
        /// bytes read from the stream are hashed.
        func start(connection: NATSConnection, history: String, next: UInt64, position: LogPosition, layout: StreamLayout) {
            var replicator = Replicator(configuration: configuration, names: names, history: history, next: next, position: position,
                                        runID: Digest.hex(UInt64.random(in: 0...UInt64.max)), now: .now)
            replicator.layout = layout
            replicator.consumerMetadata = metadata
            let carrier = Carrier(worker: self, replicator: replicator, connection: connection)
            running.store(true, ordering: .releasing)
            let thread = Thread { [self] in
                carrier.run()
                finished.signal()
            }
            thread.name = "StoreSync JetStream log"
            thread.start()
        }

        /// Stops the worker and waits for it (at most 5 s).
        func stop() {
            guard running.exchange(false, ordering: .acquiringAndReleasing) else { return }
            shared.withLock { $0.stopping = true }
            wakeWorker()
            _ = finished.wait(timeout: .now() + .seconds(5))
        }

        // MARK: The hub's side

        func enqueue(_ command: Command) {
            shared.withLock { $0.commands.append(command) }
            wakeWorker()
        }

        /// Hands over several commands in order, with one wake-up.
        func enqueue(contentsOf commands: [Command]) {
            shared.withLock { $0.commands.append(contentsOf: commands) }
            wakeWorker()
        }

        func takeEvents(into events: inout [LogEvent]) {
            var scratch = [UInt8](repeating: 0, count: 256)
            while scratch.withUnsafeMutableBytes({ read(readyFD, $0.baseAddress, $0.count) }) > 0 {}
            let taken = shared.withLock { shared -> [LogEvent] in
                defer { shared.events.removeAll(keepingCapacity: true) }
                return shared.events
            }
            events.append(contentsOf: taken)
        }

        var isAvailable: Bool { shared.withLock { $0.available } }
        var facts: Facts { shared.withLock { $0.facts } }

        /// The `log` member of `status`.
        var statusJSON: JSON {
            let facts = self.facts
            return ["kind": "nats", "servers": .array(configuration.servers.map { .string($0) }),
                    "stream": .string(names.stream), "server": .string(facts.server),
                    // The hub seq the stream ends at, as far as read: what was read, plus the
                    // messages after it (each a record, unless it will be skipped).
                    "connected": .bool(facts.connected),
                    "last_seq": JSON(facts.readSeq + (facts.streamLast > facts.streamRead ? facts.streamLast - facts.streamRead : 0)),
                    "first_seq": JSON(facts.firstSeq), "read_seq": JSON(facts.readSeq),
                    "stream_last_seq": JSON(facts.streamLast), "stream_read_seq": JSON(facts.streamRead),
                    "skipped": JSON(facts.skipped), "authenticated": .bool(configuration.keys.isAuthenticated),
                    "shared_snapshot_seq": JSON(facts.sharedSnapshotSeq), "in_doubt": .bool(facts.inDoubt),
                    "proposals": JSON(facts.proposals), "held": JSON(facts.held),
                    "reading": .string(facts.polling ? "record by record" : "consumer"),
                    "leader": .string(facts.leader)]
        }

        /// Reserves replica ids (the worker does the compare-and-set; this thread waits).
        func reserve(from next: Int, count: Int) throws(StorageError) -> Range<Int> {
            shared.withLock { $0.lease = nil }
            enqueue(.lease(from: next, count: count, answer: .waiter))
            _ = leaseDone.wait(timeout: .now() + .seconds(5))
            let result = shared.withLock { shared -> Result<Range<Int>, StorageError>? in
                defer { shared.lease = nil }
                return shared.lease
            }
            guard let result else {
                throw StorageError("the shared log did not reserve replica ids within 5 s (NATS unreachable?)")
            }
            return try result.get()
        }

        /// Asks the worker a question and waits for its answer.
        ///
        /// - Parameters:
        ///   - question: The question.
        ///   - timeout: The longest wait.
        /// - Returns: The answer.
        /// - Throws: ``StorageError`` when none comes in time.
        func ask(_ question: Question, timeout: Duration = .seconds(10)) throws(StorageError) -> Answer {
            let number = shared.withLock { shared -> Int in
                shared.asked += 1
                shared.answer = nil
                return shared.asked
            }
            enqueue(.ask(question, number: number))
            let deadline = ContinuousClock.now + timeout
            while true {
                let left = deadline - .now
                let milliseconds = max(0, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000)
                let timedOut = answered.wait(timeout: .now() + .milliseconds(Int(milliseconds))) == .timedOut
                if let answer = shared.withLock({ $0.asked == number ? $0.answer : nil }) { return answer }
                if timedOut || ContinuousClock.now >= deadline {
                    throw StorageError("the shared log did not answer within \(timeout) (NATS unreachable?)")
                }
            }
        }

        // MARK: The worker's side

        fileprivate func finishQuestion(_ answer: Answer, number: Int) {
            shared.withLock { shared in
                if shared.asked == number { shared.answer = answer }
            }
            answered.signal()
        }

        fileprivate func wakeWorker() {
            var byte: UInt8 = 1
            _ = write(wakeWrite, &byte, 1)
        }

        /// Hands the hub a turn's events and the facts after it, under one hold of the lock,
        /// and wakes it once.
        ///
        /// One hold, not two: the hub's pass takes the events and then asks ``isAvailable``.
        /// Were the events handed over first and the availability after, a pass running between
        /// the two would close the gate on an event (say, the link dropped) and open it again
        /// at once on the availability from before it, and nothing would close it again.
        fileprivate func handOver(_ new: [LogEvent], facts: (Facts, available: Bool)?) {
            let wake = shared.withLock { shared -> Bool in
                shared.events.append(contentsOf: new)
                guard let (facts, available) = facts else { return !new.isEmpty }
                // The hub's gate asks `isAvailable` on each pass: a pass now when the log became
                // available, not at its next event.
                let opened = available && !shared.available
                shared.facts = facts
                shared.available = available
                return !new.isEmpty || opened
            }
            guard wake else { return }
            var byte: UInt8 = 1
            _ = write(readyWrite, &byte, 1)
        }

        fileprivate func finishLease(_ result: Result<Range<Int>, StorageError>) {
            shared.withLock { $0.lease = result }
            leaseDone.signal()
        }

        fileprivate func takeCommands() -> (commands: [Command], stopping: Bool) {
            var scratch = [UInt8](repeating: 0, count: 256)
            while scratch.withUnsafeMutableBytes({ read(wakeRead, $0.baseAddress, $0.count) }) > 0 {}
            return shared.withLock { shared in
                defer { shared.commands.removeAll(keepingCapacity: true) }
                return (shared.commands, shared.stopping)
            }
        }

        fileprivate var wakeFD: Int32 { wakeRead }
    }

    /// The worker thread's side: it owns the connection and carries out what the
    /// ``Replicator`` decides. It makes no decision of its own.
    ///
    /// Created on the opening thread and handed to the worker thread by `Thread.start` (which
    /// orders the two); used by that thread alone from then on.
    private final class Carrier: @unchecked Sendable {
        // @unchecked: every stored property is touched only by the worker thread after
        // `Thread.start` hands the object over (the opening thread keeps no reference);
        // `owner` (a ThreadOwner) checks this in debug builds.
        private let worker: Worker
        private var replicator: Replicator
        private var connection: NATSConnection?
        /// Subscription ids by subject, and subjects by id.
        private var subscriptions: [String: Int] = [:]
        private var subjects: [Int: String] = [:]
        /// A connection attempt the replicator asked for, made once its other effects are out.
        private var connectTo: [String]?
        /// Events and facts of this turn, handed to the hub once (one lock, one wake-up).
        private var outgoing: [LogEvent] = []
        private var facts: (Facts, available: Bool)?
        private var initial: NATSConnection?
        /// The effects of the input being carried out (reused).
        private var effects: [Replicator.Effect] = []
        /// The worker thread, claimed when it starts (checked in debug builds).
        private var owner = ThreadOwner()

        init(worker: Worker, replicator: Replicator, connection: NATSConnection) {
            self.worker = worker
            self.replicator = replicator
            initial = connection
        }

        /// Feeds one input to the replicator and carries out its effects.
        private func run(_ input: Replicator.Input) {
            owner.check()
            feed(input)
            while let servers = connectTo {
                connectTo = nil
                do throws(NATSError) {
                    let opened = try worker.connect(servers: servers, timeoutMilliseconds: 1_000)
                    adopt(opened)
                } catch {
                    feed(.linkFailed(error))
                }
            }
        }

        /// One input through the replicator, its effects carried out (one reused buffer).
        private func feed(_ input: Replicator.Input) {
            replicator.handle(input, now: .now, into: &effects)
            for effect in effects { carryOut(effect) }
            effects.removeAll(keepingCapacity: true)
        }

        private func adopt(_ opened: NATSConnection) {
            connection = opened
            subscriptions = [:]
            subjects = [:]
            feed(.linkUp(Replicator.LinkInfo(server: opened.server, inboxPrefix: opened.inboxPrefix, maxPayload: opened.maxPayload)))
        }

        private func carryOut(_ effect: Replicator.Effect) {
            switch effect {
            case .publish(let subject, let reply, let headers, let payload):
                connection?.publish(subject, reply: reply, headers: headers, payload: payload)
            case .subscribe(let subject):
                if let connection {
                    let sid = connection.subscribe(subject)
                    subscriptions[subject] = sid
                    subjects[sid] = subject
                }
            case .unsubscribe(let subject):
                if let sid = subscriptions.removeValue(forKey: subject) {
                    subjects[sid] = nil
                    connection?.unsubscribe(sid)
                }
            case .connect(let servers):
                connectTo = servers
            case .close:
                connection?.close()
                connection = nil
                subscriptions = [:]
                subjects = [:]
            case .post(let event):
                outgoing.append(event)
            case .facts(let new, let available):
                facts = (new, available)
            case .diagnostic(let level, let message):
                worker.logger.log(level: level, message)
            case .finishLease(let result):
                worker.finishLease(result)
            case .answer(let answer, let number):
                worker.finishQuestion(answer, number: number)
            }
        }

        /// Hands the turn's events and facts to the hub.
        private func flushToHub() {
            guard !outgoing.isEmpty || facts != nil else { return }
            worker.handOver(outgoing, facts: facts)
            outgoing.removeAll(keepingCapacity: true)
            facts = nil
        }

        /// The worker thread's loop: commands, messages, ticks; effects carried out as they come.
        func run() {
            owner.claim()
            if let initial {
                self.initial = nil
                adopt(initial)
            }
            var stopDeadline: ContinuousClock.Instant?
            while true {
                let (commands, stopping) = worker.takeCommands()
                // Commands first: a stop still publishes the final snapshot it was handed.
                for command in commands { run(.command(command)) }
                if stopping, stopDeadline == nil { stopDeadline = .now + .seconds(4) }
                if let deadline = stopDeadline, !replicator.isFinishing || connection == nil || ContinuousClock.now >= deadline {
                    try? connection?.flush(timeoutMilliseconds: 1_000)
                    break
                }
                flushToHub()
                guard let connection else {
                    run(.tick)
                    flushToHub()
                    if self.connection == nil { wait(milliseconds: 50) }
                    continue
                }
                do throws(NATSError) {
                    if connection.hasOutput { try connection.flush(timeoutMilliseconds: 1_000) }
                    var entries = [pollfd(fd: connection.fd, events: Int16(POLLIN), revents: 0),
                                   pollfd(fd: worker.wakeFD, events: Int16(POLLIN), revents: 0)]
                    // Messages read while waiting for an answer are handed out at once.
                    let queued = connection.hasQueuedMessages
                    _ = systemPoll(&entries, 2, queued ? 0 : replicator.polling ? 20 : 200)
                    if entries[0].revents != 0 || queued {
                        for message in try connection.read(timeoutMilliseconds: 0) {
                            // A message may drop the link: the rest of the batch is moot.
                            guard self.connection === connection else { break }
                            // A subscription ended meanwhile (or the connection's own): not for the replicator.
                            guard let subject = subjects[message.sid] else { continue }
                            run(.message(message, subscription: subject))
                        }
                    }
                    if let current = self.connection, current.hasOutput { try current.flush(timeoutMilliseconds: 1_000) }
                } catch {
                    run(.linkDown(error.message))
                    flushToHub()
                    continue
                }
                run(.tick)
                if let current = self.connection, current.hasOutput {
                    do throws(NATSError) { try current.flush(timeoutMilliseconds: 1_000) } catch { run(.linkDown(error.message)) }
                }
                flushToHub()
            }
            flushToHub()
            // Best effort (a user without the permission gets its consumer expired 10 s later):
            // the stream's list of hubs loses this one at once.
            if let name = replicator.consumerName {
                _ = try? connection?.jetStream("CONSUMER.DELETE.\(replicator.names.stream).\(name)", nil, timeoutMilliseconds: 500)
            }
            connection?.close()
        }

        private func wait(milliseconds: Int32) {
            var entry = pollfd(fd: worker.wakeFD, events: Int16(POLLIN), revents: 0)
            _ = systemPoll(&entry, 1, milliseconds)
        }
    }
}

@inline(__always) private func systemPoll(_ entries: UnsafeMutablePointer<pollfd>, _ count: nfds_t, _ timeout: Int32) -> Int32 {
    poll(entries, count, timeout)
}
