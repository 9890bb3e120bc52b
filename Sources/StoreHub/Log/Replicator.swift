import Foundation
import NATSClient
import SyncCore

extension JetStreamLog {
    /// The shared log's replicator: every decision the JetStream worker makes, as a value with
    /// no I/O, no clock and no randomness.
    ///
    /// Like a swift-nio handler, it is driven one input at a time —
    /// ``handle(_:now:)`` — and answers with the effects to carry out: messages to publish,
    /// subscriptions, a connection attempt, events and facts for the hub, lines for the log.
    /// The worker thread (``Worker``) owns the socket and only carries effects out, so every
    /// incident a NATS cluster can cause is replayed in tests as a transcript of inputs,
    /// without a server (`ReplicatorTests`).
    ///
    /// Requests (`STREAM.INFO`, `STREAM.MSG.GET`, `CONSUMER.CREATE`, lease and snapshot
    /// writes) go out on this machine's own inbox (`<inbox>.q.<id>`) and their replies come
    /// back as ``Input/message(_:)``, matched by id; none is ever waited for, so a delivery is
    /// never stuck behind a question to the stream's leader. A request with no reply by its
    /// deadline is answered, on the next ``Input/tick``, as a timeout.
    struct Replicator {
        /// What happens to the replicator.
        enum Input {
            /// The hub asks for something.
            case command(Command)
            /// A connection to a server is open (the handshake is done).
            case linkUp(LinkInfo)
            /// A connection attempt (``Effect/connect(servers:)``) failed.
            case linkFailed(NATSError)
            /// The open connection broke (read or write).
            case linkDown(String)
            /// A message arrived on one of this machine's subscriptions, named by the subject
            /// it subscribed (a consumer's deliveries carry their stored subject, not its own).
            case message(NATSMessage, subscription: String)
            /// Time passed: timers, request deadlines, reading record by record.
            case tick
        }

        /// What an open connection is.
        struct LinkInfo: Equatable {
            /// `host:port` of the server.
            var server: String
            /// The connection's inbox prefix (`_INBOX.<random>`): this machine's reply subjects start with it.
            var inboxPrefix: String
            /// The server's `max_payload`.
            var maxPayload: Int
        }

        /// What the worker thread carries out, in order.
        enum Effect: Equatable {
            /// Publishes a message (with a reply subject: a request or a proposal).
            case publish(subject: String, reply: String?, headers: NATSHeaders?, payload: [UInt8])
            /// Subscribes to a subject (the worker keeps the subscription's id).
            case subscribe(String)
            /// Ends the subscription to a subject.
            case unsubscribe(String)
            /// Connects to the first of these servers that answers, then reports
            /// ``Input/linkUp(_:)`` or ``Input/linkFailed(_:)``.
            case connect(servers: [String])
            /// Closes the connection (nothing more is read from it).
            case close
            /// Hands an event to the hub.
            case post(LogEvent)
            /// The facts `status` shows, and whether dispatches are accepted.
            case facts(Facts, available: Bool)
            /// A line for the hub's diagnostics (its ``HubLogger``), at its level: not a record
            /// of the action log.
            case diagnostic(HubLogger.Level, String)
            /// Answers the thread waiting in ``Worker/reserve(from:count:)``.
            case finishLease(Result<Range<Int>, StorageError>)
            /// Answer the question the hub's thread waits for (``Worker/ask(_:timeout:)``).
            case answer(Answer, number: Int)
        }

        /// The link to NATS: one state, no flags beside it.
        enum Link: Equatable {
            /// No connection; the next attempt is at `retryAt`.
            case down(retryAt: ContinuousClock.Instant)
            /// An attempt is under way (``Effect/connect(servers:)``).
            case connecting
            /// Connected; the stream's end is being read (``Purpose/openInfo``). Deliveries are
            /// read, proposals wait.
            case opening(LinkInfo)
            /// Connected and reading; proposals go out.
            case up(LinkInfo)
            /// The history is broken: nothing is sent again, the worker never reconnects.
            case halted

            /// The open connection, if any.
            var info: LinkInfo? {
                switch self {
                case .opening(let info), .up(let info): return info
                case .down, .connecting, .halted: return nil
                }
            }
        }

        /// What a request is for: its reply is handled by what it asked.
        enum Purpose: Equatable {
            /// `CONSUMER.CREATE` for a consumer delivering to `subject`.
            case consumer(subject: String)
            /// `STREAM.INFO` as a link opens. Each question about the stream's end carries what this
            /// hub had read when it asked (`readThrough`): the answer is the stream as it was
            /// then, and reads made meanwhile are no evidence against it.
            case openInfo(readThrough: UInt64)
            /// `STREAM.INFO` to learn where the stream ends (`recheck`: because the leader
            /// had no record where this hub believed in one).
            case streamEnd(recheck: Bool, readThrough: UInt64, believed: UInt64)
            /// `STREAM.MSG.GET` of the next record, read record by record.
            case poll(streamSeq: UInt64)
            /// `STREAM.MSG.GET`: the leader's copy of a delivery held for checking (``verifying``).
            case verify(streamSeq: UInt64)
            /// `STREAM.MSG.GET`: the leader's copy of the last record applied (the chain check).
            case chainCheck(streamSeq: UInt64, applied: String)
            /// `CONSUMER.LIST` from `offset`, for question `number`, with the hubs found so far.
            case hubs(number: Int, offset: Int, pages: Int, found: [LogPeer])
            /// `STREAM.INFO` before moving the stream to the records layout, for question `number`.
            case moveInfo(number: Int)
            /// `STREAM.UPDATE` moving the stream to the records layout, for question `number`.
            case moveUpdate(number: Int)
            /// `STREAM.INFO`: whether the stream has a leader again (after a publish answered 503).
            case leader
            /// `STREAM.MSG.GET`: the oldest action message (for `status`).
            case firstSeq
            /// `STREAM.MSG.GET`: the newest shared snapshot head (for `status`).
            case sharedHead
            /// The replica-id lease's last value.
            case leaseRead(LeaseRequest)
            /// The compare-and-set of the lease.
            case leaseWrite(LeaseRequest, start: Int)
            /// The newest snapshot head, before publishing one.
            case snapshotHead
            /// One chunk of the snapshot being published.
            case snapshotChunk
            /// The head of the snapshot being published.
            case snapshotHeadWrite
            /// A purge; its answer changes nothing.
            case purge
        }

        /// A reservation of replica ids in progress.
        struct LeaseRequest: Equatable {
            var from: Int
            var count: Int
            var answer: LeaseAnswer
            /// How many compare-and-sets lost to another hub so far (at most 8 are tried).
            var attempt: Int
        }

        /// A request in flight.
        struct Request {
            var purpose: Purpose
            /// What was asked, for messages (`STREAM.INFO.S`, a subject).
            var what: String
            var deadline: ContinuousClock.Instant
            /// The timeout, for the message when it passes.
            var timeout: Duration
        }

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
            /// The numbers ending the ack subjects of every copy sent (the newest last): the
            /// stream's answer to any copy counts.
            var ackNumbers: [Int] = []
            /// The hub's epoch when it was proposed (see `propose`).
            var epoch = 0
            /// When the newest copy was sent (a copy unanswered for ``resendAfter`` goes again).
            var sentAt: ContinuousClock.Instant
            /// The stream seq this hub had read through when the newest copy was sent: a refusal
            /// saying the stream ends before it says the stream lost what this hub read.
            var readThrough: UInt64 = 0
            /// When it was first proposed (unanswered for ``ackTimeout``, it is in doubt).
            var proposedAt: ContinuousClock.Instant
            var acknowledged = false
            /// The stream seq its acknowledgement named (0: none yet, or not read).
            var ackedStreamSeq: UInt64 = 0
            /// How many times it was sent: once re-sent, a refusal no longer proves that an
            /// earlier copy was not stored.
            var attempts = 0
        }

        /// A delivery held while the stream's leader is asked for its copy (``Purpose/verify(streamSeq:)``).
        struct Verifying {
            let message: NATSMessage
            let records: [LogRecord]
            let position: UInt64
            let request: Int
        }

        /// A shared snapshot being published: head read, chunks written one at a time, head written.
        struct SnapshotJob {
            let snapshot: StoredSnapshot
            let body: [UInt8]
            /// `seq.runID`: names this publication's chunks (the `StoreSync-Snapshot` header, and
            /// the head's `"tag"` member; not a record's tag).
            let publication: String
            let chunkSize: Int
            var headSubjectSeq: UInt64 = 0
            var first: UInt64 = 0
            var chunks = 0
            var offset = 0
        }

        // MARK: Configuration

        let configuration: SharedLogConfiguration
        let names: Names
        let history: String
        /// The keys records are tagged with.
        let keys: LogKeys
        /// Names this hub's proposals without a session (chosen once by the worker).
        let runID: String
        /// What this hub's consumers say about it (``LogPeer``).
        var consumerMetadata: JSON = [:]

        /// Where records and snapshots go (``StreamLayout``): learned from every `STREAM.INFO`
        /// answer, and changed (once, one way) by an upgrade.
        var layout: StreamLayout = .actions
        // MARK: State

