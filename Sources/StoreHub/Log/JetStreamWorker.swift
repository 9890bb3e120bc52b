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
    }

    /// Where a lease's result goes: to the thread waiting in ``Worker/reserve(from:count:)``,
    /// or to the hub's events.
    enum LeaseAnswer {
        case waiter, event
    }

    /// Facts the worker publishes for `status`.
    struct Facts: Sendable {
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
        }

        private let shared = Locked(Shared())
        private let configuration: SharedLogConfiguration
        private let names: Names
        let note: @Sendable (String) -> Void
        /// hub → worker: a byte means "look at the commands".
        private let wakeRead: Int32
        private let wakeWrite: Int32
        /// worker → hub: a byte means "events wait"; the hub polls the read end.
        let readyFD: Int32
        private let readyWrite: Int32
        private let leaseDone = DispatchSemaphore(value: 0)
        private let finished = DispatchSemaphore(value: 0)
        private let running = Atomic<Bool>(false)

        init(configuration: SharedLogConfiguration, names: Names, note: @escaping @Sendable (String) -> Void) {
            self.configuration = configuration
            self.names = names
            self.note = note
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
                note("hubd: warning: NATS at \(connection.server) does not say which release it runs; this hub supports nats-server \(JetStreamLog.supportedServers)")
            }
            return connection
        }

        /// Whether the warning about a server that does not say its release was written.
        private let warnedUnknownVersion = Atomic<Bool>(false)

        /// Starts the worker thread on an open connection, reading the stream from hub seq `next`.
        /// The chain check (``State/lastReadHash``) starts with the first record it reads: only
        /// bytes read from the stream are hashed.
        func start(connection: NATSConnection, history: String, next: UInt64, position: LogPosition) {
            let state = State(configuration: configuration, names: names, history: history, next: next, position: position, worker: self)
            state.adopt(connection)
            let box = StateBox(state)
            running.store(true, ordering: .releasing)
            let thread = Thread { [self] in
                run(box.state)
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
                    "reading": .string(facts.polling ? "record by record" : "consumer")]
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

        // MARK: The worker's side

        fileprivate func wakeWorker() {
            var byte: UInt8 = 1
            _ = write(wakeWrite, &byte, 1)
        }

        fileprivate func post(_ new: [LogEvent]) {
            guard !new.isEmpty else { return }
            shared.withLock { $0.events.append(contentsOf: new) }
            var byte: UInt8 = 1
            _ = write(readyWrite, &byte, 1)
        }

        fileprivate func publish(facts: Facts, available: Bool) {
            shared.withLock {
                $0.facts = facts
                $0.available = available
            }
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

        private func run(_ state: State) {
            state.loop()
        }
    }

    /// Moves the worker's state into its thread (the opening thread never touches it again).
    private final class StateBox: @unchecked Sendable {
        // @unchecked: `state` is created on the opening thread, handed to the worker thread
        // by `Thread.start` (which orders the two), and used by that thread alone from then on.
        let state: State
        init(_ state: State) { self.state = state }
    }

    /// Everything the worker thread owns.
    final class State {
        /// A proposal sent and not yet read back (or refused).
        struct Pending {
            /// The first record of the batch (its seq, origin and id stand for the batch).
            let record: LogRecord
            /// Every record of the batch, in seq order (one message: Kafka's record batch).
            let records: [LogRecord]
            /// The seq of the batch's last record.
            var lastSeq: UInt64 { records.last?.seq ?? record.seq }
            let payload: [UInt8]
            let msgID: String
            /// The stream sequence the stream must end at for it to be stored
            /// (`Nats-Expected-Last-Sequence`): it is meant for `expectedStream + 1`.
            let expectedStream: UInt64
            /// Its tag (``LogKeys``): valid only right after the record it was proposed on.
            let tag: String
            var ackSubject = ""
            /// The number ending `ackSubject`.
            var ackNumber = 0
            /// The hub's epoch when it was proposed (see `handle(.propose)`).
            var epoch = 0
            var sentAt = ContinuousClock.now
            var acknowledged = false
            /// The stream seq its acknowledgement named (0: none yet, or not read).
            var ackedStreamSeq: UInt64 = 0
            /// How many times it was sent: once re-sent, a refusal no longer proves that an
            /// earlier copy was not stored.
            var attempts = 0
        }

        let configuration: SharedLogConfiguration
        let names: Names
        let history: String
        let worker: Worker
        var connection: NATSConnection?
        var consumerSID = 0
        /// The consumer's deliver subject: JetStream's own heartbeats and flow control come on it.
        var deliverSubject = ""
        var acksSID = 0
        var ackCounter = 0
        /// The hub seq of the next record the consumer must deliver.
        var next: UInt64
        /// The stream sequence of the next message to read. Messages that are not valid
        /// records of this history (no tag or a bad one, malformed, not right after the last
        /// valid record) are skipped, by every hub alike, so it runs ahead of `next + 1`.
        var streamNext: UInt64
        /// The tag of the last valid record read ("" before the first): the next valid record
        /// is tagged on it.
        var lastTag: String
        /// The stream sequence of the last valid record read (1, the genesis, before the first).
        var lastValidStream: UInt64
        /// How many messages were skipped as not valid records (for `status`).
        var skipped = 0
        /// The keys records are tagged with.
        let keys: LogKeys
        /// The divergence check: the hash (``Digest/fnv1a64(_:)`` of the stored bytes, in hex)
        /// of the record at stream seq `lastValidStream` as this hub applied it (`nil` until the
        /// worker has read a record since it started). Every ``chainCheckInterval`` it is
        /// compared with the stream leader's copy: a NATS cluster that loses or replaces an
        /// acknowledged record after a server dies (or delivered one it never committed) is
        /// found, never served as if nothing happened. (Records proposed on another record
        /// than the last valid one are not valid: ``validRecords(_:)``.)
        var lastReadHash: String?
        var lastChainCheck = ContinuousClock.now
        /// How often the record at `next - 1` is compared with the stream leader's copy.
        static let chainCheckInterval: Duration = .seconds(2)
        /// Until when every record another hub wrote is checked against the stream leader's
        /// copy before it is applied (`nil`: not now). Set for ``suspectWindow`` after anything
        /// that shows the cluster was not whole: a reconnection (not the first connection), a
        /// consumer started again because it went quiet or skipped records, a proposal in
        /// doubt, or one refused after a server had delivered it. A NATS 2.9 server that
        /// was a stream leader cut off from the others stores what it is sent before the others
        /// agree, and a consumer on it can deliver that record after the cluster is whole
        /// again, as if it were the stream's (seen in the several-hosts test: a hub applied its
        /// own refused proposal, delivered again as a record of the stream, at a seq the stream
        /// gave another action).
        var verifyUntil: ContinuousClock.Instant?
        /// How long records are checked after such an event.
        static let suspectWindow: Duration = .seconds(10)
        var pending: [Pending] = []
        /// The hub epoch whose proposals are being dropped (see `handle(.propose)`).
        var droppedEpoch: Int?
        /// The seq the consumer was restarted at because a later record came first.
        var gapAt: UInt64?
        /// Deliveries held back, oldest first: the first is this hub's own oldest proposal,
        /// read back before its acknowledgement came. A server can deliver what the stream
        /// has not committed (a stream leader cut off from the others, on some NATS versions):
        /// a hub applies its own proposal only once the stream's leader acknowledged it at
        /// that seq.
        var held: [NATSMessage] = []
        /// Reading record by record (`STREAM.MSG.GET`, answered by the stream's leader) because
        /// no consumer can be created now: consumers need the cluster's JetStream meta leader,
        /// which a 2.9 cluster that lost a node can take minutes to elect while the stream
        /// itself works. A consumer is tried again every 5 s.
        var polling = false
        /// The worker found the hub's history broken (``halt()``): it sends nothing more,
        /// never reconnects, and waits for the hub to stop it.
        var halted = false
        var lastConsumerAttempt = ContinuousClock.now
        /// When `next` last moved: a stream known to hold more that sends nothing for
        /// ``readStall`` is read record by record from its leader (see `checkTimers`).
        var lastProgress = ContinuousClock.now
        /// Since when the stream has been known to hold records after `next` (`nil`: it is not).
        var behindSince: ContinuousClock.Instant?
        /// How long a consumer may send nothing while the stream holds records after `next`.
        static let readStall: Duration = .seconds(3)
        var facts = Facts()
        var inDoubt = false
        /// After a reconnection: the stream sequence of the stream's last message, to be read before accepting again.
        var catchUpTarget: UInt64?
        var lastDelivery = ContinuousClock.now
        var lastResend = ContinuousClock.now
        /// When `status`'s facts about other hubs' work (trimming, shared snapshots) were last read.
        var lastFactsRefresh = ContinuousClock.now
        /// How often those facts are read again.
        static let factsRefreshInterval: Duration = .seconds(30)
        var backoff: Duration = .milliseconds(100)
        var nextAttempt = ContinuousClock.now
        let runID = Digest.hex(UInt64.random(in: 0...UInt64.max))
        var unsessioned = 0
        var serverIndex = 0
        /// How long an acknowledgement may take before the proposal is in doubt.
        static let ackTimeout: Duration = .seconds(5)
        /// Silence from the consumer (no record, no heartbeat) that means it is gone.
        static let consumerSilence: Duration = .seconds(4)

        init(configuration: SharedLogConfiguration, names: Names, history: String, next: UInt64, position: LogPosition,
             worker: Worker) {
            self.configuration = configuration
            self.names = names
            self.history = history
            self.next = next
            streamNext = position.streamSeq + 1
            lastTag = position.tag
            lastValidStream = position.streamSeq
            keys = configuration.keys
            self.worker = worker
        }

        /// The chain hash of a record's stored bytes.
        static func chainHash(_ bytes: [UInt8]) -> String { Digest.hex(Digest.fnv1a64(bytes)) }

        // MARK: Connection

        /// Takes an open connection: subscribes the acknowledgements and starts the consumer.
        func adopt(_ connection: NATSConnection) {
            self.connection = connection
            acksSID = connection.subscribe(connection.inboxPrefix + ".a.*")
            facts.connected = true
            facts.server = connection.server
            do throws(NATSError) {
                try startConsumerOrPoll()
                let info = try connection.jetStream("STREAM.INFO." + names.stream, nil)
                if JetStreamLog.isLeaderlessAnswer(info) {
                    // One member's own copy (seen after a server died: a member that had been
                    // cut off answered with a stream shorter than what the hubs had read).
                    lost("the stream \(names.stream) has no leader now (its servers are electing one); asking again")
                    return
                }
                let last = JetStreamLog.lastStreamSeq(in: info)
                if last + 1 < streamNext {
                    streamEnds(at: last, says: "the stream \(names.stream) says")
                    return
                }
                facts.streamLast = last
                catchUpTarget = last >= streamNext ? last : nil
                refreshFirstSeq()
                try connection.flush()
            } catch where error.kind == .api(code: 404, errCode: JetStreamErrorCode.streamNotFound) {
                // As above: a stream is taken as deleted only when NATS still says so 10 s on.
                if confirmed("gone") { streamGone() } else { lost("NATS says the stream \(names.stream) does not exist; asking again") }
                return
            } catch {
                lost(error.message)
                return
            }
            suspicion = nil
            backoff = .milliseconds(100)
            // What was in flight when the link dropped goes again, with the same ids and
            // expectations: stored ones come back as duplicates, overtaken ones as conflicts.
            resendPending()
            publishFacts()
        }

        /// Starts a consumer or, when JetStream cannot create one now (no answer, or it says it
        /// is temporarily unavailable), reads record by record until it can.
        private func startConsumerOrPoll() throws(NATSError) {
            lastConsumerAttempt = .now
            do throws(NATSError) {
                try startConsumer()
                if polling { worker.note("hubd: reading the shared log with a consumer again, from seq \(next)") }
                polling = false
            } catch where error.kind == .timeout || error.kind == .noResponders || error.kind == .api(code: 503, errCode: JetStreamErrorCode.temporarilyUnavailable)
                || error.kind == .api(code: 500, errCode: JetStreamErrorCode.temporarilyUnavailable) {
                if let connection, consumerSID != 0 { connection.unsubscribe(consumerSID) }
                consumerSID = 0
                if !polling {
                    worker.note("hubd: NATS cannot create a consumer now (\(error.message)); reading the shared log record by record until it can")
                }
                polling = true
            }
        }

        /// Reads the records after `next` one request each (at most 256 a turn), as a consumer
        /// would deliver them.
        private func pollRecords() {
            guard let connection else { return }
            for _ in 0..<256 {
                guard held.isEmpty else { return }
                let answer: JSON
                do throws(NATSError) {
                    answer = try connection.jetStream("STREAM.MSG.GET." + names.stream, ["seq": JSON(streamNext)])
                } catch where error.kind == .api(code: 404, errCode: JetStreamErrorCode.noMessageFound) {
                    // Not written yet, or this hub believes in records the stream does not hold.
                    if facts.streamLast >= streamNext { recheckStreamEnd() }
                    return
                } catch {
                    lost(error.message)
                    return
                }
                guard let message = answer["message"], let seq = message["seq"]?.uint64Value,
                      let subject = message["subject"]?.stringValue else { return }
                let payload = message["data"]?.stringValue.flatMap { Data(base64Encoded: $0) }.map { [UInt8]($0) } ?? []
                let headers = message["hdrs"]?.stringValue.flatMap { Data(base64Encoded: $0) }.flatMap { NATSHeaders.decode([UInt8]($0)[...]) }
                // The reply subject a push consumer would give it: the stream seq is read from it.
                let reply = "$JS.ACK.\(names.stream).poll.1.\(seq).1.0.0"
                lastDelivery = .now
                let before = streamNext
                delivered(NATSMessage(subject: subject, sid: 0, reply: reply, headers: headers, payload: payload))
                if streamNext == before { return }
            }
        }

        private func startConsumer() throws(NATSError) {
            guard let connection else { return }
            lastConsumerAttempt = .now
            if consumerSID != 0 { connection.unsubscribe(consumerSID) }
            held.removeAll()
            let deliver = connection.newInbox()
            deliverSubject = deliver
            consumerSID = connection.subscribe(deliver)
            let config: JSON = ["stream_name": .string(names.stream), "config": [
                "deliver_subject": .string(deliver), "deliver_policy": "by_start_sequence", "opt_start_seq": JSON(streamNext),
                // Every subject: a message on another subject is skipped like any message that
                // is not a valid record (a filter would leave gaps in the stream seqs).
                "ack_policy": "none", "flow_control": true, "idle_heartbeat": 1_000_000_000,
                "inactive_threshold": 10_000_000_000,
            ]]
            _ = try connection.jetStream("CONSUMER.CREATE." + names.stream, config)
            lastDelivery = .now
        }

        /// The link is gone: what was in flight is in doubt; reconnect later.
        /// Checks every record against the stream leader for a while (``verifyUntil``).
        private func suspect() {
            verifyUntil = .now + Self.suspectWindow
        }

        func lost(_ reason: String) {
            // Once per link: the rest of a batch read before the drop may call it again.
            guard connection != nil else { return }
            connection?.close()
            connection = nil
            consumerSID = 0
            held.removeAll()
            polling = false
            facts.connected = false
            if !pending.isEmpty || !inDoubt {
                emit([.inDoubt(from: pending.first?.record.seq ?? next, reason: "the link to NATS dropped: \(reason)")])
            }
            inDoubt = true
            nextAttempt = .now + backoff
            backoff = min(backoff * 2, .seconds(2))
            worker.note("hubd: lost the shared log (\(reason)); reconnecting")
            publishFacts()
        }

        private func reconnect() {
            guard ContinuousClock.now >= nextAttempt else { return }
            let servers = configuration.servers
            // Start with the next server, so a dead one is not tried first every time.
            let order = Array(servers[serverIndex...] + servers[..<serverIndex])
            serverIndex = (serverIndex + 1) % max(1, servers.count)
            do throws(NATSError) {
                let connection = try worker.connect(servers: order, timeoutMilliseconds: 1_000)
                worker.note("hubd: reconnected to the shared log at \(connection.server); reading from seq \(next)")
                suspect()
                adopt(connection)
            } catch {
                if error.kind == .unsupported, reportedUnsupported != error.message {
                    reportedUnsupported = error.message
                    worker.note("hubd: \(error.message)")
                }
                nextAttempt = .now + backoff
                backoff = min(backoff * 2, .seconds(2))
            }
        }

        /// The last refusal of a server's release that was logged (once each, not per attempt).
        private var reportedUnsupported: String?

        // MARK: The loop

        func loop() {
            while true {
                let (commands, stopping) = worker.takeCommands()
                // Commands first: a stop still publishes the final snapshot it was handed.
                for command in commands { handle(command) }
                if stopping {
                    try? connection?.flush(timeoutMilliseconds: 1_000)
                    break
                }
                flushToHub()
                if halted {
                    wait(milliseconds: 200)
                    continue
                }
                if connection == nil {
                    reconnect()
                    flushToHub()
                    if connection == nil {
                        wait(milliseconds: 50)
                        continue
                    }
                }
                guard let connection else { continue }
                do throws(NATSError) {
                    if connection.hasOutput { try connection.flush(timeoutMilliseconds: 1_000) }
                    var entries = [pollfd(fd: connection.fd, events: Int16(POLLIN), revents: 0),
                                   pollfd(fd: worker.wakeFD, events: Int16(POLLIN), revents: 0)]
                    // Messages read while waiting for an API answer are handed out at once.
                    let queued = connection.hasQueuedMessages
                    _ = systemPoll(&entries, 2, queued ? 0 : polling ? 20 : 200)
                    if entries[0].revents != 0 || queued {
                        for message in try connection.read(timeoutMilliseconds: 0) {
                            // A message may drop the link (`lost`): the rest of the batch is moot.
                            guard self.connection === connection else { break }
                            receive(message)
                        }
                    }
                    if connection.hasOutput { try connection.flush(timeoutMilliseconds: 1_000) }
                } catch {
                    lost(error.message)
                    flushToHub()
                    continue
                }
                checkTimers()
                flushToHub()
            }
            flushToHub()
            connection?.close()
        }

        private func wait(milliseconds: Int32) {
            var entry = pollfd(fd: worker.wakeFD, events: Int16(POLLIN), revents: 0)
            _ = systemPoll(&entry, 1, milliseconds)
        }

        private func checkTimers() {
            let now = ContinuousClock.now
            if facts.streamLast >= streamNext {
                if behindSince == nil { behindSince = now }
            } else {
                behindSince = nil
            }
            if let oldest = pending.first(where: { !$0.acknowledged }), now - oldest.sentAt > Self.ackTimeout {
                if !inDoubt {
                    inDoubt = true
                    suspect()
                    emit([.inDoubt(from: oldest.record.seq, reason: "no acknowledgement from the stream's leader within 5 s (an election, or too few of its servers up for a quorum)")])
                    publishFacts()
                }
                if now - lastResend > Self.ackTimeout {
                    lastResend = now
                    resendPending()
                }
            }
            if connection != nil, now - lastChainCheck > Self.chainCheckInterval {
                lastChainCheck = now
                checkChain()
                // A consumer on a server whose copy is behind sends heartbeats and nothing else;
                // a hub that only reads would never learn the stream went on. Quiet for a while:
                // ask the leader where the stream ends (the read-stall check takes it from there).
                if !polling, now - lastProgress > Self.readStall { learnStreamEnd() }
            }
            if connection != nil, now - lastFactsRefresh > Self.factsRefreshInterval {
                lastFactsRefresh = now
                refreshSharedFacts()
            }
            if connection != nil, polling {
                pollRecords()
                if now - lastConsumerAttempt > .seconds(5) {
                    do throws(NATSError) { try startConsumerOrPoll() } catch { lost(error.message) }
                }
            } else if connection != nil, now - lastDelivery > Self.consumerSilence {
                // The consumer went quiet (its server died, or it was removed): start another
                // where the stream was left off.
                suspect()
                do throws(NATSError) {
                    try startConsumer()
                } catch {
                    lost(error.message)
                }
            } else if connection != nil, held.isEmpty, let since = behindSince, now - max(since, lastProgress) > Self.readStall,
                      now - lastConsumerAttempt > Self.readStall {
                // The stream holds records after `next` (its leader acknowledged one, or the
                // consumer said more are pending), yet the consumer, still sending heartbeats,
                // sends none: its server's copy is behind the stream (seen after a NATS node
                // died: a hub's acknowledged dispatch never came back, and went unanswered).
                // Read them from the leader, record by record; a consumer is tried again in 5 s.
                worker.note("hubd: the stream \(names.stream) holds stream seq \(facts.streamLast), but its consumer sent nothing after stream seq \(streamNext - 1) for \(Self.readStall); reading the stream record by record from its leader")
                suspect()
                if let connection, consumerSID != 0 { connection.unsubscribe(consumerSID) }
                consumerSID = 0
                held.removeAll()
                polling = true
                lastConsumerAttempt = now
                lastProgress = now
            }
            updateAvailability()
        }

        /// Events for the hub, handed over once per turn of the loop (one lock, one wake-up).
        private var outgoing: [LogEvent] = []
        /// The facts changed since they were last handed over.
        private var factsChanged = false

        private func emit(_ events: [LogEvent]) { outgoing.append(contentsOf: events) }

        /// Hands the turn's events and facts to the hub.
        private func flushToHub() {
            if !outgoing.isEmpty {
                worker.post(outgoing)
                outgoing.removeAll(keepingCapacity: true)
            }
            if facts.proposals != pending.count || facts.held != held.count || facts.polling != polling {
                facts.proposals = pending.count
                facts.held = held.count
                facts.polling = polling
                factsChanged = true
            }
            if factsChanged {
                factsChanged = false
                facts.readSeq = next - 1
                facts.streamRead = streamNext - 1
                facts.skipped = skipped
                facts.inDoubt = inDoubt
                worker.publish(facts: facts, available: connection != nil && !inDoubt && catchUpTarget == nil)
            }
        }

        private func updateAvailability() {
            if inDoubt, connection != nil, pending.allSatisfy({ $0.acknowledged }), catchUpTarget == nil {
                inDoubt = false
                worker.note("hubd: the shared log is back at seq \(next - 1)")
            }
            publishFacts()
        }

        private func publishFacts() { factsChanged = true }

        // MARK: Commands

        private func handle(_ command: Command) {
            if halted {
                // Nothing built on a broken history goes out; a waiting lease is answered.
                if case .lease(_, _, .waiter) = command {
                    worker.finishLease(.failure(StorageError("the shared log stopped: this hub's history is broken")))
                }
                return
            }
            switch command {
            case .propose(let records, let expectingLast, let epoch):
                // Proposed before the hub read records this worker has already delivered (the
                // first one's seq is taken): the hub voids them when it reads those records.
                // Sent, they could only be refused, and a refusal that reached the hub after it
                // had moved on would void its newer proposals; so they are dropped here, and so
                // is the rest of their epoch (each built on the state the dropped one made:
                // sent, a later one could be stored on top of a record that is not its
                // predecessor, with a checkpoint digest of a state that never was).
                if droppedEpoch == epoch { break }
                if let first = records.first, first.seq < next {
                    droppedEpoch = epoch
                    break
                }
                var expected = expectingLast
                for (batch, payload) in Self.batches(records, maxBytes: batchBytes) {
                    guard let record = batch.first else { continue }
                    // What it follows: the last record read, or (pipelined) this hub's own
                    // proposal of the seq before. Its tag chains on that one's, so stored
                    // anywhere else (after another hub's record) it is not valid, and every
                    // hub skips it: no Nats-Expected-Last-Msg-Id is needed (2.14+ wedge on it).
                    let base: (stream: UInt64, tag: String)
                    if expected + 1 == next {
                        base = (streamNext - 1, lastTag)
                    } else if let before = pending.last(where: { $0.lastSeq == expected }) {
                        base = (before.expectedStream + 1, before.tag)
                    } else {
                        // Built on a record this worker neither read nor has in flight.
                        droppedEpoch = epoch
                        break
                    }
                    let tag = keys.tag(.record(history: history, seq: record.seq, previous: base.tag, body: payload))
                    var item = Pending(record: record, records: batch, payload: payload, msgID: msgID(for: record, at: base.stream),
                                       expectedStream: base.stream, tag: tag)
                    item.epoch = epoch
                    send(&item)
                    pending.append(item)
                    expected = item.lastSeq
                }
            case .snapshot(let snapshot):
                publishSnapshot(snapshot)
            case .lease(let from, let count, .waiter):
                worker.finishLease(lease(from: from, count: count))
            case .lease(let from, let count, .event):
                emit([.replicaIDs(lease(from: from, count: count))])
            }
        }

        /// The `Nats-Msg-Id` of a proposal meant for stream seq `after + 1`: JetStream answers a
        /// copy sent again with the same id (a proposal in doubt) `duplicate`. The place is part
        /// of it: proposed again elsewhere, it is a new message (its first copy, stored at the
        /// wrong place, was skipped as not valid there).
        /// The most bytes one message of records may hold: under the server's `max_payload`,
        /// with room for the headers.
        private var batchBytes: Int { max(16 << 10, min(1 << 20, (connection?.maxPayload ?? 1 << 20) - (8 << 10))) }

        /// Records cut into batches of at most `maxBytes` (their bodies, one per line; a record
        /// larger than that goes alone) and at most 4,096 records: one message each, with its
        /// payload.
        static func batches(_ records: [LogRecord], maxBytes: Int) -> [(records: [LogRecord], payload: [UInt8])] {
            var batches: [(records: [LogRecord], payload: [UInt8])] = []
            var current: [LogRecord] = []
            var payload: [UInt8] = []
            var body: [UInt8] = []
            for record in records {
                body.removeAll(keepingCapacity: true)
                record.writeBody(into: &body)
                if !current.isEmpty, payload.count + 1 + body.count > maxBytes || current.count >= 4_096 {
                    batches.append((current, payload))
                    current = []
                    payload = []
                }
                // Canonical bodies hold no raw line feed: one separates the records.
                if !current.isEmpty { payload.append(UInt8(ascii: "\n")) }
                payload.append(contentsOf: body)
                current.append(record)
            }
            if !current.isEmpty { batches.append((current, payload)) }
            return batches
        }

        private func msgID(for record: LogRecord, at after: UInt64) -> String {
            guard let session = record.session else {
                unsessioned += 1
                return "u.\(runID).\(unsessioned)"
            }
            // `s.` and the canonical JSON of [session, id], percent-encoded (the same bytes on
            // every hub and version: JetStream de-duplicates by it across hubs).
            let key: JSON = [.string(session), record.id.json]
            let hex: StaticString = "0123456789ABCDEF"
            var id: [UInt8] = [UInt8(ascii: "s"), UInt8(ascii: ".")]
            id.reserveCapacity(48)
            for byte in key.canonicalBytes {
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                     UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."):
                    id.append(byte)
                default:
                    id.append(UInt8(ascii: "%"))
                    id.append(hex.utf8Start[Int(byte >> 4)])
                    id.append(hex.utf8Start[Int(byte & 0x0F)])
                }
            }
            id.append(UInt8(ascii: "."))
            id.append(contentsOf: String(after).utf8)
            return String(decoding: id, as: UTF8.self)
        }

        private func send(_ item: inout Pending) {
            guard let connection else { return }
            ackCounter += 1
            item.ackSubject = connection.inboxPrefix + ".a." + String(ackCounter)
            item.ackNumber = ackCounter
            item.sentAt = .now
            item.attempts += 1
            let headers = NATSHeaders([("Nats-Msg-Id", item.msgID), ("Nats-Expected-Last-Sequence", String(item.expectedStream)),
                                       (Self.tagHeader, item.tag)])
            connection.publish(names.actions, reply: item.ackSubject, headers: headers, payload: item.payload)
        }

        private func resendPending() {
            for index in pending.indices where !pending[index].acknowledged { send(&pending[index]) }
        }

        // MARK: Messages

        private func receive(_ message: NATSMessage) {
            if message.sid == consumerSID {
                lastDelivery = .now
                if let replies = JetStreamLog.controlReplies(message, deliverSubject: deliverSubject) {
                    for reply in replies { connection?.publish(reply, payload: []) }
                    if let last = message.headers?["Nats-Last-Stream"].flatMap({ UInt64($0) }), last >= 1 {
                        facts.streamLast = max(facts.streamLast, last)
                        if let target = catchUpTarget, streamNext > target { catchUpTarget = nil }
                    }
                    return
                }
                delivered(message)
            } else if message.sid == acksSID {
                acknowledged(message)
            }
        }

        private func delivered(_ message: NATSMessage) {
            guard held.isEmpty else {
                held.append(message)
                return
            }
            // Either form of JetStream's subject: the message's place, and how many follow it.
            // Anything else on the consumer's subject was not sent by JetStream: ignored.
            guard let ack = message.reply.flatMap(JetStreamAckSubject.init), ack.stream == names.stream,
                  ack.streamSequence >= 1 else { return }
            let position = ack.streamSequence
            let (last, overflow) = position.addingReportingOverflow(ack.pending)
            if !overflow { facts.streamLast = max(facts.streamLast, last) }
            guard position == streamNext else {
                if position > streamNext {
                    if gapAt == streamNext {
                        // Read again from `streamNext`, the stream still starts later: it was
                        // trimmed past this hub (cut off while the others published a snapshot
                        // and trimmed). It cannot go on from here; a restart starts it from the
                        // shared snapshot.
                        emit([.broken(StorageError("the stream \(names.stream) no longer holds stream seq \(streamNext) (action seq \(next); its oldest is \(position)): other hubs trimmed it (--retain-actions) while this hub was behind; restart this hub — it starts from the shared snapshot"))])
                        return
                    }
                    // Something was skipped (the consumer restarted further on, or the stream
                    // was trimmed): read again from where this hub is.
                    gapAt = streamNext
                    suspect()
                    do throws(NATSError) { try startConsumer() } catch { lost(error.message) }
                }
                // Before `streamNext`: read already (a consumer started again delivers it again).
                return
            }
            gapAt = nil
            // This hub's own oldest proposal read back: its bytes and tag at the place it was
            // meant for. It is applied from the hub's copy, so the record is not decoded again.
            if let first = pending.first, position == first.expectedStream + 1, first.record.seq == next,
               message.subject == names.actions, message.payload == first.payload,
               message.headers?[Self.tagHeader] == first.tag {
                guard mayApply(first, delivered: message) else { return }
                pending.removeFirst()
                advance(seq: first.lastSeq, tag: first.tag, at: position, payload: message.payload)
                emit([.accepted(through: first.lastSeq), .position(LogPosition(seq: first.lastSeq, streamSeq: position, tag: first.tag))])
                updateAvailability()
                return
            }
            let records: [LogRecord]
            switch validRecords(message) {
            case .failure(let reason):
                skip(at: position, because: reason)
                return
            case .success(let valid):
                records = valid
            }
            guard let record = records.first, let lastSeq = records.last?.seq else { return }
            if let until = verifyUntil {
                if ContinuousClock.now >= until {
                    verifyUntil = nil
                } else if !leaderHolds(message, atStream: position) {
                    return
                }
            }
            if let first = pending.first, first.record.seq == record.seq {
                if first.record.origin == record.origin, first.record.id == record.id, first.payload == message.payload {
                    guard mayApply(first, delivered: message) else { return }
                    pending.removeFirst()
                } else {
                    // Another hub's record took the seq of this hub's oldest proposal: every
                    // proposal in flight is void, and so are those of its epoch still to come.
                    droppedEpoch = first.epoch
                    pending.removeAll()
                }
            }
            let tag = message.headers?[Self.tagHeader] ?? ""
            advance(seq: lastSeq, tag: tag, at: position, payload: message.payload)
            emit(records.map { .appended($0) } + [.position(LogPosition(seq: lastSeq, streamSeq: position, tag: tag))])
            updateAvailability()
        }

        /// The header holding a record's tag (``LogKeys``).
        static let tagHeader = "StoreSync-Auth"

        /// The records a message holds, if it is the valid next record batch of this history: on
        /// the actions subject, record bodies of seqs `next`, `next + 1`, …, tagged (under this
        /// log's keys) on the tag of the last valid batch. Every hub decides this alike, from
        /// the stream alone.
        ///
        /// - Parameter message: A message read at `streamNext`.
        /// - Returns: The records, or why the message is skipped.
        func validRecords(_ message: NATSMessage) -> Result<[LogRecord], StorageError> {
            JetStreamLog.validRecords(message, names: names, keys: keys, history: history, next: next, previousTag: lastTag)
        }

        /// The record at `position` was read and applied: the read position moves past it.
        private func advance(seq: UInt64, tag: String, at position: UInt64, payload: [UInt8]) {
            boundaries.append((seq, position))
            if boundaries.count > Self.maxBoundaries { boundaries.removeFirst(Self.maxBoundaries / 2) }
            lastReadHash = Self.chainHash(payload)
            next = seq + 1
            streamNext = position + 1
            lastTag = tag
            lastValidStream = position
            lastProgress = .now
            if facts.firstSeq == 0 { facts.firstSeq = seq }
            if let target = catchUpTarget, streamNext > target { catchUpTarget = nil }
        }

        /// The message at `position` is not a valid record of this history: every hub skips it
        /// alike. This hub's oldest proposal, meant for that place, was not stored there.
        private func skip(at position: UInt64, because reason: StorageError) {
            streamNext = position + 1
            skipped += 1
            lastProgress = .now
            if let target = catchUpTarget, streamNext > target { catchUpTarget = nil }
            if skipped <= 100 || skipped % 1000 == 0 {
                worker.note("hubd: warning: skipped stream seq \(position) of \(names.stream) (\(skipped) so far): \(reason.message); every hub of the stream skips it alike")
            }
            if let first = pending.first, first.expectedStream + 1 == position {
                void(from: 0, .conflict(from: first.record.seq, logLast: next - 1))
            }
            publishFacts()
        }

        /// The chain hash of the stream leader's copy of hub seq `seq` (`MSG.GET`, answered by
        /// the leader). When there is nothing to compare with (trimmed, or an answer without
        /// data), this hub's own hash (no verdict). When NATS cannot answer now: `nil`, and with
        /// `dropLinkOnError` the link is dropped first (the worker then reads again from
        /// `next` once it is back); without, nothing changes (the periodic check skips a round
        /// during an election instead of taking an idle hub off line).
        private func streamHash(ofStream seq: UInt64, dropLinkOnError: Bool) -> String? {
            guard let connection else { return nil }
            do throws(NATSError) {
                let answer = try connection.jetStream("STREAM.MSG.GET." + names.stream, ["seq": JSON(seq)])
                guard let data = answer["message"]?["data"]?.stringValue.flatMap({ Data(base64Encoded: $0) }) else {
                    return lastReadHash
                }
                return Self.chainHash([UInt8](data))
            } catch where error.kind == .api(code: 404, errCode: JetStreamErrorCode.noMessageFound) {
                // Trimmed (or never written): nothing to compare with.
                return lastReadHash
            } catch {
                if dropLinkOnError {
                    lost("cannot read seq \(seq) back from the stream to check it: \(error.message)")
                }
                return nil
            }
        }

        /// Whether the stream leader's copy of hub seq `seq` is the delivered record (its bytes).
        /// When it is not, or there is none, the delivery is a server's stale copy: the stream
        /// is read again from `next` (`false`). When NATS cannot answer, the link is dropped and
        /// the worker reads again from `next` once it is back (`false`).
        private func leaderHolds(_ message: NATSMessage, atStream seq: UInt64) -> Bool {
            guard let connection else { return false }
            let copy: [UInt8]?
            do throws(NATSError) {
                let answer = try connection.jetStream("STREAM.MSG.GET." + names.stream, ["seq": JSON(seq)])
                copy = answer["message"]?["data"]?.stringValue.flatMap { Data(base64Encoded: $0) }.map { [UInt8]($0) }
            } catch where error.kind == .api(code: 404, errCode: JetStreamErrorCode.noMessageFound) {
                copy = nil
            } catch {
                lost("cannot check seq \(seq) with the stream's leader: \(error.message)")
                return false
            }
            guard let copy, copy == message.payload else {
                readAgain(because: "a NATS server delivered, as stream seq \(seq), a message the stream's leader \(copy == nil ? "does not hold" : "holds otherwise") (a server that was cut off delivering what the stream never took)")
                return false
            }
            return true
        }

        /// Compares the record this hub applied last with the stream leader's copy (every
        /// ``chainCheckInterval``): a hub whose history the stream no longer holds stops even
        /// when no other hub writes.
        private func checkChain() {
            guard let mine = lastReadHash, next >= 2, !polling, held.isEmpty,
                  let stream = streamHash(ofStream: lastValidStream, dropLinkOnError: false) else { return }
            if stream != mine { diverged(at: next - 1, streamHash: stream) }
        }

        /// This hub applied, at `seq`, a record the stream no longer holds: it stops (its local
        /// snapshots, which may hold that record's effect, are discarded), so that a restart
        /// reads the stream's history and its replicas re-hydrate.
        private func diverged(at seq: UInt64, streamHash: String) {
            let applied = lastReadHash ?? "?"
            halt()
            var error = StorageError("the stream \(names.stream) now holds another record at action seq \(seq) than the one this hub applied (hash \(applied), the stream's \(streamHash)): NATS lost or replaced an acknowledged action, or delivered one it never committed, around a server failure. The hub stops rather than serve a history the stream and the other hubs do not have, and discards its local snapshots; restart it and it rebuilds from the stream (its replicas re-hydrate). See docs/OPERATIONS.md, \"Across hosts\"", isDataProblem: false)
            error.discardsLocalSnapshots = true
            emit([.broken(error)])
        }

        /// Whether this hub's own proposal, read back from the stream, may be applied: only once
        /// the stream's leader acknowledged it at that seq. Before, the delivery is held (and
        /// those after it); acknowledged elsewhere, the seq is read again from the stream.
        private func mayApply(_ first: Pending, delivered message: NATSMessage) -> Bool {
            guard first.acknowledged else {
                held.append(message)
                return false
            }
            guard first.ackedStreamSeq == 0 || first.ackedStreamSeq == first.expectedStream + 1 else {
                // The stream's leader stored it elsewhere: this server's copy is not the stream's.
                readAgain(because: "a NATS server delivered seq \(first.record.seq) as this hub's proposal, which the stream stored at stream seq \(first.ackedStreamSeq)")
                return false
            }
            return true
        }

        /// The decimal number right after the first `key` in `bytes` (0 when there is none).
        static func number(after key: StaticString, in bytes: [UInt8]) -> UInt64 {
            guard var position = index(after: key, in: bytes) else { return 0 }
            var value: UInt64 = 0
            while position < bytes.count, bytes[position] == UInt8(ascii: " ") { position += 1 }
            while position < bytes.count, bytes[position] >= UInt8(ascii: "0"), bytes[position] <= UInt8(ascii: "9") {
                value = value &* 10 &+ UInt64(bytes[position] - UInt8(ascii: "0"))
                position += 1
            }
            return value
        }

        /// Whether `bytes` contain `text`'s UTF-8 bytes.
        static func contains(_ bytes: [UInt8], _ text: StaticString) -> Bool { index(after: text, in: bytes) != nil }

        /// Where the first occurrence of `needle`'s UTF-8 bytes in `bytes` ends, if there is one.
        private static func index(after needle: StaticString, in bytes: [UInt8]) -> Int? {
            let needle = UnsafeBufferPointer(start: needle.utf8Start, count: needle.utf8CodeUnitCount)
            guard needle.count <= bytes.count, let first = needle.first else { return nil }
            var index = 0
            while index + needle.count <= bytes.count {
                if bytes[index] == first, bytes[index..<(index + needle.count)].elementsEqual(needle) { return index + needle.count }
                index += 1
            }
            return nil
        }

        private func acknowledged(_ message: NATSMessage) {
            // The subject ends in the number the copy was sent with; acks mostly come in order.
            var number = 0, scale = 1
            for byte in message.subject.utf8.reversed() {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"), scale < 1_000_000_000_000 else { break }
                number += Int(byte - UInt8(ascii: "0")) * scale
                scale *= 10
            }
            guard let index = pending.firstIndex(where: { $0.ackNumber == number }), pending[index].ackSubject == message.subject else { return }
            let item = pending[index]
            if message.headers?.status == 503 {
                // No server took this copy. If it is the only one, nothing was stored; a copy
                // sent before may have been, so a re-sent proposal stays in doubt (re-sent
                // again until the stream answers for it).
                guard item.attempts == 1 else { return }
                void(from: index, .failed(from: item.record.seq, StorageError("no NATS server took it: the stream \(names.stream) has no leader at this moment (an election after a server left, or too few of its servers up for a quorum)")))
                return
            }
            // The common answer, {"stream":"S", "seq":N}, needs no parsing.
            if !Self.contains(message.payload, #""error""#), !Self.contains(message.payload, #""duplicate""#) {
                pending[index].acknowledged = true
                pending[index].ackedStreamSeq = Self.number(after: #""seq":"#, in: message.payload)
                noteStreamHolds(pending[index].ackedStreamSeq)
                releaseHeld()
                updateAvailability()
                return
            }
            guard let json = try? JSON(parsing: message.payload) else { return }
            if let error = json["error"] {
                let code = error["err_code"]?.intValue ?? 0
                let text = error["description"]?.stringValue ?? ""
                switch code {
                case JetStreamErrorCode.duplicateInProcess, JetStreamErrorCode.ingestLimitReached:
                    // Not a verdict: an earlier copy with this id is being stored right now
                    // (2.11+: "duplicate message id is in process"), or the stream takes no more
                    // for a moment (its ingest limits). The proposal stays in doubt and goes
                    // again, with the same id and expectations, until the stream answers for it.
                    if !inDoubt {
                        inDoubt = true
                        suspect()
                        emit([.inDoubt(from: item.record.seq, reason: "NATS has not decided on it yet: \(ControlCharacters.escaped(text)) (\(code))")])
                        publishFacts()
                    }
                case JetStreamErrorCode.wrongLastSequence:
                    let streamLast = text.split(separator: ":").last.flatMap { UInt64($0.trimmingCharacters(in: .whitespaces)) } ?? (item.expectedStream + 1)
                    if streamLast + 1 < streamNext {
                        // The leader says the stream ends before what this hub has read. A leader
                        // not yet deposed answers from its own copy too, so this stops the hub
                        // only once NATS has kept saying so for 10 s (as in `adopt`); meanwhile
                        // the link is dropped, and what was in flight is in doubt.
                        streamEnds(at: streamLast, says: "the stream \(names.stream)'s leader says")
                        return
                    }
                    // Another message got there first; whether it is a valid record is known once
                    // it is read. The hub waits for what this worker has read, no more (a
                    // message that turns out not valid adds no seq to wait for).
                    noteStreamHolds(streamLast)
                    void(from: index, .conflict(from: item.record.seq, logLast: next - 1))
                case JetStreamErrorCode.wrongLastMessageID:
                    void(from: index, .conflict(from: item.record.seq, logLast: next - 1))
                default:
                    void(from: index, .failed(from: item.record.seq, StorageError("NATS refused to store it: \(ControlCharacters.escaped(text)) (\(code))")))
                }
                return
            }
            if json["duplicate"]?.boolValue == true {
                // Stored before, under the same id (which names the place it was meant for): the
                // original is in the stream at that stream seq.
                let original = json["seq"]?.uint64Value ?? 0
                if original == item.expectedStream + 1 {
                    pending[index].acknowledged = true
                    pending[index].ackedStreamSeq = original
                    releaseHeld()
                } else {
                    void(from: index, .conflict(from: item.record.seq, logLast: next - 1))
                }
                return
            }
            pending[index].acknowledged = true
            pending[index].ackedStreamSeq = json["seq"]?.uint64Value ?? 0
            noteStreamHolds(pending[index].ackedStreamSeq)
            releaseHeld()
            updateAvailability()
        }

        /// The stream's last action seq as its leader gives it; `nil` without an answer, or when
        /// the stream has no leader (the answer is then one member's copy).
        private func leaderStreamEnd() -> UInt64? {
            guard let connection,
                  let info = try? connection.jetStream("STREAM.INFO." + names.stream, nil),
                  !JetStreamLog.isLeaderlessAnswer(info) else { return nil }
            return JetStreamLog.lastStreamSeq(in: info)
        }

        /// NATS (`who` says) that the stream ends at action seq `last`, before what this hub has
        /// read: the hub stops once NATS has kept saying so for 10 s across reconnects (a cluster
        /// electing, or a leader not yet deposed, answers from one server's copy); until then the
        /// link is dropped and asked again.
        private func streamEnds(at last: UInt64, says who: String) {
            if confirmed("short") {
                _ = lostRecords(streamLast: last)
            } else {
                lost("\(who) it ends at stream seq \(last), before the stream seq \(streamNext - 1) this hub has read; asking again")
            }
        }

        /// Asks the stream's leader where the stream ends, and remembers it if that is further
        /// than this hub knew (a leaderless stream's answer is one member's copy, and ignored).
        private func learnStreamEnd() {
            guard let last = leaderStreamEnd() else { return }
            if last > facts.streamLast {
                facts.streamLast = last
                publishFacts()
            }
        }

        /// Asks the stream's leader where the stream ends, when this hub believes in records after
        /// `next` that the leader does not give it (`STREAM.MSG.GET` says "no such record").
        ///
        /// A NATS 2.9 leader about to be deposed can acknowledge a proposal the stream never
        /// keeps, and a server ahead of the stream can report records as pending: believed, they
        /// would keep the read-stall check switching to record-by-record reads forever, and the
        /// acknowledged proposal would wait for a delivery that never comes. The leader's answer
        /// lowers what the hub believes; this hub's proposals acknowledged beyond it are in doubt
        /// again (re-sent with their ids, so one the stream did keep comes back a duplicate); a
        /// stream that ends before what this hub has read is handled as in `adopt`.
        private func recheckStreamEnd() {
            guard let last = leaderStreamEnd() else { return }
            if last + 1 < streamNext {
                streamEnds(at: last, says: "the stream \(names.stream) says")
                return
            }
            guard last < facts.streamLast else { return }
            worker.note("hubd: the stream \(names.stream) ends at stream seq \(last), not at the stream seq \(facts.streamLast) NATS had reported; proposals acknowledged after it are in doubt and are sent again")
            facts.streamLast = last
            for index in pending.indices where pending[index].acknowledged && pending[index].expectedStream + 1 > last {
                pending[index].acknowledged = false
                pending[index].ackedStreamSeq = 0
            }
            publishFacts()
        }

        /// Records that the stream's leader stored a message at stream seq `streamSeq`: the
        /// stream holds at least that much (for the read-stall check and `status`).
        private func noteStreamHolds(_ streamSeq: UInt64) {
            facts.streamLast = max(facts.streamLast, streamSeq)
        }

        /// Whether the stream ends before the messages this worker has already read (stream seq
        /// `streamNext - 1`): a NATS server lost actions it had acknowledged (a single server
        /// restarted without them, or a stream replaced). The hub then stops (`broken`), since
        /// going on would fork the history its replicas have seen; appends would only ever
        /// conflict.
        private func lostRecords(streamLast: UInt64) -> Bool {
            guard streamLast + 1 < streamNext else { return false }
            emit([.broken(StorageError("the stream \(names.stream) ends at stream seq \(streamLast), but this hub has read up to stream seq \(streamNext - 1) (action seq \(next - 1)) from it: NATS delivered actions it did not keep — records a stream leader stored before the others agreed, then died (nats-server 2.9), or acknowledged actions lost (a server restarted without its data, or the stream was replaced). The hub stops rather than serve a history the stream does not hold; restart it and it rebuilds from the stream (its replicas re-hydrate). See docs/OPERATIONS.md, \"Across hosts\" (use --nats-replicas 3)"))])
            return true
        }

        /// What NATS said that would stop the hub, and since when it has said so.
        var suspicion: (what: String, since: ContinuousClock.Instant)?

        /// Whether NATS has kept saying `what` for 10 s (across reconnects): a cluster electing
        /// leaders can answer from a server that does not have the stream's state.
        private func confirmed(_ what: String) -> Bool {
            let now = ContinuousClock.now
            guard let suspicion, suspicion.what == what else {
                self.suspicion = (what, now)
                return false
            }
            return now - suspicion.since >= .seconds(10)
        }

        /// Stops the worker for good: the link is closed, what was in flight or held is dropped
        /// (nothing built on a broken history is sent again), and it never reconnects.
        private func halt() {
            halted = true
            connection?.close()
            connection = nil
            consumerSID = 0
            pending.removeAll()
            held.removeAll()
            facts.connected = false
            publishFacts()
        }

        /// The stream was deleted under the hub: nothing it holds can be trusted to go on.
        private func streamGone() {
            halt()
            emit([.broken(StorageError("the stream \(names.stream) no longer exists on NATS (it was deleted); the hub stops rather than start a new history under its replicas. Restore the stream, or start the hubs on a new one"))])
        }

        /// Goes on with the deliveries held for the oldest proposal's acknowledgement.
        private func releaseHeld() {
            guard !held.isEmpty, pending.first?.acknowledged ?? true else { return }
            let messages = held
            held.removeAll()
            let consumer = consumerSID
            for message in messages {
                // Delivering one may drop the link, restart the consumer (which delivers again
                // from `next`) or hold the rest again: the others are then not this stream's
                // order any more.
                guard connection != nil, !halted, consumerSID == consumer, held.isEmpty else { return }
                delivered(message)
            }
        }

        /// Drops what was read from `next` on and reads it again from the stream (with a new
        /// consumer), when what a server delivered is not what the stream's leader answered.
        private func readAgain(because reason: String) {
            suspect()
            worker.note("hubd: warning: \(reason); reading the stream again from seq \(next)")
            do throws(NATSError) { try startConsumer() } catch { lost(error.message) }
        }

        /// Forgets the proposals from `index` on (the log refused the first of them, so the
        /// rest, expecting it, are refused too) and tells the hub.
        private func void(from index: Int, _ event: LogEvent) {
            // The hub voids everything from here on and starts a new epoch: proposals of this
            // one still on their way were built on the voided ones.
            droppedEpoch = pending[index].epoch
            pending.removeSubrange(index...)
            if index == 0, !held.isEmpty {
                // The server delivered, as this hub's proposal, what the stream's leader then
                // refused (or would not answer for): read that seq again.
                readAgain(because: "the stream did not take the proposal at seq \(next) that a NATS server had delivered")
            }
            emit([event])
            updateAvailability()
        }

        /// Reads again what other hubs change without this one seeing it in the stream of
        /// actions: the oldest action kept (their trimming) and the newest shared snapshot.
        private func refreshSharedFacts() {
            refreshFirstSeq()
            if let connection, let answer = try? connection.jetStream("STREAM.MSG.GET." + names.meta, ["last_by_subj": .string(names.head)]),
               let data = answer["message"]?["data"]?.stringValue.flatMap({ Data(base64Encoded: $0) }),
               let head = try? JSON(parsing: [UInt8](data)), head["history"]?.stringValue == history,
               let seq = head["seq"]?.uint64Value, seq > 0 {
                facts.sharedSnapshotSeq = max(facts.sharedSnapshotSeq, seq)
            }
            publishFacts()
        }

        /// Reads which action is the oldest the stream holds (for `status`).
        private func refreshFirstSeq() {
            // The first action message's first record names its seq (read, not trusted: for `status`).
            guard let connection,
                  let answer = try? connection.jetStream("STREAM.MSG.GET." + names.stream,
                                                         ["seq": 1, "next_by_subj": .string(names.actions)]),
                  let data = answer["message"]?["data"]?.stringValue.flatMap({ Data(base64Encoded: $0) }) else { return }
            let bytes = [UInt8](data)
            let first = bytes.split(separator: UInt8(ascii: "\n"), maxSplits: 1, omittingEmptySubsequences: false).first ?? []
            guard let seq = first.withUnsafeBytes({ LogRecord(canonicalBody: $0) })?.seq else { return }
            facts.firstSeq = seq
        }

        /// Where recent messages end: (the last action seq of a message, its stream seq), oldest
        /// first, for trimming (`--retain-actions`), which purges whole messages.
        var boundaries: [(lastSeq: UInt64, streamSeq: UInt64)] = []
        /// The most boundaries kept.
        static let maxBoundaries = 200_000

        // MARK: Leases and snapshots

        private func lease(from next: Int, count: Int) -> Result<Range<Int>, StorageError> {
            guard let connection else { return .failure(StorageError("the shared log is unreachable")) }
            for _ in 0..<8 {
                do throws(NATSError) {
                    var below = 0
                    var subjectSeq: UInt64 = 0
                    if let answer = try? connection.jetStream("STREAM.MSG.GET." + names.meta, ["last_by_subj": .string(names.lease)]),
                       let message = answer["message"], let seq = message["seq"]?.uint64Value,
                       let data = message["data"]?.stringValue.flatMap({ Data(base64Encoded: $0) }),
                       let json = try? JSON(parsing: [UInt8](data)), let value = json["below"]?.intValue,
                       (0...JetStreamLog.maxReplicaID).contains(value) {
                        below = value
                        subjectSeq = seq
                    }
                    let start = max(below, next)
                    let headers = NATSHeaders([("Nats-Expected-Last-Subject-Sequence", String(subjectSeq))])
                    let reply = try connection.request(names.lease, payload: JSON.object(["below": JSON(start + count)]).canonicalBytes,
                                                       headers: headers)
                    if let json = try? JSON(parsing: reply.payload), json["error"] == nil {
                        return .success(start..<(start + count))
                    }
                } catch {
                    return .failure(StorageError("cannot reserve replica ids in the shared log: \(error.message)"))
                }
            }
            return .failure(StorageError("cannot reserve replica ids in the shared log: other hubs keep taking them first"))
        }

        private func publishSnapshot(_ snapshot: StoredSnapshot) {
            // Without its place in the stream, no hub could go on from it.
            guard let connection, snapshot.seq > facts.sharedSnapshotSeq, snapshot.position != nil else { return }
            let body = snapshot.body.canonicalBytes
            let chunkSize = max(4096, min(256 << 10, connection.maxPayload - 1024))
            let tag = "\(snapshot.seq).\(runID)"
            do throws(NATSError) {
                // The newest head now. Ours is written only if it is still the newest when ours
                // comes (another hub's snapshot, published meanwhile, wins and ours is dropped):
                // a head's writer then purges only chunks older than its own, never chunks a
                // newer head needs.
                var headSubjectSeq: UInt64 = 0
                if let answer = try? connection.jetStream("STREAM.MSG.GET." + names.meta, ["last_by_subj": .string(names.head)]),
                   let message = answer["message"], let seq = message["seq"]?.uint64Value {
                    headSubjectSeq = seq
                    if let data = message["data"]?.stringValue.flatMap({ Data(base64Encoded: $0) }),
                       let json = try? JSON(parsing: [UInt8](data)), json["history"]?.stringValue == history,
                       let newest = json["seq"]?.uint64Value, newest >= snapshot.seq {
                        // Another hub published one as new or newer.
                        facts.sharedSnapshotSeq = max(facts.sharedSnapshotSeq, newest)
                        publishFacts()
                        return
                    }
                }
                var first: UInt64 = 0
                var chunks = 0
                var offset = 0
                repeat {
                    let end = min(body.count, offset + chunkSize)
                    let headers = NATSHeaders([("StoreSync-Snapshot", tag), ("StoreSync-Chunk", String(chunks))])
                    let reply = try connection.request(names.chunks, payload: Array(body[offset..<end]), headers: headers,
                                                       timeoutMilliseconds: 5_000)
                    guard let ack = try? JSON(parsing: reply.payload), ack["error"] == nil, let seq = ack["seq"]?.uint64Value else {
                        worker.note("hubd: could not publish the shared snapshot at seq \(snapshot.seq); the stream still holds every action")
                        return
                    }
                    if chunks == 0 { first = seq }
                    chunks += 1
                    offset = end
                } while offset < body.count
                let head: JSON = ["seq": JSON(snapshot.seq), "digest": .string(snapshot.digest), "history": .string(history),
                                  "chunks": JSON(chunks), "first": JSON(first), "bytes": JSON(body.count), "tag": .string(tag),
                                  "content": .string(SHA256.hex(SHA256.hash(body)))]
                let headBytes = head.canonicalBytes
                let reply = try connection.request(names.head, payload: headBytes,
                                                   headers: NATSHeaders([("Nats-Expected-Last-Subject-Sequence", String(headSubjectSeq)),
                                                                         (Self.tagHeader, keys.tag(.snapshotHead(body: headBytes, contentDigest: [])))]))
                guard let ack = try? JSON(parsing: reply.payload), ack["error"] == nil, let headSeq = ack["seq"]?.uint64Value else {
                    // Another hub's head came first: its writer purges these chunks with the rest.
                    return
                }
                facts.sharedSnapshotSeq = snapshot.seq
                // Older snapshots go; the newest stays.
                _ = try? connection.jetStream("STREAM.PURGE." + names.meta, ["filter": .string(names.chunks), "seq": JSON(first)])
                _ = try? connection.jetStream("STREAM.PURGE." + names.meta, ["filter": .string(names.head), "seq": JSON(headSeq)])
                if let retain = configuration.retainActions, snapshot.seq > retain {
                    // Actions before the retained window, all covered by this shared snapshot.
                    // Whole messages go: up to the last one that ends before `keepFrom` (none,
                    // when that one is older than what this hub remembers).
                    let keepFrom = snapshot.seq - retain + 1
                    if let boundary = boundaries.last(where: { $0.lastSeq < keepFrom }) {
                        _ = try? connection.jetStream("STREAM.PURGE." + names.stream,
                                                      ["filter": .string(names.actions), "seq": JSON(boundary.streamSeq + 1)])
                        boundaries.removeAll { $0.streamSeq <= boundary.streamSeq }
                    }
                    refreshFirstSeq()
                }
                publishFacts()
            } catch {
                worker.note("hubd: could not publish the shared snapshot at seq \(snapshot.seq): \(error.message)")
            }
        }
    }
}

@inline(__always) private func systemPoll(_ entries: UnsafeMutablePointer<pollfd>, _ count: nfds_t, _ timeout: Int32) -> Int32 {
    poll(entries, count, timeout)
}