        /// The link to NATS.
        private(set) var link: Link
        /// Whether a link was ever open (a later one is a reconnection: suspect for a while).
        private var everConnected = false
        private var backoff: Duration = .milliseconds(100)
        private var serverIndex = 0
        /// The last refusal of a server's release that was logged (once each, not per attempt).
        private var reportedUnsupported: String?
        /// Requests in flight, by the number ending their reply subject.
        private(set) var requests: [Int: Request] = [:]
        private var requestCounter = 0
        /// The consumer's deliver subject ("" when none): JetStream's own heartbeats and flow
        /// control come on it too.
        private(set) var deliverSubject = ""
        /// The name NATS gave the consumer reading now (deleted when the hub stops, so the
        /// stream's list of hubs loses it at once).
        private(set) var consumerName: String?
        private var consumerCounter = 0
        /// Counts consumers started and switches to record-by-record reads: what was held for
        /// one reading is not the order of the next.
        private var readGeneration = 0
        private var ackCounter = 0
        /// The hub seq of the next record the stream must deliver.
        private(set) var next: UInt64
        /// The stream sequence of the next message to read. Messages that are not valid
        /// records of this history (no tag or a bad one, malformed, not right after the last
        /// valid record) are skipped, by every hub alike, so it runs ahead of `next + 1`.
        private(set) var streamNext: UInt64
        /// The tag of the last valid record read ("" before the first): the next valid record
        /// is tagged on it.
        private var lastTag: String
        /// The stream sequence of the last valid record read (1, the genesis, before the first).
        private var lastValidStream: UInt64
        /// How many messages were skipped as not valid records (for `status`).
        private var skipped = 0
        /// The divergence check: the hash (``Digest/fnv1a64(_:)`` of the stored bytes, in hex)
        /// of the record at stream seq `lastValidStream` as this hub applied it (`nil` until
        /// it has read a record since it started). Every ``chainCheckInterval`` it is compared
        /// with the stream leader's copy: a NATS cluster that loses or replaces an acknowledged
        /// record after a server dies is found, never served as if nothing happened.
        private var lastReadHash: String? { lastReadPayload.map(Self.chainHash) }
        /// The stored bytes of that record (kept, not hashed, per record: hashed only when compared).
        private var lastReadPayload: [UInt8]?
        private var lastChainCheck: ContinuousClock.Instant
        /// Until when every record another hub wrote is checked against the stream leader's
        /// copy before it is applied (`nil`: not now). Set for ``suspectWindow`` after anything
        /// that shows the cluster was not whole: a reconnection, a consumer started again
        /// because it went quiet or skipped records, a proposal in doubt, or one refused after
        /// a server had delivered it. A server that was cut off can deliver, once the cluster is
        /// whole again, what it stored but the stream never committed.
        private var verifyUntil: ContinuousClock.Instant?
        /// The delivery being checked with the stream's leader (deliveries after it wait in `held`).
        private var verifying: Verifying?
        /// Proposals in flight, oldest first. The one place proposal state lives.
        private(set) var pending: [Pending] = []
        /// The hub epoch whose proposals are being dropped (see `propose`).
        private var droppedEpoch: Int?
        /// The stream seq reading was restarted at because a later record came first.
        private var gapAt: UInt64?
        /// Deliveries held back, oldest first, while this hub's oldest proposal, read back, waits
        /// for its acknowledgement (a server can deliver what the stream has not committed: a
        /// hub applies its own proposal only once the stream's leader acknowledged it at that
        /// seq), or while a delivery is being checked (``verifying``).
        private(set) var held: [NATSMessage] = []
        /// Reading record by record (`STREAM.MSG.GET`, answered by the stream's leader) because
        /// no consumer can be created now, or the consumer's server is behind. A consumer is
        /// tried again every ``consumerRetry``.
        private(set) var polling = false
        private var lastConsumerAttempt: ContinuousClock.Instant
        /// When `next` last moved.
        private var lastProgress: ContinuousClock.Instant
        /// Since when the stream has been known to hold records after `next` (`nil`: it is not).
        private var behindSince: ContinuousClock.Instant?
        private(set) var facts = Facts()
        /// Proposals may or may not have been stored; dispatches are refused until they are decided.
        private(set) var inDoubt = false
        /// After a link opened: the stream sequence of the stream's last message, to be read
        /// before accepting again.
        private var catchUpTarget: UInt64?
        private var lastDelivery: ContinuousClock.Instant
        private var lastResend: ContinuousClock.Instant
        /// When `status`'s facts about other hubs' work (trimming, shared snapshots) were last read.
        private var lastFactsRefresh: ContinuousClock.Instant
        private var unsessioned = 0
        /// What NATS said that would stop the hub, and since when it has said so.
        private var suspicion: (what: String, since: ContinuousClock.Instant)?
        /// Where recent messages end: (the last action seq of a message, its stream seq), oldest
        /// first, for trimming (`--retain-actions`), which purges whole messages.
        private var boundaries: [(lastSeq: UInt64, streamSeq: UInt64)] = []
        /// A publish was answered 503 (no server took it: the stream has no leader): dispatches
        /// are refused until the stream names a leader again or acknowledges a proposal, so an
        /// election costs one refusing→accepting transition, not one per dispatch.
        private(set) var awaitingLeader = false
        private var nextLeaderAsk: ContinuousClock.Instant
        /// How many times the stream's end was asked on this link without an answer, and when to ask again.
        private var openAsks = 0
        private var openAskAt: ContinuousClock.Instant?
        /// Reservations asked for while the link opens.
        private var waitingLeases: [LeaseRequest] = []
        /// The snapshot being published, and the newest one waiting for it to finish.
        private(set) var snapshotJob: SnapshotJob?
        private var nextSnapshot: StoredSnapshot?
        /// The facts and availability last handed to the hub.
        private var lastPublished: Facts?
        private var lastAvailable = false
        /// The effects of the input being handled.
        private var effects: [Effect] = []
        /// The time of the input being handled.
        private var now: ContinuousClock.Instant

        // MARK: Constants

        /// The header holding a record's tag (``LogKeys``).
        static let tagHeader = "StoreSync-Auth"
        /// How often the record at `next - 1` is compared with the stream leader's copy.
        static let chainCheckInterval: Duration = .seconds(2)
        /// How long records are checked after a sign the cluster was not whole.
        static let suspectWindow: Duration = .seconds(10)
        /// How long a consumer may send nothing while the stream holds records after `next`.
        static let readStall: Duration = .seconds(1)
        /// How often a consumer is tried again while reading record by record.
        static let consumerRetry: Duration = .seconds(5)
        /// How often `status`'s facts about other hubs' work are read again.
        static let factsRefreshInterval: Duration = .seconds(30)
        /// How long an acknowledgement may take before the proposal is in doubt.
        static let ackTimeout: Duration = .seconds(5)
        /// Silence from the consumer (no record, no heartbeat) that means it is gone: two and a
        /// half of its heartbeats (one a second).
        static let consumerSilence: Duration = .milliseconds(2_500)
        /// How long a copy of a proposal may go unanswered before it is sent again (same id,
        /// same expectations: a stored copy answers `duplicate`). A leader that died takes the
        /// copies sent to it along; the next leader gets them this long after it is elected, at most.
        static let resendAfter: Duration = .seconds(1)
        /// How often the stream is asked for its leader while it has none (a publish was answered 503).
        static let leaderAskInterval: Duration = .milliseconds(250)
        /// The longest wait for that answer.
        static let leaderAskTimeout: Duration = .milliseconds(500)
        /// The longest wait for the stream's end as a link opens.
        static let openAskTimeout: Duration = .seconds(1)
        /// How many times it is asked on one link (during an election) before the next server is tried.
        static let maxOpenAsks = 8
        /// How long NATS must keep saying the stream is gone or short before the hub believes it.
        static let confirmation: Duration = .seconds(10)
        /// The longest wait for a JetStream API answer.
        static let apiTimeout: Duration = .seconds(3)
        /// The longest wait for a snapshot chunk's acknowledgement.
        static let chunkTimeout: Duration = .seconds(5)
        /// The most boundaries kept.
        static let maxBoundaries = 200_000
        /// The most records read record by record in a row before the next tick.
        static let pollBurst = 256

        /// Creates the replicator of a history, reading from hub seq `next`, after `position`.
        ///
        /// - Parameters:
        ///   - configuration: The shared log's configuration (servers, keys, retention).
        ///   - names: The stream's names.
        ///   - history: The history id.
        ///   - next: The hub seq of the next record to read.
        ///   - position: Where the last record read ends in the stream, and its tag.
        ///   - runID: Names this hub's proposals that have no session (random, chosen once).
        ///   - now: The time it starts.
        init(configuration: SharedLogConfiguration, names: Names, history: String, next: UInt64, position: LogPosition,
             runID: String, now: ContinuousClock.Instant) {
            self.configuration = configuration
            self.names = names
            self.history = history
            self.keys = configuration.keys
            self.runID = runID
            self.next = next
            streamNext = position.streamSeq + 1
            lastTag = position.tag
            lastValidStream = position.streamSeq
            link = .down(retryAt: now)
            self.now = now
            lastChainCheck = now
            lastConsumerAttempt = now
            lastProgress = now
            lastDelivery = now
            lastResend = now
            lastFactsRefresh = now
            nextLeaderAsk = now
        }

        /// The chain hash of a record's stored bytes.
        static func chainHash(_ bytes: [UInt8]) -> String { Digest.hex(Digest.fnv1a64(bytes)) }

        /// Whether dispatches are accepted: connected, nothing in doubt, caught up.
        var isAvailable: Bool {
            if case .up = link { return !inDoubt && catchUpTarget == nil && !awaitingLeader }
            return false
        }

        /// Whether work the hub handed over is still being written (a shared snapshot): a
        /// stopping worker waits for it, a little.
        var isFinishing: Bool { snapshotJob != nil || nextSnapshot != nil }

        // MARK: Handling

        /// Handles one input.
        ///
        /// - Parameters:
        ///   - input: What happened.
        ///   - now: The time it happened (the machine reads no clock).
        /// - Returns: What the worker must do, in order.
        mutating func handle(_ input: Input, now: ContinuousClock.Instant) -> [Effect] {
            var effects: [Effect] = []
            handle(input, now: now, into: &effects)
            return effects
        }

        /// Handles one input, appending its effects to `effects` (the worker reuses one buffer:
        /// no allocation per message).
        ///
        /// - Parameters:
        ///   - input: What happened.
        ///   - now: The time it happened.
        ///   - effects: Where the effects go, in order.
        mutating func handle(_ input: Input, now: ContinuousClock.Instant, into effects: inout [Effect]) {
            self.now = now
            swap(&self.effects, &effects)
            defer { swap(&self.effects, &effects) }
            switch input {
            case .command(let command): handle(command)
            case .linkUp(let info): adopt(info)
            case .linkFailed(let error): connectFailed(error)
            case .linkDown(let reason): lost(reason)
            case .message(let message, let subscription): receive(message, on: subscription)
            case .tick: tick()
            }
            finishTurn()
        }

        private mutating func emit(_ events: [LogEvent]) {
            for event in events { effects.append(.post(event)) }
        }
        private mutating func note(_ line: String, _ level: HubLogger.Level = .info) { effects.append(.diagnostic(level, line)) }

        /// Hands the hub the facts `status` shows and whether dispatches are accepted, when
        /// either changed: the counts are derived here from the state, never kept twice.
        private mutating func finishTurn() {
            facts.connected = link.info != nil
            if let server = link.info?.server { facts.server = server }
            facts.readSeq = next &- 1
            facts.streamRead = streamNext &- 1
            facts.skipped = skipped
            facts.inDoubt = inDoubt
            facts.proposals = pending.count
            facts.held = held.count
            facts.polling = polling
            let available = isAvailable
            guard facts != lastPublished || available != lastAvailable else { return }
            lastPublished = facts
            lastAvailable = available
            effects.append(.facts(facts, available: available))
        }

        // MARK: Requests

        /// Sends a request on this machine's inbox.
        private mutating func request(_ purpose: Purpose, subject: String, headers: NATSHeaders? = nil, payload: [UInt8],
                                      timeout: Duration = apiTimeout, what: String? = nil) {
            guard let info = link.info else { return }
            requestCounter += 1
            requests[requestCounter] = Request(purpose: purpose, what: what ?? subject, deadline: now + timeout, timeout: timeout)
            effects.append(.publish(subject: subject, reply: info.inboxPrefix + ".q." + String(requestCounter), headers: headers,
                                    payload: payload))
        }

        /// Calls the JetStream API (`$JS.API.<api>` with a JSON body).
        private mutating func jetStream(_ api: String, _ body: JSON?, for purpose: Purpose, timeout: Duration = apiTimeout) {
            request(purpose, subject: "$JS.API." + api, payload: body?.canonicalBytes ?? [], timeout: timeout, what: api)
        }

        /// Whether a request for something like `purpose` is in flight.
        private func isAsking(_ matches: (Purpose) -> Bool) -> Bool {
            requests.values.contains { matches($0.purpose) }
        }

        /// A reply to one of this machine's requests.
        private mutating func replied(_ message: NATSMessage, prefix: String) {
            guard let id = Int(message.subject.dropFirst(prefix.count)), let request = requests.removeValue(forKey: id) else { return }
            answered(request.purpose, id: id, message.jetStreamAnswer(to: request.what))
        }

        /// Requests whose deadline passed are answered as timeouts.
        private mutating func expireRequests() {
            guard requests.values.contains(where: { $0.deadline <= now }) else { return }
            let expired = requests.filter { $0.value.deadline <= now }.sorted { $0.key < $1.key }
            for (id, request) in expired {
                requests[id] = nil
                let milliseconds = request.timeout.components.seconds * 1000 + request.timeout.components.attoseconds / 1_000_000_000_000_000
                answered(request.purpose, id: id,
                         .failure(NATSError(.timeout, "no answer from NATS to \(request.what) within \(milliseconds) ms")))
                guard link.info != nil else { return }
            }
        }

        /// Handles the answer to a request.
        private mutating func answered(_ purpose: Purpose, id: Int, _ answer: Result<JSON, NATSError>) {
            switch purpose {
            case .consumer(let subject): consumerCreated(subject: subject, answer)
            case .openInfo(let readThrough): openInfoAnswered(answer, readThrough: readThrough)
            case .streamEnd(let recheck, let readThrough, let believed):
                streamEndAnswered(answer, recheck: recheck, readThrough: readThrough, believed: believed)
            case .poll(let streamSeq): polled(streamSeq: streamSeq, answer)
            case .verify(let streamSeq): verified(streamSeq: streamSeq, id: id, answer)
            case .chainCheck(let streamSeq, let applied): chainChecked(streamSeq: streamSeq, applied: applied, answer)
            case .leader: leaderAnswered(answer)
            case .firstSeq: firstSeqAnswered(answer)
            case .sharedHead: sharedHeadAnswered(answer)
            case .leaseRead(let lease): leaseRead(lease, answer)
            case .leaseWrite(let lease, let start): leaseWritten(lease, start: start, answer)
            case .snapshotHead: snapshotHeadRead(answer)
            case .snapshotChunk: snapshotChunkWritten(answer)
            case .snapshotHeadWrite: snapshotHeadWritten(answer)
            case .purge: break
            case .hubs(let number, let offset, let pages, let found): hubsListed(number: number, offset: offset, pages: pages, found: found, answer)
            case .moveInfo(let number): moveInfoAnswered(number: number, answer)
            case .moveUpdate(let number): moveUpdateAnswered(number: number, answer)
            }
        }

        /// Whether a request's failure may pass by itself: no answer in time, no responders, or
        /// JetStream saying it is unavailable for now (an election, a catch-up).
        static func isTransient(_ error: NATSError) -> Bool {
            switch error.kind {
            case .timeout, .noResponders: return true
            case .api(_, let code): return code == JetStreamErrorCode.temporarilyUnavailable || code == JetStreamErrorCode.notCurrentlyAvailable
            default: return false
            }
        }

        /// Requests in flight when the link drops: none will be answered. Waiters are told.
        private mutating func abandonRequests(_ reason: String) {
            let abandoned = requests.sorted { $0.key < $1.key }
            requests.removeAll()
            let leases = waitingLeases
            waitingLeases.removeAll()
            for lease in leases { answerLease(lease, .failure(StorageError("cannot reserve replica ids in the shared log: \(reason)"))) }
            let questions = waitingQuestions
            waitingQuestions.removeAll()
            for (question, number) in questions { answer(question, number: number, failure: reason) }
            for (_, request) in abandoned {
                switch request.purpose {
                case .leaseRead(let lease), .leaseWrite(let lease, _):
                    answerLease(lease, .failure(StorageError("cannot reserve replica ids in the shared log: \(reason)")))
                case .hubs(let number, _, _, _):
                    effects.append(.answer(.hubs(.failure(StorageError("the shared log did not list its hubs: \(reason)"))), number: number))
                case .moveInfo(let number), .moveUpdate(let number):
                    effects.append(.answer(.moved(.failure(StorageError("the stream was not moved to the records layout: \(reason)"))), number: number))
                case .snapshotHead, .snapshotChunk, .snapshotHeadWrite:
                    if let job = snapshotJob {
                        note("could not publish the shared snapshot at seq \(job.snapshot.seq): \(reason)")
                        snapshotJob = nil
                    }
                default:
                    break
                }
            }
        }

        // MARK: The link

        /// A connection is open: subscribe the acknowledgements and replies, start a consumer,
        /// and ask where the stream ends.
        private mutating func adopt(_ info: LinkInfo) {
            guard link == .connecting || !everConnected else {
                // Not asked for (or halted meanwhile): the worker closes it.
                effects.append(.close)
                return
            }
            if everConnected {
                note("reconnected to the shared log at \(info.server); reading from seq \(next)", .notice)
                suspect()
            }
            everConnected = true
            link = .opening(info)
            effects.append(.subscribe(info.inboxPrefix + ".a.*"))
            effects.append(.subscribe(info.inboxPrefix + ".q.*"))
            startConsumer()
            openAsks = 0
            openAskAt = nil
            jetStream("STREAM.INFO." + names.stream, nil, for: .openInfo(readThrough: streamNext &- 1), timeout: Self.openAskTimeout)
        }

        private mutating func openInfoAnswered(_ answer: Result<JSON, NATSError>, readThrough: UInt64) {
            guard case .opening(let info) = link else { return }
            switch answer {
            case .failure(let error) where error.kind == .api(code: 404, errCode: JetStreamErrorCode.streamNotFound):
                // A stream is taken as deleted only when NATS still says so 10 s on (a cluster
                // electing can answer from a server without the stream).
                if confirmed("gone") { streamGone() } else { lost("NATS says the stream \(names.stream) does not exist; asking again") }
            case .failure(let error) where Self.isTransient(error) && openAsks < Self.maxOpenAsks:
                // An election: asked again shortly, on this server (a server cut off from the
                // others never answers, and is left after a few tries).
                openAsks += 1
                openAskAt = now + Self.leaderAskInterval
            case .failure(let error):
                lost(error.message)
            case .success(let json):
                if JetStreamLog.isLeaderlessAnswer(json) {
                    // One member's own copy (seen after a server died: a member that had been
                    // cut off answered with a stream shorter than what the hubs had read).
                    lost("the stream \(names.stream) has no leader now (its servers are electing one); asking again")
                    return
                }
                let last = JetStreamLog.lastStreamSeq(in: json)
                if last < readThrough {
                    streamEnds(at: last, readThrough: readThrough, says: "the stream \(names.stream) says")
                    return
                }
                facts.streamLast = max(facts.streamLast, last)
                noteLeader(json)
                catchUpTarget = last >= streamNext ? last : nil
                refreshFirstSeq()
                link = .up(info)
                suspicion = nil
                backoff = .milliseconds(100)
                // What was in flight when the link dropped goes again, with the same ids and
                // expectations: stored ones come back as duplicates, overtaken ones as conflicts.
                resendPending()
                let leases = waitingLeases
                waitingLeases.removeAll()
                for lease in leases { readLease(lease) }
                let questions = waitingQuestions
                waitingQuestions.removeAll()
                for (question, number) in questions { ask(question, number: number) }
                // A snapshot handed over while the link was down goes now.
                if snapshotJob == nil, let waiting = nextSnapshot {
                    nextSnapshot = nil
                    startSnapshot(waiting)
                }
                updateAvailability()
            }
        }

        /// The link is gone: what was in flight is in doubt; reconnect after a back-off.
        private mutating func lost(_ reason: String) {
            // Once per link: the rest of a batch read before the drop may call it again.
            guard link.info != nil || link == .connecting else { return }
            effects.append(.close)
            link = .down(retryAt: now + backoff)
            backoff = min(backoff * 2, .seconds(2))
            deliverSubject = ""
            readGeneration += 1
            held.removeAll()
            verifying = nil
            polling = false
            abandonRequests("the link to NATS dropped: \(reason)")
            if !pending.isEmpty || !inDoubt {
                emit([.inDoubt(from: pending.first?.record.seq ?? next, reason: "the link to NATS dropped: \(reason)")])
            }
            inDoubt = true
            note("lost the shared log (\(reason)); reconnecting", .notice)
        }

        private mutating func connectFailed(_ error: NATSError) {
            guard link == .connecting else { return }
            if error.kind == .unsupported, reportedUnsupported != error.message {
                reportedUnsupported = error.message
                note(error.message)
            }
            link = .down(retryAt: now + backoff)
            backoff = min(backoff * 2, .seconds(2))
        }

        /// Asks the worker to connect, starting with the next server (so a dead one is not tried
        /// first every time).
        private mutating func reconnect() {
            let servers = configuration.servers
            guard !servers.isEmpty else { return }
            let index = serverIndex % servers.count
            serverIndex = (index + 1) % servers.count
            link = .connecting
            effects.append(.connect(servers: Array(servers[index...] + servers[..<index])))
        }

        /// Checks every record another hub wrote against the stream's leader for a while.
        private mutating func suspect() {
            verifyUntil = now + Self.suspectWindow
        }

        /// Whether NATS has kept saying `what` for ``confirmation`` (across reconnects).
        private mutating func confirmed(_ what: String) -> Bool {
            guard let suspicion, suspicion.what == what else {
                self.suspicion = (what, now)
                return false
            }
            return now - suspicion.since >= Self.confirmation
        }

        /// Stops for good: the link is closed, what was in flight or held is dropped (nothing
        /// built on a broken history is sent again), and it never reconnects.
        private mutating func halt() {
            if link.info != nil || link == .connecting { effects.append(.close) }
            link = .halted
            deliverSubject = ""
            pending.removeAll()
            held.removeAll()
            verifying = nil
            polling = false
            abandonRequests("the shared log stopped: this hub's history is broken")
            snapshotJob = nil
            nextSnapshot = nil
        }

        /// The stream was deleted under the hub: nothing it holds can be trusted to go on.
        private mutating func streamGone() {
            halt()
            emit([.broken(StorageError("the stream \(names.stream) no longer exists on NATS (it was deleted); the hub stops rather than start a new history under its replicas. Restore the stream, or start the hubs on a new one"))])
        }

        // MARK: Reading

        /// Starts a consumer delivering from `streamNext` (the previous one, if any, is left).
        private mutating func startConsumer() {
            guard let info = link.info else { return }
            lastConsumerAttempt = now
            if !deliverSubject.isEmpty { effects.append(.unsubscribe(deliverSubject)) }
            held.removeAll()
            verifying = nil
            readGeneration += 1
            consumerCounter += 1
            let deliver = info.inboxPrefix + ".d." + String(consumerCounter)
            deliverSubject = deliver
            effects.append(.subscribe(deliver))
            jetStream("CONSUMER.CREATE." + names.stream,
                      JetStreamLog.readingConsumer(names: names, deliver: deliver, from: streamNext, metadata: consumerMetadata),
                      for: .consumer(subject: deliver))
            lastDelivery = now
        }

        private mutating func consumerCreated(subject: String, _ answer: Result<JSON, NATSError>) {
            guard subject == deliverSubject else { return }
            switch answer {
            case .success(let json):
                // Only a name NATS could have given goes into a subject later (the delete).
                consumerName = json["name"]?.stringValue.flatMap { name in
                    name.utf8.count <= 256 && !name.isEmpty && name.utf8.allSatisfy { byte in
                        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                            || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
                    } ? name : nil
                }
                lastDelivery = now
                if polling { note("reading the shared log with a consumer again, from seq \(next)") }
                polling = false
            case .failure(let error) where error.kind == .timeout || error.kind == .noResponders
                || error.kind == .api(code: 503, errCode: JetStreamErrorCode.temporarilyUnavailable)
                || error.kind == .api(code: 500, errCode: JetStreamErrorCode.temporarilyUnavailable):
                // Consumers need the cluster's JetStream meta leader, which a cluster that lost a
                // node can take long to elect while the stream itself works.
                readRecordByRecord()
                if !polling {
                    note("NATS cannot create a consumer now (\(error.message)); reading the shared log record by record until it can")
                }
                polling = true
                pollNext()
            case .failure(let error) where error.kind == .api(code: 404, errCode: JetStreamErrorCode.streamNotFound):
                // As when a link opens: a stream is taken as deleted only when NATS still says
                // so 10 s on.
                if confirmed("gone") { streamGone() } else { lost("NATS says the stream \(names.stream) does not exist; asking again") }
            case .failure(let error):
                lost(error.message)
            }
        }

        /// Leaves the consumer and reads record by record from the stream's leader.
        private mutating func readRecordByRecord() {
            if !deliverSubject.isEmpty { effects.append(.unsubscribe(deliverSubject)) }
            deliverSubject = ""
            held.removeAll()
            verifying = nil
            readGeneration += 1
            lastConsumerAttempt = now
        }

        /// Asks for the next record, when reading record by record and nothing waits.
        private mutating func pollNext() {
            guard polling, case .some = link.info, held.isEmpty, verifying == nil,
                  !isAsking({ if case .poll = $0 { return true } else { return false } }) else { return }
            jetStream("STREAM.MSG.GET." + names.stream, ["seq": JSON(streamNext)], for: .poll(streamSeq: streamNext))
        }

        private var polledInARow = 0

        private mutating func polled(streamSeq: UInt64, _ answer: Result<JSON, NATSError>) {
            guard polling, streamSeq == streamNext else { return }
            switch answer {
            case .failure(let error) where error.kind == .api(code: 404, errCode: JetStreamErrorCode.noMessageFound):
                // Not written yet, or this hub believes in records the stream does not hold.
                if facts.streamLast >= streamNext { askStreamEnd(recheck: true) }
                polledInARow = 0
            case .failure(let error) where Self.isTransient(error):
                // An election, or the leader busy: asked again on the next tick.
                polledInARow = 0
            case .failure(let error):
                lost(error.message)
            case .success(let json):
                guard let message = json["message"], let seq = message["seq"]?.uint64Value, seq >= 1,
                      let subject = message["subject"]?.stringValue else { return }
                let payload = message["data"]?.stringValue.flatMap { Data(base64Encoded: $0) }.map { [UInt8]($0) } ?? []
                let headers = message["hdrs"]?.stringValue.flatMap { Data(base64Encoded: $0) }
                    .flatMap { NATSHeaders.decode([UInt8]($0)[...]) }
                // The reply subject a push consumer would give it: the stream seq is read from it.
                let reply = "$JS.ACK.\(names.stream).poll.1.\(seq).1.0.0"
                lastDelivery = now
                let before = streamNext
                delivered(NATSMessage(subject: subject, sid: 0, reply: reply, headers: headers, payload: payload))
                polledInARow += 1
                if streamNext != before, polledInARow < Self.pollBurst { pollNext() } else { polledInARow = 0 }
            }
        }

        private mutating func receive(_ message: NATSMessage, on subscription: String) {
            guard let info = link.info else { return }
            if !deliverSubject.isEmpty, subscription == deliverSubject {
                lastDelivery = now
                if let replies = JetStreamLog.controlReplies(message, deliverSubject: deliverSubject) {
                    for reply in replies { effects.append(.publish(subject: reply, reply: nil, headers: nil, payload: [])) }
                    if let last = message.headers?["Nats-Last-Stream"].flatMap({ UInt64($0) }), last >= 1 {
                        facts.streamLast = max(facts.streamLast, last)
                        if let target = catchUpTarget, streamNext > target { catchUpTarget = nil }
                    }
                    return
                }
                delivered(message)
            } else if subscription == info.inboxPrefix + ".a.*" {
                acknowledged(message)
            } else if subscription == info.inboxPrefix + ".q.*", message.subject.hasPrefix(info.inboxPrefix + ".q.") {
                replied(message, prefix: info.inboxPrefix + ".q.")
            }
        }

        private mutating func delivered(_ message: NATSMessage) {
            guard held.isEmpty, verifying == nil else {
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
                    startConsumer()
                }
                // Before `streamNext`: read already (a consumer started again delivers it again).
                return
            }
            gapAt = nil
            // This hub's own oldest proposal read back: its bytes and tag at the place it was
            // meant for. It is applied from the hub's copy, so the record is not decoded again.
            if let first = pending.first, position == first.expectedStream + 1, first.record.seq == next,
               message.subject == names.actions || message.subject == names.records, message.payload == first.payload,
               message.headers?[Self.tagHeader] == first.tag {
                guard mayApply(first, delivered: message) else { return }
                pending.removeFirst()
                advance(seq: first.lastSeq, tag: first.tag, at: position, payload: message.payload, subject: message.subject)
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
            guard !records.isEmpty else { return }
            if let until = verifyUntil {
                if now >= until {
                    verifyUntil = nil
                } else {
                    // Held until the stream's leader says it holds these very bytes there.
                    jetStream("STREAM.MSG.GET." + names.stream, ["seq": JSON(position)], for: .verify(streamSeq: position))
                    verifying = Verifying(message: message, records: records, position: position, request: requestCounter)
                    return
                }
            }
            apply(message, records: records, at: position)
        }

        /// Applies a valid record batch read at `position`.
        private mutating func apply(_ message: NATSMessage, records: [LogRecord], at position: UInt64) {
            guard let record = records.first, let lastSeq = records.last?.seq else { return }
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
            advance(seq: lastSeq, tag: tag, at: position, payload: message.payload, subject: message.subject)
            for record in records { effects.append(.post(.appended(record))) }
            effects.append(.post(.position(LogPosition(seq: lastSeq, streamSeq: position, tag: tag))))
            updateAvailability()
        }

        /// The leader's copy of a held delivery: applied when it is the same bytes, read again
        /// from the stream otherwise.
        private mutating func verified(streamSeq: UInt64, id: Int, _ answer: Result<JSON, NATSError>) {
            guard let held = verifying, held.request == id else { return }
            verifying = nil
            let copy: [UInt8]?
            switch answer {
            case .success(let json):
                copy = json["message"]?["data"]?.stringValue.flatMap { Data(base64Encoded: $0) }.map { [UInt8]($0) }
            case .failure(let error) where error.kind == .api(code: 404, errCode: JetStreamErrorCode.noMessageFound):
                copy = nil
            case .failure(let error) where Self.isTransient(error):
                // No leader to ask now (an election): asked again on the next tick, the delivery still held.
                verifying = Verifying(message: held.message, records: held.records, position: held.position, request: 0)
                return
            case .failure(let error):
                lost("cannot check seq \(streamSeq) with the stream's leader: \(error.message)")
                return
            }
            guard let copy, copy == held.message.payload else {
                readAgain(because: "a NATS server delivered, as stream seq \(streamSeq), a message the stream's leader \(copy == nil ? "does not hold" : "holds otherwise") (a server that was cut off delivering what the stream never took)")
                return
            }
            apply(held.message, records: held.records, at: held.position)
            releaseHeld()
            pollNext()
        }

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
        private mutating func advance(seq: UInt64, tag: String, at position: UInt64, payload: [UInt8], subject: String) {
            // A valid record on `…records` says the stream moved (an upgrade): from here on this
            // hub writes records and snapshots there too, before anything it does after reading
            // the record (a follower's snapshot of the migrated state must never go where older
            // hubs read).
            if subject == names.records { adoptRecordsLayout() }
            boundaries.append((seq, position))
            if boundaries.count > Self.maxBoundaries { boundaries.removeFirst(Self.maxBoundaries / 2) }
            lastReadPayload = payload
            next = seq &+ 1
            streamNext = position &+ 1
            lastTag = tag
            lastValidStream = position
            lastProgress = now
            if facts.firstSeq == 0 { facts.firstSeq = seq }
            if let target = catchUpTarget, streamNext > target { catchUpTarget = nil }
        }

        /// The message at `position` is not a valid record of this history: every hub skips it
        /// alike. This hub's oldest proposal, meant for that place, was not stored there.
        private mutating func skip(at position: UInt64, because reason: StorageError) {
            streamNext = position &+ 1
            skipped += 1
            lastProgress = now
            if let target = catchUpTarget, streamNext > target { catchUpTarget = nil }
            if skipped <= 100 || skipped % 1000 == 0 {
                note("skipped stream seq \(position) of \(names.stream) (\(skipped) so far): \(reason.message); every hub of the stream skips it alike", .warning)
            }
            if let first = pending.first, first.expectedStream + 1 == position {
                void(from: 0, .conflict(from: first.record.seq, logLast: next - 1))
            }
        }

        /// Whether this hub's own proposal, read back from the stream, may be applied: only once
        /// the stream's leader acknowledged it at that seq. Before, the delivery is held (and
        /// those after it); acknowledged elsewhere, the seq is read again from the stream.
        private mutating func mayApply(_ first: Pending, delivered message: NATSMessage) -> Bool {
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

        /// Goes on with the deliveries held, once nothing holds them: the oldest proposal is
        /// acknowledged and no delivery is being checked.
        private mutating func releaseHeld() {
            guard !held.isEmpty, verifying == nil, pending.first?.acknowledged ?? true else { return }
            let messages = held
            held.removeAll()
            let generation = readGeneration
            for message in messages {
                // Delivering one may drop the link or start reading again from `next`: the
                // others are then not the order being read any more. One that is held again
                // holds the rest behind it (`delivered` appends them, in order).
                guard link.info != nil, readGeneration == generation else { return }
                delivered(message)
            }
        }

        /// Drops what was read from `next` on and reads it again from the stream (with a new
        /// consumer), when what a server delivered is not what the stream's leader answered.
        private mutating func readAgain(because reason: String) {
            suspect()
            note("\(reason); reading the stream again from seq \(next)", .warning)
            if polling {
                readRecordByRecord()
                pollNext()
            } else {
                startConsumer()
            }
        }

        // MARK: The stream's end

        private mutating func askStreamEnd(recheck: Bool) {
            guard !isAsking({ if case .streamEnd = $0 { return true } else { return false } }) else { return }
            jetStream("STREAM.INFO." + names.stream, nil,
                      for: .streamEnd(recheck: recheck, readThrough: streamNext &- 1, believed: facts.streamLast))
        }

        /// The stream's end as its leader gives it (a leaderless answer is one member's copy,
        /// and ignored): learnt when further than this hub knew; with `recheck`, believed when
        /// nearer.
        ///
        /// A leader about to be deposed can acknowledge a proposal the stream never keeps, and
        /// a server ahead of the stream can report records as pending: believed, they would keep
        /// the read-stall check switching to record-by-record reads forever, and the
        /// acknowledged proposal would wait for a delivery that never comes. The leader's answer
        /// lowers what the hub believes; this hub's proposals acknowledged beyond it are in doubt
        /// again (re-sent with their ids, so one the stream did keep comes back a duplicate); a
        /// stream that ends before what this hub has read is handled as when a link opens.
        private mutating func streamEndAnswered(_ answer: Result<JSON, NATSError>, recheck: Bool, readThrough: UInt64,
                                                believed: UInt64) {
            guard case .success(let info) = answer, !JetStreamLog.isLeaderlessAnswer(info) else { return }
            noteLeader(info)
            let last = JetStreamLog.lastStreamSeq(in: info)
            guard recheck else {
                if last > facts.streamLast {
                    facts.streamLast = last
                }
                return
            }
            if last < readThrough {
                streamEnds(at: last, readThrough: readThrough, says: "the stream \(names.stream) says")
                return
            }
            // Only what was believed when asking is put in question: an acknowledgement that
            // came meanwhile is newer than the answer.
            guard last < believed, facts.streamLast == believed else { return }
            note("the stream \(names.stream) ends at stream seq \(last), not at the stream seq \(facts.streamLast) NATS had reported; proposals acknowledged after it are in doubt and are sent again")
            facts.streamLast = last
            for index in pending.indices where pending[index].acknowledged && pending[index].expectedStream + 1 > last {
                pending[index].acknowledged = false
                pending[index].ackedStreamSeq = 0
            }
        }

        /// No server took a proposal (503), or the stream refused one for want of a leader or of
        /// servers: refuse until the stream names a leader again (asked every 250 ms).
        private mutating func awaitLeader() {
            guard !awaitingLeader else { return }
            awaitingLeader = true
            facts.leader = ""
            nextLeaderAsk = now + Self.leaderAskInterval
        }

        /// The stream has a leader (it answered for a proposal, or named one).
        private mutating func leaderFound() {
            guard awaitingLeader else { return }
            awaitingLeader = false
            note("the stream \(names.stream) has a leader again", .notice)
        }

        private mutating func leaderAnswered(_ answer: Result<JSON, NATSError>) {
            guard case .success(let info) = answer, !JetStreamLog.isLeaderlessAnswer(info) else { return }
            noteLeader(info)
            leaderFound()
        }

        /// The stream moved to ``StreamLayout/records`` (learned from `STREAM.INFO`, or from a
        /// valid record read there): one way, said once.
        private mutating func adoptRecordsLayout() {
            guard layout == .actions else { return }
            layout = .records
            note("the stream \(names.stream) was moved to the records layout (an upgrade): records go on \(names.records) from now on", .notice)
        }

        /// Keeps the stream leader's name from a `STREAM.INFO` answer (for `status`).
        private mutating func noteLeader(_ info: JSON) {
            if StreamLayout.of(info, names: names) == .records { adoptRecordsLayout() }
            let name = info["cluster"]?["leader"]?.stringValue ?? ""
            guard name != facts.leader else { return }
            facts.leader = String(name.prefix(256))
        }

        /// NATS (`who` says) that the stream ends at stream seq `last`, before what this hub has
        /// read: the hub stops once NATS has kept saying so for 10 s across reconnects (a cluster
        /// electing, or a leader not yet deposed, answers from one server's copy); until then the
        /// link is dropped and asked again.
        private mutating func streamEnds(at last: UInt64, readThrough: UInt64, says who: String) {
            if confirmed("short") {
                emit([.broken(StorageError("the stream \(names.stream) ends at stream seq \(last), but this hub has read up to stream seq \(readThrough) (action seq \(next - 1)) from it: NATS delivered actions it did not keep — records a stream leader stored before the others agreed, then died, or acknowledged actions lost (a server restarted without its data, or the stream was replaced). The hub stops rather than serve a history the stream does not hold; restart it and it rebuilds from the stream (its replicas re-hydrate). See docs/OPERATIONS.md, \"Across hosts\" (use --nats-replicas 3)"))])
            } else {
                lost("\(who) it ends at stream seq \(last), before the stream seq \(readThrough) this hub has read; asking again")
            }
        }

        /// The stream's leader stored a message at stream seq `streamSeq`: the stream holds at
        /// least that much (for the read-stall check and `status`).
        private mutating func noteStreamHolds(_ streamSeq: UInt64) {
            facts.streamLast = max(facts.streamLast, streamSeq)
        }

        private mutating func chainChecked(streamSeq: UInt64, applied: String, _ answer: Result<JSON, NATSError>) {
            // No answer now (an election): skip a round rather than take an idle hub off line.
            // Trimmed, or an answer without data: nothing to compare with.
            guard case .success(let json) = answer, !halted,
                  let data = json["message"]?["data"]?.stringValue.flatMap({ Data(base64Encoded: $0) }) else { return }
            let stream = Self.chainHash([UInt8](data))
            guard stream != applied else { return }
            // This hub applied, at that seq, a record the stream no longer holds: it stops (its
            // local snapshots, which may hold that record's effect, are discarded), so that a
            // restart reads the stream's history and its replicas re-hydrate.
            let seq = boundaries.last(where: { $0.streamSeq == streamSeq })?.lastSeq ?? (next - 1)
            halt()
            var error = StorageError("the stream \(names.stream) now holds another record at action seq \(seq) than the one this hub applied (hash \(applied), the stream's \(stream)): NATS lost or replaced an acknowledged action, or delivered one it never committed, around a server failure. The hub stops rather than serve a history the stream and the other hubs do not have, and discards its local snapshots; restart it and it rebuilds from the stream (its replicas re-hydrate). See docs/OPERATIONS.md, \"Across hosts\"", isDataProblem: false)
            error.discardsLocalSnapshots = true
            emit([.broken(error)])
        }

        private var halted: Bool { link == .halted }

        // MARK: Timers

        private mutating func tick() {
            expireRequests()
            switch link {
            case .halted, .connecting:
                return
            case .down(let retryAt):
                if now >= retryAt { reconnect() }
                return
            case .opening, .up:
                break
            }
            if case .opening = link, let at = openAskAt, now >= at, !isAsking({ if case .openInfo = $0 { return true } else { return false } }) {
                openAskAt = nil
                jetStream("STREAM.INFO." + names.stream, nil, for: .openInfo(readThrough: streamNext &- 1), timeout: Self.openAskTimeout)
            }
            if facts.streamLast >= streamNext {
                if behindSince == nil { behindSince = now }
            } else {
                behindSince = nil
            }
            if let oldest = pending.first(where: { !$0.acknowledged }), now - oldest.proposedAt > Self.ackTimeout, !inDoubt {
                inDoubt = true
                suspect()
                emit([.inDoubt(from: oldest.record.seq, reason: "no acknowledgement from the stream's leader within 5 s (an election, or too few of its servers up for a quorum)")])
            }
            if case .up = link, now - lastResend >= Self.resendAfter {
                lastResend = now
                for index in pending.indices where !pending[index].acknowledged && now - pending[index].sentAt >= Self.resendAfter {
                    var item = pending[index]
                    send(&item)
                    pending[index] = item
                }
            }
            if awaitingLeader, now >= nextLeaderAsk {
                nextLeaderAsk = now + Self.leaderAskInterval
                // Asked every 250 ms whatever is in flight (a question asked during the election
                // may go unanswered; the next one must not wait behind it), each for 500 ms.
                jetStream("STREAM.INFO." + names.stream, nil, for: .leader, timeout: Self.leaderAskTimeout)
            }
            if let held = verifying, held.request == 0 {
                jetStream("STREAM.MSG.GET." + names.stream, ["seq": JSON(held.position)], for: .verify(streamSeq: held.position))
                verifying = Verifying(message: held.message, records: held.records, position: held.position, request: requestCounter)
            }
            if now - lastChainCheck > Self.chainCheckInterval {
                lastChainCheck = now
                if let mine = lastReadHash, next >= 2, !polling, held.isEmpty, verifying == nil,
                   !isAsking({ if case .chainCheck = $0 { return true } else { return false } }) {
                    jetStream("STREAM.MSG.GET." + names.stream, ["seq": JSON(lastValidStream)],
                              for: .chainCheck(streamSeq: lastValidStream, applied: mine))
                }
                // A consumer on a server whose copy is behind sends heartbeats and nothing else;
                // a hub that only reads would never learn the stream went on. Quiet for a while:
                // ask the leader where the stream ends (the read-stall check takes it from there).
                if !polling, now - lastProgress > Self.readStall { askStreamEnd(recheck: false) }
            }
            if now - lastFactsRefresh > Self.factsRefreshInterval {
                lastFactsRefresh = now
                refreshSharedFacts()
            }
            if polling {
                pollNext()
                if now - lastConsumerAttempt > Self.consumerRetry,
                   !isAsking({ if case .consumer = $0 { return true } else { return false } }) {
                    startConsumer()
                }
            } else if now - lastDelivery > Self.consumerSilence {
                // The consumer went quiet (its server died, or it was removed): start another
                // where the stream was left off.
                suspect()
                startConsumer()
            } else if held.isEmpty, verifying == nil, let since = behindSince, now - max(since, lastProgress) > Self.readStall,
                      now - lastConsumerAttempt > Self.readStall {
                // The stream holds records after `next` (its leader acknowledged one, or the
                // consumer said more are pending), yet the consumer, still sending heartbeats,
                // sends none: its server's copy is behind the stream (seen after a NATS node
                // died). Read them from the leader, record by record; a consumer is tried again
                // in 5 s.
                note("the stream \(names.stream) holds stream seq \(facts.streamLast), but its consumer sent nothing after stream seq \(streamNext - 1) for \(Self.readStall); reading the stream record by record from its leader")
                suspect()
                readRecordByRecord()
                polling = true
                lastProgress = now
                pollNext()
            }
            updateAvailability()
        }

        private mutating func updateAvailability() {
            if inDoubt, case .up = link, pending.allSatisfy({ $0.acknowledged }), catchUpTarget == nil {
                inDoubt = false
                note("the shared log is back at seq \(next - 1)", .notice)
            }
        }

        // MARK: Commands

        private mutating func handle(_ command: Command) {
            if halted {
                // Nothing built on a broken history goes out; a waiting lease or question is answered.
                if case .lease(_, _, .waiter) = command {
                    effects.append(.finishLease(.failure(StorageError("the shared log stopped: this hub's history is broken"))))
                }
                if case .ask(let question, let number) = command {
                    answer(question, number: number, failure: "the shared log stopped: this hub's history is broken")
                }
                return
            }
            switch command {
            case .propose(let records, let expectingLast, let epoch):
                propose(records, expectingLast: expectingLast, epoch: epoch)
            case .snapshot(let snapshot):
                if snapshotJob == nil { startSnapshot(snapshot) } else { nextSnapshot = snapshot }
            case .ask(let question, let number):
                switch link {
                case .up: ask(question, number: number)
                // Asked as the link opens (`hubd --upgrade`): answered once it is up.
                case .opening: waitingQuestions.append((question, number))
                case .down, .connecting, .halted: answer(question, number: number, failure: "the shared log is unreachable")
                }
            case .lease(let from, let count, let answer):
                let lease = LeaseRequest(from: from, count: count, answer: answer, attempt: 0)
                switch link {
                case .up: readLease(lease)
                // Asked for as the link opens (a hub's first replica): answered once it is up.
                case .opening: waitingLeases.append(lease)
                case .down, .connecting, .halted: answerLease(lease, .failure(StorageError("the shared log is unreachable")))
                }
            }
        }

        /// Proposes records, cut into batches, each chained on what it follows.
        ///
        /// Proposed before the hub read records this machine has already delivered (the first
        /// one's seq is taken), they are dropped: the hub voids them when it reads those
        /// records. Sent, they could only be refused, and a refusal that reached the hub after it
        /// had moved on would void its newer proposals. So is the rest of their epoch (each
        /// built on the state the dropped one made: sent, a later one could be stored on top of
        /// a record that is not its predecessor).
        private mutating func propose(_ records: [LogRecord], expectingLast: UInt64, epoch: Int) {
            if droppedEpoch == epoch { return }
            if let first = records.first, first.seq < next {
                droppedEpoch = epoch
                return
            }
            var expected = expectingLast
            for (batch, payload) in Self.batches(records, maxBytes: batchBytes) {
                guard let record = batch.first else { continue }
                // What it follows: the last record read, or (pipelined) this hub's own proposal
                // of the seq before. Its tag chains on that one's, so stored anywhere else (after
                // another hub's record) it is not valid, and every hub skips it: no
                // Nats-Expected-Last-Msg-Id is needed (2.14+ wedge on it).
                let base: (stream: UInt64, tag: String)
                if expected + 1 == next {
                    base = (streamNext - 1, lastTag)
                } else if let before = pending.last(where: { $0.lastSeq == expected }) {
                    base = (before.expectedStream + 1, before.tag)
                } else {
                    // Built on a record this machine neither read nor has in flight.
                    droppedEpoch = epoch
                    return
                }
                let tag = keys.tag(.record(history: history, seq: record.seq, previous: base.tag, body: payload))
                var item = Pending(record: record, records: batch, payload: payload, msgID: msgID(for: record, at: base.stream),
                                   expectedStream: base.stream, tag: tag, sentAt: now, proposedAt: now)
                item.epoch = epoch
                send(&item)
                pending.append(item)
                expected = item.lastSeq
            }
        }

        /// The most bytes one message of records may hold: under the server's `max_payload`,
        /// with room for the headers.
        private var batchBytes: Int { max(16 << 10, min(1 << 20, (link.info?.maxPayload ?? 1 << 20) - (8 << 10))) }

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

        /// The `Nats-Msg-Id` of a proposal meant for stream seq `after + 1`: JetStream answers a
        /// copy sent again with the same id (a proposal in doubt) `duplicate`. The place is part
        /// of it: proposed again elsewhere, it is a new message (its first copy, stored at the
        /// wrong place, was skipped as not valid there).
        private mutating func msgID(for record: LogRecord, at after: UInt64) -> String {
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

        /// Sends a proposal, when the link is up (otherwise it goes once the link is back).
        private mutating func send(_ item: inout Pending) {
            guard case .up(let info) = link else { return }
            ackCounter += 1
            let ackSubject = info.inboxPrefix + ".a." + String(ackCounter)
            item.ackNumbers.append(ackCounter)
            if item.ackNumbers.count > 8 { item.ackNumbers.removeFirst(item.ackNumbers.count - 8) }
            item.sentAt = now
            item.readThrough = streamNext &- 1
            item.attempts += 1
            let headers = NATSHeaders([("Nats-Msg-Id", item.msgID), ("Nats-Expected-Last-Sequence", String(item.expectedStream)),
                                       (Self.tagHeader, item.tag)])
            effects.append(.publish(subject: layout.recordSubject(names), reply: ackSubject, headers: headers, payload: item.payload))
        }

        private mutating func resendPending() {
            for index in pending.indices where !pending[index].acknowledged {
                var item = pending[index]
                send(&item)
                pending[index] = item
            }
        }

        // MARK: Acknowledgements

        private mutating func acknowledged(_ message: NATSMessage) {
            // The subject ends in the number the copy was sent with; acks mostly come in order.
            var number = 0, scale = 1
            for byte in message.subject.utf8.reversed() {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9"), scale < 1_000_000_000_000 else { break }
                number += Int(byte - UInt8(ascii: "0")) * scale
                scale *= 10
            }
            guard let prefix = link.info?.inboxPrefix, message.subject == prefix + ".a." + String(number),
                  let index = pending.firstIndex(where: { $0.ackNumbers.contains(number) }) else { return }
            let item = pending[index]
            // The first verdict wins: once the stream said it stored the proposal (a PubAck is
            // sent once the stream's quorum has it), a later refusal of another copy comes from
            // a server that did not know it yet (a deposed leader still answering publishes):
            // voiding it then would throw away a stored record's place.
            if item.acknowledged { return }
            if message.headers?.status == 503 {
                // No server took this copy. If it is the only one, nothing was stored; a copy
                // sent before may have been, so a re-sent proposal stays in doubt (re-sent
                // again until the stream answers for it).
                guard item.attempts == 1 else { return }
                awaitLeader()
                void(from: index, .failed(from: item.record.seq, StorageError("no NATS server took it: the stream \(names.stream) has no leader at this moment (an election after a server left, or too few of its servers up for a quorum)")))
                return
            }
            // The common answer, {"stream":"S", "seq":N}, needs no parsing.
            if !Self.contains(message.payload, #""error""#), !Self.contains(message.payload, #""duplicate""#) {
                confirm(index, storedAt: Self.number(after: #""seq":"#, in: message.payload))
                return
            }
            guard let json = try? JSON(parsing: message.payload) else { return }
            if let error = json["error"] {
                let code = error["err_code"]?.intValue ?? 0
                let text = error["description"]?.stringValue ?? ""
                switch code {
                case JetStreamErrorCode.duplicateInProcess:
                    // Not a verdict: an earlier copy with this id is being stored right now
                    // (2.11+: "duplicate message id is in process"); the answer to that copy
                    // decides. It stays pending (in doubt once unanswered for `ackTimeout`)
                    // and goes again, with the same id and expectations, until answered.
                    break
                case JetStreamErrorCode.ingestLimitReached:
                    // Not a verdict: the stream takes no more for a moment (its ingest limits).
                    // The proposal stays in doubt and goes again, with the same id and
                    // expectations, until the stream answers for it.
                    if !inDoubt {
                        inDoubt = true
                        suspect()
                        emit([.inDoubt(from: item.record.seq, reason: "NATS has not decided on it yet: \(ControlCharacters.escaped(text)) (\(code))")])
                    }
                case JetStreamErrorCode.wrongLastSequence:
                    let streamLast = text.split(separator: ":").last.flatMap { UInt64($0.trimmingCharacters(in: .whitespaces)) } ?? (item.expectedStream + 1)
                    if streamLast < item.readThrough {
                        // The leader says the stream ends before what this hub had read when it
                        // sent this copy. A leader not yet deposed answers from its own copy
                        // too, so this stops the hub only once NATS has kept saying so for
                        // 10 s; meanwhile the link is dropped, and what was in flight is in doubt.
                        streamEnds(at: streamLast, readThrough: item.readThrough, says: "the stream \(names.stream)'s leader says")
                        return
                    }
                    if item.attempts > 1, streamLast > item.expectedStream {
                        // Sent more than once: an earlier copy may be what is at its place (a new
                        // leader that does not know its id answers the copy by its expectation).
                        // The stream has committed that place: what is read there decides — this
                        // hub's own bytes are its proposal, anything else voids it.
                        noteStreamHolds(streamLast)
                        confirm(index, storedAt: 0)
                        return
                    }
                    // Another message got there first; whether it is a valid record is known once
                    // it is read. The hub waits for what this machine has read, no more (a
                    // message that turns out not valid adds no seq to wait for).
                    noteStreamHolds(streamLast)
                    void(from: index, .conflict(from: item.record.seq, logLast: next - 1))
                case JetStreamErrorCode.wrongLastMessageID:
                    void(from: index, .conflict(from: item.record.seq, logLast: next - 1))
                default:
                    // An answer about leadership (a leader stepping down says "raft: not leader"
                    // with code 503 and no err_code; a cluster without enough servers): not
                    // available until the stream names a leader again, as for a 503 status.
                    // Else the gate, closed by the failure, would open in the same pass and the
                    // dispatches it voided would be proposed again at once, and again. Other
                    // refusals (a limit of the stream) are refused as they come.
                    let httpCode = error["code"]?.intValue ?? 0
                    if httpCode == 503 || text.lowercased().contains("not leader")
                        || code == JetStreamErrorCode.temporarilyUnavailable || code == JetStreamErrorCode.notCurrentlyAvailable
                        || code == JetStreamErrorCode.noSuitablePeers {
                        awaitLeader()
                    }
                    void(from: index, .failed(from: item.record.seq, StorageError("NATS refused to store it: \(ControlCharacters.escaped(text)) (\(code))")))
                }
                return
            }
            if json["duplicate"]?.boolValue == true {
                // Stored before, under the same id (which names the place it was meant for): the
                // original is in the stream at that stream seq.
                let original = json["seq"]?.uint64Value ?? 0
                if original == item.expectedStream + 1 {
                    confirm(index, storedAt: original)
                } else {
                    void(from: index, .conflict(from: item.record.seq, logLast: next - 1))
                }
                return
            }
            confirm(index, storedAt: json["seq"]?.uint64Value ?? 0)
        }

        /// The stream's leader stored proposal `index` at stream seq `streamSeq` (0: not said).
        private mutating func confirm(_ index: Int, storedAt streamSeq: UInt64) {
            leaderFound()
            pending[index].acknowledged = true
            pending[index].ackedStreamSeq = streamSeq
            noteStreamHolds(streamSeq)
            releaseHeld()
            pollNext()
            updateAvailability()
        }

        /// Forgets the proposals from `index` on (the log refused the first of them, so the
        /// rest, expecting it, are refused too) and tells the hub.
        private mutating func void(from index: Int, _ event: LogEvent) {
            // The hub voids everything from here on and starts a new epoch: proposals of this
            // one still on their way were built on the voided ones.
            droppedEpoch = pending[index].epoch
            let voided = pending[index...]
            // Held deliveries that include one of these proposals' own bytes: a server delivered,
            // as this hub's proposal, what the stream's leader then refused (or would not answer
            // for). That copy is not the stream's: read that seq again. Deliveries held for
            // another reason (behind a record being checked with the leader) are the stream's
            // and go on; reading again for them would restart the consumer, and the checks, at
            // every conflict, and a hub behind under load would never catch up.
            let deliveredOwn = held.contains { message in
                voided.contains { $0.payload == message.payload && $0.tag == message.headers?[Self.tagHeader] }
            }
            pending.removeSubrange(index...)
            if deliveredOwn {
                readAgain(because: "the stream did not take the proposal at seq \(next) that a NATS server had delivered")
            }
            emit([event])
            if !deliveredOwn { releaseHeld() }
            updateAvailability()
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

        // MARK: Facts other hubs change

        /// Reads again what other hubs change without this one seeing it in the stream of
        /// actions: the oldest action kept (their trimming) and the newest shared snapshot.
        private mutating func refreshSharedFacts() {
            refreshFirstSeq()
            // The stream's end and its leader (which may have changed without this hub noticing).
            askStreamEnd(recheck: false)
            jetStream("STREAM.MSG.GET." + names.meta, ["last_by_subj": .string(layout.headSubject(names))], for: .sharedHead)
        }

        private mutating func sharedHeadAnswered(_ answer: Result<JSON, NATSError>) {
            guard case .success(let json) = answer,
                  let data = json["message"]?["data"]?.stringValue.flatMap({ Data(base64Encoded: $0) }),
                  let head = try? JSON(parsing: [UInt8](data)), head["history"]?.stringValue == history,
                  let seq = head["seq"]?.uint64Value, seq > 0 else { return }
            facts.sharedSnapshotSeq = max(facts.sharedSnapshotSeq, seq)
        }

        /// Asks which action is the oldest the stream holds (for `status`).
        private mutating func refreshFirstSeq() {
            guard !isAsking({ $0 == .firstSeq }) else { return }
            jetStream("STREAM.MSG.GET." + names.stream, ["seq": 2, "next_by_subj": .string(names.everything)], for: .firstSeq)
        }

        private mutating func firstSeqAnswered(_ answer: Result<JSON, NATSError>) {
            // The first action message's first record names its seq (read, not trusted: for `status`).
            guard case .success(let json) = answer,
                  let data = json["message"]?["data"]?.stringValue.flatMap({ Data(base64Encoded: $0) }) else { return }
            let bytes = [UInt8](data)
            let first = bytes.split(separator: UInt8(ascii: "\n"), maxSplits: 1, omittingEmptySubsequences: false).first ?? []
            guard let seq = first.withUnsafeBytes({ LogRecord(canonicalBody: $0) })?.seq else { return }
            facts.firstSeq = seq
        }

        // MARK: Upgrades' questions

        /// Questions asked while the link was opening.
        private var waitingQuestions: [(Question, Int)] = []

        private mutating func ask(_ question: Question, number: Int) {
            switch question {
            case .hubs:
                jetStream("CONSUMER.LIST." + names.stream, ["offset": 0], for: .hubs(number: number, offset: 0, pages: 1, found: []))
            case .moveToRecords where layout == .records:
                effects.append(.answer(.moved(.success(.records)), number: number))
            case .moveToRecords:
                jetStream("STREAM.INFO." + names.stream, nil, for: .moveInfo(number: number))
            }
        }

        private mutating func answer(_ question: Question, number: Int, failure: String) {
            switch question {
            case .hubs: effects.append(.answer(.hubs(.failure(StorageError(failure))), number: number))
            case .moveToRecords: effects.append(.answer(.moved(.failure(StorageError(failure))), number: number))
            }
        }

        /// The most pages of consumers read (256 each): a stream with more is not listed whole.
        static let maxConsumerPages = 16

        private mutating func hubsListed(number: Int, offset: Int, pages: Int, found: [LogPeer], _ answer: Result<JSON, NATSError>) {
            switch answer {
            case .failure(let error):
                effects.append(.answer(.hubs(.failure(StorageError("the shared log did not list its hubs: \(error.message)"))), number: number))
            case .success(let json):
                let page = json["consumers"]?.arrayValue?.count ?? 0
                let all = found + LogPeer.peers(in: json)
                let total = json["total"]?.intValue ?? 0
                let read = offset + page
                if page > 0, read < total, pages < Self.maxConsumerPages {
                    jetStream("CONSUMER.LIST." + names.stream, ["offset": JSON(read)],
                              for: .hubs(number: number, offset: read, pages: pages + 1, found: all))
                } else if page > 0, read < total {
                    effects.append(.answer(.hubs(.failure(StorageError("the stream \(names.stream) has \(total) consumers, more than this hub lists; remove the ones that are not hubs"))), number: number))
                } else {
                    var seen: Set<String> = []
                    effects.append(.answer(.hubs(.success(all.filter { seen.insert($0.name).inserted })), number: number))
                }
            }
        }

        private mutating func moveInfoAnswered(number: Int, _ answer: Result<JSON, NATSError>) {
            switch answer {
            case .failure(let error):
                effects.append(.answer(.moved(.failure(StorageError("the stream \(names.stream) was not moved to the records layout: \(error.message)"))), number: number))
            case .success(let info):
                noteLeader(info)
                if layout == .records {
                    effects.append(.answer(.moved(.success(.records)), number: number))
                    return
                }
                guard let config = StreamLayout.movedConfiguration(info, names: names) else {
                    effects.append(.answer(.moved(.failure(StorageError("the stream \(names.stream)'s configuration is unreadable; it was not moved to the records layout"))), number: number))
                    return
                }
                jetStream("STREAM.UPDATE." + names.stream, config, for: .moveUpdate(number: number))
            }
        }

        private mutating func moveUpdateAnswered(number: Int, _ answer: Result<JSON, NATSError>) {
            switch answer {
            case .failure(let error):
                effects.append(.answer(.moved(.failure(StorageError("the stream \(names.stream) was not moved to the records layout (\(error.message)); the hub needs permission to update it (STREAM.UPDATE)"))), number: number))
            case .success(let info):
                noteLeader(info)
                guard layout == .records else {
                    effects.append(.answer(.moved(.failure(StorageError("NATS did not move the stream \(names.stream) to the records layout (its subjects are unchanged)"))), number: number))
                    return
                }
                effects.append(.answer(.moved(.success(.records)), number: number))
            }
        }

        // MARK: Leases

        private mutating func answerLease(_ lease: LeaseRequest, _ result: Result<Range<Int>, StorageError>) {
            switch lease.answer {
            case .waiter: effects.append(.finishLease(result))
            case .event: effects.append(.post(.replicaIDs(result)))
            }
        }

        private mutating func readLease(_ lease: LeaseRequest) {
            jetStream("STREAM.MSG.GET." + names.meta, ["last_by_subj": .string(names.lease)], for: .leaseRead(lease))
        }

        private mutating func leaseRead(_ lease: LeaseRequest, _ answer: Result<JSON, NATSError>) {
            var below = 0
            var subjectSeq: UInt64 = 0
            if case .success(let json) = answer, let message = json["message"], let seq = message["seq"]?.uint64Value,
               let data = message["data"]?.stringValue.flatMap({ Data(base64Encoded: $0) }),
               let value = (try? JSON(parsing: [UInt8](data)))?["below"]?.intValue,
               (0...JetStreamLog.maxReplicaID).contains(value) {
                below = value
                subjectSeq = seq
            }
            let start = max(below, lease.from)
            let (end, overflow) = start.addingReportingOverflow(lease.count)
            guard !overflow else {
                answerLease(lease, .failure(StorageError("cannot reserve replica ids in the shared log: no ids are left")))
                return
            }
            request(.leaseWrite(lease, start: start), subject: names.lease,
                    headers: NATSHeaders([("Nats-Expected-Last-Subject-Sequence", String(subjectSeq))]),
                    payload: JSON.object(["below": JSON(end)]).canonicalBytes, timeout: .seconds(2))
        }

        private mutating func leaseWritten(_ lease: LeaseRequest, start: Int, _ answer: Result<JSON, NATSError>) {
            switch answer {
            case .success:
                answerLease(lease, .success(start..<(start + lease.count)))
            case .failure(let error) where error.kind == .timeout || error.kind == .noResponders || error.kind == .unreachable:
                answerLease(lease, .failure(StorageError("cannot reserve replica ids in the shared log: \(error.message)")))
            case .failure:
                // Another hub's reservation came first: read it and try again.
                var again = lease
                again.attempt += 1
                guard again.attempt < 8 else {
                    answerLease(lease, .failure(StorageError("cannot reserve replica ids in the shared log: other hubs keep taking them first")))
                    return
                }
                readLease(again)
            }
        }

        // MARK: Shared snapshots

        private mutating func startSnapshot(_ snapshot: StoredSnapshot) {
            // Without its place in the stream, no hub could go on from it.
            guard snapshot.seq > facts.sharedSnapshotSeq, snapshot.position != nil else { return }
            guard let info = link.info else {
                // Published once the link is back (the newest one handed over).
                nextSnapshot = snapshot
                return
            }
            snapshotJob = SnapshotJob(snapshot: snapshot, body: snapshot.body.canonicalBytes, publication: "\(snapshot.seq).\(runID)",
                                      chunkSize: max(4096, min(256 << 10, info.maxPayload - 1024)))
            // The newest head now. Ours is written only if it is still the newest when ours
            // comes (another hub's snapshot, published meanwhile, wins and ours is dropped): a
            // head's writer then purges only chunks older than its own, never chunks a newer
            // head needs.
            jetStream("STREAM.MSG.GET." + names.meta, ["last_by_subj": .string(layout.headSubject(names))], for: .snapshotHead)
        }

        /// The snapshot being published is done (written, or given up): the next waiting one starts.
        private mutating func finishSnapshot() {
            snapshotJob = nil
            if let waiting = nextSnapshot {
                nextSnapshot = nil
                startSnapshot(waiting)
            }
        }

        private mutating func snapshotHeadRead(_ answer: Result<JSON, NATSError>) {
            guard var job = snapshotJob else { return }
            if case .success(let json) = answer, let message = json["message"], let seq = message["seq"]?.uint64Value {
                job.headSubjectSeq = seq
                if let data = message["data"]?.stringValue.flatMap({ Data(base64Encoded: $0) }),
                   let head = try? JSON(parsing: [UInt8](data)), head["history"]?.stringValue == history,
                   let newest = head["seq"]?.uint64Value, newest >= job.snapshot.seq {
                    // Another hub published one as new or newer.
                    facts.sharedSnapshotSeq = max(facts.sharedSnapshotSeq, newest)
                    finishSnapshot()
                    return
                }
            }
            snapshotJob = job
            writeChunk()
        }

        private mutating func writeChunk() {
            guard let job = snapshotJob else { return }
            let end = min(job.body.count, job.offset + job.chunkSize)
            let headers = NATSHeaders([("StoreSync-Snapshot", job.publication), ("StoreSync-Chunk", String(job.chunks))])
            request(.snapshotChunk, subject: layout.chunkSubject(names), headers: headers, payload: Array(job.body[job.offset..<end]),
                    timeout: Self.chunkTimeout)
        }

        private mutating func snapshotChunkWritten(_ answer: Result<JSON, NATSError>) {
            guard var job = snapshotJob else { return }
            switch answer {
            case .success(let ack) where ack["seq"]?.uint64Value == nil:
                note("could not publish the shared snapshot at seq \(job.snapshot.seq); the stream still holds every action")
                finishSnapshot()
            case .success(let ack):
                let seq = ack["seq"]?.uint64Value ?? 0
                if job.chunks == 0 { job.first = seq }
                job.chunks += 1
                job.offset = min(job.body.count, job.offset + job.chunkSize)
                snapshotJob = job
                if job.offset < job.body.count {
                    writeChunk()
                    return
                }
                let head: JSON = ["seq": JSON(job.snapshot.seq), "digest": .string(job.snapshot.digest), "history": .string(history),
                                  "chunks": JSON(job.chunks), "first": JSON(job.first), "bytes": JSON(job.body.count),
                                  "tag": .string(job.publication), "content": .string(SHA256.hex(SHA256.hash(job.body)))]
                let headBytes = head.canonicalBytes
                request(.snapshotHeadWrite, subject: layout.headSubject(names),
                        headers: NATSHeaders([("Nats-Expected-Last-Subject-Sequence", String(job.headSubjectSeq)),
                                              (Self.tagHeader, keys.tag(.snapshotHead(body: headBytes, contentDigest: [])))]),
                        payload: headBytes)
            case .failure(let error) where error.kind == .timeout || error.kind == .noResponders || error.kind == .unreachable:
                note("could not publish the shared snapshot at seq \(job.snapshot.seq): \(error.message)")
                finishSnapshot()
            case .failure:
                note("could not publish the shared snapshot at seq \(job.snapshot.seq); the stream still holds every action")
                finishSnapshot()
            }
        }

        private mutating func snapshotHeadWritten(_ answer: Result<JSON, NATSError>) {
            guard let job = snapshotJob else { return }
            defer { finishSnapshot() }
            // Another hub's head came first: its writer purges these chunks with the rest.
            guard case .success(let ack) = answer, let headSeq = ack["seq"]?.uint64Value else { return }
            facts.sharedSnapshotSeq = max(facts.sharedSnapshotSeq, job.snapshot.seq)
            // Older snapshots go; the newest stays.
            jetStream("STREAM.PURGE." + names.meta, ["filter": .string(layout.chunkSubject(names)), "seq": JSON(job.first)], for: .purge)
            jetStream("STREAM.PURGE." + names.meta, ["filter": .string(layout.headSubject(names)), "seq": JSON(headSeq)], for: .purge)
            if let retain = configuration.retainActions, job.snapshot.seq > retain {
                // Actions before the retained window, all covered by this shared snapshot.
                // Whole messages go: up to the last one that ends before `keepFrom` (none, when
                // that one is older than what this hub remembers).
                let keepFrom = job.snapshot.seq - retain + 1
                if let boundary = boundaries.last(where: { $0.lastSeq < keepFrom }) {
                    // Both subjects: records before an upgrade are on `…actions`, after it on `…records`.
                    for subject in layout == .actions ? [names.actions] : [names.actions, names.records] {
                        jetStream("STREAM.PURGE." + names.stream,
                                  ["filter": .string(subject), "seq": JSON(boundary.streamSeq + 1)], for: .purge)
                    }
                    boundaries.removeAll { $0.streamSeq <= boundary.streamSeq }
                }
                refreshFirstSeq()
            }
        }
    }
}
