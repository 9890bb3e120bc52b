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
import Synchronization

/// A log shared by hubs on several hosts: a NATS JetStream stream.
///
/// **The stream.** `STREAM` holds the subjects `storesync.STREAM.genesis` (one record, the
/// first: `{"app":FINGERPRINT,"auth":…,"format":2,"history":ID}`, tagged) and
/// `storesync.STREAM.actions` (every action, as ``LogRecord``'s canonical body, with its tag in
/// the `StoreSync-Auth` header). A companion stream `STREAM_META` holds
/// `storesync.STREAM.meta.lease` (the replica-id lease, changed by compare-and-set on the
/// subject's last sequence), `…meta.chunks` and `…meta.head` (shared snapshots: the state's
/// body in chunks, then a tagged head naming them and their SHA-256).
///
/// **Valid records.** A message is a record of the history only if it is the valid next one
/// (``validRecords(_:names:keys:history:next:previousTag:)``): on the actions subject, the next
/// action seq, tagged under the hubs' key (``LogKeys``) on the tag of the last valid record.
/// Every other message is skipped by every hub alike, so action seqs count valid records only
/// and run behind stream sequences; a snapshot keeps where its seq ends in the stream
/// (``LogPosition``), and reading goes on from there.
///
/// **Writing.** A proposal is published with `Nats-Msg-Id` derived from (session, dispatch id)
/// and the place it is meant for (or unique per hub for a dispatch without a session), and
/// `Nats-Expected-Last-Sequence` = the stream sequence it must follow. A proposal pipelined
/// after another is tagged on that one: stored anywhere else (after another writer's record)
/// it is not valid, and skipped. The publish acknowledgement only tells refusals (`conflict`:
/// another writer got there first; the hub catches up and judges again); the record counts
/// once **read back from the stream**, by the consumer every hub runs, which reports every
/// valid record in stream order (`appended`), whichever hub wrote it.
///
/// **Outages.** When the connection drops, or an acknowledgement does not come, proposals in
/// flight are `inDoubt`; the worker reconnects (the servers in turn, with backoff), reads the
/// stream from where it was, and publishes the proposals in doubt again with the same ids and
/// expectations: JetStream's de-duplication answers one already stored with its seq, and the
/// expectations refuse one another writer overtook. Until then ``probe()`` is false and the hub
/// refuses dispatches with `unavailable`.
///
/// A worker thread owns the NATS connection; the hub's thread hands it proposals and
/// snapshots through a queue and reads events back, woken by a pipe it polls (``readiness``).
package final class JetStreamLog: HubLog {
    /// Readable when the hub should stop (opening then gives up waiting).
    private let stopDescriptor: Int32?
    private let configuration: SharedLogConfiguration
    private let fingerprint: String
    /// The app versions this hub carries, oldest first (a stream started by any of them is read).
    private let accepts: [String]
    private let dataDirectory: String?
    private let logger: HubLogger
    private let names: Names
    /// The worker and what the two threads share.
    private let worker: Worker
    private var started = false
    private var localSnapshots: LocalSnapshots?

    /// The subjects and streams of one shared log.
    struct Names: Sendable {
        let stream: String
        let meta: String
        let actions: String
        /// Where records go once the stream moved to ``StreamLayout/records``.
        let records: String
        let genesis: String
        let lease: String
        let chunks: String
        let head: String
        /// Every subject of the stream (and of its companion).
        let everything: String
        /// Shared snapshots of the ``StreamLayout/records`` layout.
        let stateHead: String
        let stateChunks: String

        init(stream: String) {
            self.stream = stream
            meta = stream + "_META"
            actions = "storesync.\(stream).actions"
            records = "storesync.\(stream).records"
            genesis = "storesync.\(stream).genesis"
            lease = "storesync.\(stream).meta.lease"
            chunks = "storesync.\(stream).meta.chunks"
            head = "storesync.\(stream).meta.head"
            everything = "storesync.\(stream).>"
            stateHead = "storesync.\(stream).meta.state.head"
            stateChunks = "storesync.\(stream).meta.state.chunks"
        }
    }

    /// Creates a log (nothing is contacted before ``open()``).
    ///
    /// - Parameters:
    ///   - configuration: The servers, the stream, credentials, replicas, retention.
    ///   - fingerprint: The app's fingerprint: a new stream's genesis names it.
    ///   - accepts: The versions this hub carries, oldest first (default: `fingerprint` alone):
    ///     a stream started by another app is refused.
    ///   - dataDirectory: Where to keep local snapshots for a fast restart, if anywhere.
    ///   - stopDescriptor: Readable when the hub should stop: opening gives up waiting.
    ///   - logger: The log sink.
    package init(configuration: SharedLogConfiguration, fingerprint: String, accepts: [String]? = nil, dataDirectory: String?,
                 stopDescriptor: Int32? = nil, logger: HubLogger) {
        self.stopDescriptor = stopDescriptor
        self.configuration = configuration
        self.fingerprint = fingerprint
        let accepts = accepts ?? [fingerprint]
        self.accepts = accepts.contains { JSONKey($0) == JSONKey(fingerprint) } ? accepts : accepts + [fingerprint]
        self.dataDirectory = dataDirectory
        self.logger = logger
        names = Names(stream: configuration.stream)
        worker = Worker(configuration: configuration, names: names,
                        metadata: LogPeer.metadata(label: Self.hubLabel, versions: self.accepts), logger: logger)
    }

    /// How this hub names itself to the other hubs of the stream (in its consumer's metadata).
    static let hubLabel: String = {
        var buffer = [CChar](repeating: 0, count: 256)
        let host = gethostname(&buffer, buffer.count) == 0
            ? String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) : "?"
        return "\(host) pid \(getpid())"
    }()

    /// Whether `app` is one of the versions this hub carries.
    private func carries(_ app: String) -> Bool { accepts.contains { JSONKey($0) == JSONKey(app) } }

    deinit { close() }

    // MARK: - Opening

    /// The largest replica id a lease in the stream may name: a larger `below` (written by
    /// something other than a hub) is ignored, never added to.
    static let maxReplicaID = 1 << 40

    /// How long opening waits for NATS (not reachable yet, a cluster still electing leaders)
    /// before the hub gives up.
    static let openPatience: Duration = .seconds(60)

    /// Opens the stream, waiting up to ``openPatience`` while NATS is unreachable or not ready
    /// (a cluster that is starting); credentials, a stream of another app, or damage fail at once.
    package func open() throws(StorageError) -> LogStart {
        let deadline = ContinuousClock.now + Self.openPatience
        var delay: Duration = .milliseconds(200)
        var waiting = false
        while true {
            do throws(StorageError) {
                let start = try openOnce()
                if waiting { logger.notice("the shared log \(configuration.redacted) answers") }
                return start
            } catch where error.isTransient && ContinuousClock.now + delay < deadline {
                if !waiting {
                    logger.notice("waiting for the shared log (up to \(Self.openPatience)): \(error.message)")
                    waiting = true
                }
                let milliseconds = Int32(delay.components.seconds * 1000 + delay.components.attoseconds / 1_000_000_000_000_000)
                if let stopDescriptor, UnixSocket.waitUntil(stopDescriptor, timeoutMilliseconds: milliseconds) {
                    throw StorageError("stopped while waiting for the shared log \(configuration.redacted)")
                } else if stopDescriptor == nil {
                    Thread.sleep(forTimeInterval: Double(milliseconds) / 1000)
                }
                delay = min(delay * 2, .seconds(2))
            }
        }
    }

    /// Whether a `STREAM.INFO` answer came from one member of a replicated stream that has no
    /// leader now: NATS then lets every member answer from its own copy, which may be behind
    /// (a server that was cut off and has not caught up) or ahead (records it stored that the
    /// others never agreed to). Such an answer says nothing about the stream; ask again once
    /// it has a leader (only the leader answers then).
    ///
    /// - Parameter info: The answer.
    /// - Returns: Whether the stream has more than one replica and the answer names no leader.
    package static func isLeaderlessAnswer(_ info: JSON) -> Bool {
        guard let replicas = info["config"]?["num_replicas"]?.intValue, replicas > 1 else { return false }
        return (info["cluster"]?["leader"]?.stringValue ?? "").isEmpty
    }

    /// The stream sequence of a `STREAM.INFO` answer's last message (0 for an empty stream).
    ///
    /// - Parameter info: The answer.
    /// - Returns: The stream's last sequence.
    package static func lastStreamSeq(in info: JSON) -> UInt64 {
        info["state"]?["last_seq"]?.uint64Value ?? 0
    }

    /// The oldest nats-server release a hub runs on. Older releases lose acknowledged records,
    /// or truncate a stream without a quorum, around leader changes (the Raft fixes of 2.9.15,
    /// 2.10.23); docs/OPERATIONS.md §20 lists what each supported release promises.
    package static let oldestSupportedServer = NATSServerVersion(2, 10, 23)
    /// The first release a hub refuses, if any. 2.14.0 and later stop a replicated stream for
    /// good after a publish whose `Nats-Expected-Last-Msg-Id` is stale ("critical write error:
    /// last msgid mismatch", on every replica; `Scripts/nats-msgid-wedge.py`), and hubs no
    /// longer send that header (a pipelined proposal is tagged on its predecessor instead), so
    /// no release is refused for it.
    static let firstUnsupportedServer: NATSServerVersion? = nil
    /// The supported releases, for messages.
    static let supportedServers = "2.10.23 or later (the tests and the bench pin 2.12.8)"

    /// Why a hub must not use the server it reached, if it must not.
    ///
    /// - Parameter connection: An open connection.
    /// - Returns: One line saying which release the server runs and what to run instead, or
    ///   `nil` when its release is supported (or unknown: a server that does not say is used).
    static func supportProblem(_ connection: NATSConnection) -> String? {
        supportProblem(version: connection.serverVersion, server: connection.server)
    }

    /// Why a hub must not use a server of release `version`, if it must not.
    ///
    /// - Parameters:
    ///   - version: The release the server's `INFO` gives (`nil`: it gives none).
    ///   - server: Its `host:port`, for the message.
    /// - Returns: One line saying what to run instead, or `nil` when the release is supported.
    static func supportProblem(version: NATSServerVersion?, server: String) -> String? {
        guard let version else { return nil }
        if version < oldestSupportedServer {
            return "NATS at \(server) runs nats-server \(version), older than \(oldestSupportedServer), the oldest a hub supports: older releases can lose acknowledged records around a leader change. Upgrade every server of the cluster to \(supportedServers); see docs/OPERATIONS.md §20"
        }
        if let firstUnsupportedServer, version >= firstUnsupportedServer {
            return "NATS at \(server) runs nats-server \(version), newer than this hub supports: from 2.14.0 on, a replicated stream stops for good after a publish whose Nats-Expected-Last-Msg-Id is stale, which a hub sends. Run \(supportedServers) on every server of the cluster; see docs/OPERATIONS.md §20"
        }
        return nil
    }

    /// Whether a NATS failure may pass by itself (a server not up yet, a cluster electing).
    private static func isTransient(_ error: NATSError) -> Bool {
        switch error.kind {
        case .unreachable, .timeout, .noResponders: true
        case .api(let code, let errCode):
            // 10005 at start: an R3 stream asked of a cluster that does not know all its
            // servers yet (a cluster starting); it passes once they have met.
            code == 503 || code == 408 || errCode == JetStreamErrorCode.temporarilyUnavailable
                || errCode == JetStreamErrorCode.notCurrentlyAvailable || errCode == JetStreamErrorCode.noSuitablePeers
        case .authorization, .protocolError, .unsupported: false
        }
    }

    private func openOnce() throws(StorageError) -> LogStart {
        let connection: NATSConnection
        do throws(NATSError) {
            connection = try worker.connect()
        } catch {
            // A refused server's line already says what to do.
            let hint = error.kind == .unsupported ? "" : "; check that nats-server runs with JetStream (-js) and that the address and credentials are right"
            var failure = StorageError("cannot open the shared log \(configuration.redacted): \(error.message)\(hint)")
            failure.isTransient = Self.isTransient(error)
            throw failure
        }
        do throws(StorageError) {
            let (history, start, layout) = try prepare(connection)
            let position = start.position ?? LogPosition(seq: 0, streamSeq: 1, tag: "")
            worker.start(connection: connection, history: history, next: position.seq + 1, position: position, layout: layout)
            started = true
            return start
        } catch {
            connection.close()
            // The data directory's lock goes with the failed attempt: the next attempt, or
            // the next start of the hub, takes it again.
            localSnapshots?.close()
            localSnapshots = nil
            throw error
        }
    }

    /// Creates what is missing (the streams, the genesis), checks the app, and reads what the
    /// hub starts from: the newest snapshot (shared, or local when that is newer) and every
    /// record after it.
    private func prepare(_ connection: NATSConnection) throws(StorageError) -> (String, LogStart, StreamLayout) {
        do {
            try ensureStream(connection, name: names.stream, subjects: [names.actions, names.genesis])
            try ensureStream(connection, name: names.meta, subjects: ["storesync.\(names.stream).meta.>"])
            let genesis = try readOrWriteGenesis(connection)
            guard let app = genesis["app"]?.stringValue, let history = genesis["history"]?.stringValue else {
                throw StorageError("the stream \(names.stream)'s genesis record is unreadable; it was not written by a StoreSync hub", isDataProblem: true)
            }
            guard carries(app) else {
                throw StorageError("app-mismatch: the shared log \(configuration.redacted) was started by app \(ControlCharacters.escaped(app)), this hub runs \(accepts.joined(separator: ", ")); start the hub with a build that carries the app that started it, or use another stream", isDataProblem: true)
            }
            var start = LogStart(history: history)
            // The genesis keeps the version the stream was started with; upgrade records say
            // the versions after it, and a snapshot the version of its state.
            start.fingerprint = app
            start.sources.append(configuration.redacted)
            if let directory = dataDirectory {
                let local = try LocalSnapshots(directory: directory, accepts: accepts, history: history,
                                               log: configuration.redacted)
                localSnapshots = local
                // Only a snapshot that says where it is in the stream can be gone on from.
                if let snapshot = local.newest, snapshot.position != nil {
                    start.snapshot = snapshot
                    start.sources.append(local.path(of: snapshot.seq))
                }
            }
            for layout in [StreamLayout.records, .actions] {
                if let shared = try readSharedSnapshot(connection, history: history, layout: layout),
                   shared.seq > (start.snapshot?.seq ?? 0) {
                    start.snapshot = shared
                    start.sources.append("the shared snapshot at seq \(shared.seq)")
                }
            }
            if let snapshot = start.snapshot, let app = snapshot.app {
                start.fingerprint = app
            }
            start.replicaLease = try readLease(connection).below
            // After the snapshot, or after the genesis (stream seq 1) without one.
            let from = start.snapshot?.position ?? LogPosition(seq: 0, streamSeq: 1, tag: "")
            start.position = from
            let info = try connection.jetStream("STREAM.INFO." + names.stream, nil)
            if Self.isLeaderlessAnswer(info) {
                var failure = StorageError("the stream \(names.stream) has no leader now (its servers are electing one); NATS answers from one server's own copy then, which may be behind or ahead of the stream")
                failure.isTransient = true
                throw failure
            }
            let layout = StreamLayout.of(info, names: names) ?? .actions
            let last = Self.lastStreamSeq(in: info)
            if from.streamSeq < last {
                // The messages after the snapshot's must all still be in the stream.
                let firstAction = try firstActionStreamSeq(connection)
                if let firstAction, firstAction > from.streamSeq + 1 {
                    throw StorageError("the stream \(names.stream) starts at stream seq \(firstAction) (it was trimmed), and this hub's newest snapshot (seq \(from.seq)) ends at stream seq \(from.streamSeq); the messages between are gone. Start the hub where a shared snapshot covers them, or restore the stream", isDataProblem: true)
                }
                let read = try readRecords(connection, after: from, through: last, history: history)
                start.records = read.records
                start.position = read.position
                if read.skipped > 0 {
                    start.warnings.append("\(read.skipped) message\(read.skipped == 1 ? "" : "s") of the stream \(names.stream) after stream seq \(from.streamSeq) \(read.skipped == 1 ? "is" : "are") not a valid record of this history and \(read.skipped == 1 ? "was" : "were") skipped, as every hub skips them")
                }
            }
            start.largestOrigin = start.records.map(\.origin).max() ?? 0
            return (history, start, layout)
        } catch let error as StorageError {
            throw error
        } catch let error as NATSError {
            var failure = StorageError("the shared log \(configuration.redacted) cannot be read: \(error.message)")
            failure.isTransient = Self.isTransient(error)
            throw failure
        } catch {
            throw StorageError("the shared log \(configuration.redacted) cannot be read: \(error)")
        }
    }

    private func ensureStream(_ connection: NATSConnection, name: String, subjects: [String]) throws(NATSError) {
        do throws(NATSError) {
            _ = try connection.jetStream("STREAM.INFO." + name, nil)
        } catch where error.kind == .api(code: 404, errCode: JetStreamErrorCode.streamNotFound) {
            let config: JSON = [
                "name": .string(name), "subjects": .array(subjects.map { .string($0) }), "storage": "file",
                "num_replicas": JSON(configuration.replicas), "retention": "limits", "discard": "old",
                "max_msgs": -1, "max_bytes": -1, "max_age": 0, "duplicate_window": 120_000_000_000,
            ]
            do throws(NATSError) {
                _ = try connection.jetStream("STREAM.CREATE." + name, config)
                logger.notice("created the stream \(name) (\(configuration.replicas) replica\(configuration.replicas == 1 ? "" : "s")) on \(connection.server)")
            } catch where error.kind == .api(code: 400, errCode: JetStreamErrorCode.streamNameInUse) || error.kind == .api(code: 400, errCode: JetStreamErrorCode.subjectsOverlap) {
                // Another hub created it meanwhile (with other settings: "name already in
                // use"; or, as the server checks subjects first, "subjects overlap with an
                // existing stream"): use theirs. A stream of another name holding these
                // subjects fails here, saying so.
                _ = try connection.jetStream("STREAM.INFO." + name, nil)
            }
        }
    }

    /// The stream's genesis record, written first when the stream has none.
    ///
    /// Hubs starting together may all try: the write expects an empty stream and carries one
    /// message id, so exactly one genesis is stored (the others get a duplicate or a
    /// wrong-last-sequence answer). Whatever the answer, the stored record is the truth, and
    /// it must be the stream's first message (seq 0 of the hub's numbering).
    private func readOrWriteGenesis(_ connection: NATSConnection) throws -> JSON {
        if let existing = try lastMessage(connection, stream: names.stream, subject: names.genesis) {
            return try checkedGenesis(existing)
        }
        let keys = configuration.keys
        let genesis: JSON = ["app": .string(fingerprint), "format": JSON(Self.streamFormat),
                             "auth": .string(keys.isAuthenticated ? "hmac-sha256" : "sha256"),
                             "history": .string(Digest.hex(UInt64.random(in: 0...UInt64.max)))]
        let headers = NATSHeaders([("Nats-Msg-Id", "storesync-genesis"), ("Nats-Expected-Last-Sequence", "0"),
                                   (Replicator.tagHeader, keys.tag(.genesis(body: genesis.canonicalBytes)))])
        _ = try connection.request(names.genesis, payload: genesis.canonicalBytes, headers: headers)
        guard let stored = try lastMessage(connection, stream: names.stream, subject: names.genesis) else {
            throw StorageError("the stream \(names.stream) is not empty but has no StoreSync genesis record; it was not created by a StoreSync hub — use another stream name", isDataProblem: true)
        }
        return try checkedGenesis(stored)
    }

    /// The format of the streams this hub writes: 2, every record tagged (``LogKeys``).
    static let streamFormat = 2

    private func checkedGenesis(_ stored: Stored) throws(StorageError) -> JSON {
        guard stored.seq == 1, let json = try? JSON(parsing: stored.data) else {
            throw StorageError("the stream \(names.stream)'s genesis record is at stream sequence \(stored.seq), not 1, or unreadable; the stream was not created by a StoreSync hub — use another stream name", isDataProblem: true)
        }
        guard json["format"]?.intValue == Self.streamFormat else {
            throw StorageError("the stream \(names.stream) was created by a StoreSync hub whose records are not authenticated (stream format \(json["format"]?.intValue ?? 0), this hub writes format \(Self.streamFormat)); start every hub on a new stream name and carry the state over (docs/OPERATIONS.md §14)", isDataProblem: true)
        }
        let keys = configuration.keys
        let tag = stored.headers?[Replicator.tagHeader] ?? ""
        let keyed = LogKeys.isKeyed(tag)
        if keyed, !keys.isAuthenticated {
            throw StorageError("the stream \(names.stream)'s records are authenticated, and this hub has no key: give it the stream's key (--log-key-file FILE, or the systemd credential storesync-log-key); docs/OPERATIONS.md §20", isDataProblem: true)
        }
        if !keyed, keys.isAuthenticated {
            throw StorageError("the stream \(names.stream) was created without a key (--log-unauthenticated): anyone who can publish to it can forge its records. Start the hubs on a new stream with the key, or run this hub with --log-unauthenticated too", isDataProblem: true)
        }
        guard keys.isValid(tag, for: .genesis(body: stored.data)) else {
            throw StorageError("this hub's key does not verify the stream \(names.stream)'s genesis record (it names key \(ControlCharacters.escaped(String(tag.split(separator: ":").dropFirst().first ?? "?")))): every hub of a stream needs the same key (docs/OPERATIONS.md §20)", isDataProblem: true)
        }
        return json
    }

    /// The stored message, for `MSG.GET` answers.
    struct Stored {
        var seq: UInt64
        var data: [UInt8]
        var headers: NATSHeaders?
    }

    private func lastMessage(_ connection: NATSConnection, stream: String, subject: String) throws(NATSError) -> Stored? {
        try getMessage(connection, stream: stream, body: ["last_by_subj": .string(subject)])
    }

    private func getMessage(_ connection: NATSConnection, stream: String, body: JSON) throws(NATSError) -> Stored? {
        let answer: JSON
        do throws(NATSError) {
            answer = try connection.jetStream("STREAM.MSG.GET." + stream, body)
        } catch where error.kind == .api(code: 404, errCode: JetStreamErrorCode.noMessageFound) {
            return nil
        }
        guard let message = answer["message"], let seq = message["seq"]?.uint64Value else { return nil }
        let data = message["data"]?.stringValue.flatMap { Data(base64Encoded: $0) }.map { [UInt8]($0) } ?? []
        let headers = message["hdrs"]?.stringValue.flatMap { Data(base64Encoded: $0) }.flatMap { NATSHeaders.decode([UInt8]($0)[...]) }
        return Stored(seq: seq, data: data, headers: headers)
    }

    /// The stream sequence of the first message after the genesis (on the records subjects of
    /// either layout), if any.
    private func firstActionStreamSeq(_ connection: NATSConnection) throws(NATSError) -> UInt64? {
        guard let first = try getMessage(connection, stream: names.stream, body: ["seq": 2, "next_by_subj": .string(names.everything)]),
              first.seq >= 2 else {
            // None, or an answer that puts an action at or before the genesis: nothing to say.
            return nil
        }
        return first.seq
    }

    /// Reads the messages after `from` through stream seq `through` with a temporary consumer,
    /// keeping the valid records (``validRecords(_:names:keys:history:next:previousTag:)``) and
    /// skipping the rest, as every hub does.
    ///
    /// - Returns: The records, where the last one ends, and how many messages were skipped.
    private func readRecords(_ connection: NATSConnection, after from: LogPosition, through: UInt64,
                             history: String) throws -> (records: [LogRecord], position: LogPosition, skipped: Int) {
        var records: [LogRecord] = []
        records.reserveCapacity(Int(min(through - from.streamSeq, 1 << 20)))
        var position = from
        var streamNext = from.streamSeq + 1
        var skipped = 0
        let deliver = connection.newInbox()
        let sid = connection.subscribe(deliver)
        defer { connection.unsubscribe(sid) }
        // Left to expire: deleting it would need a permission older deployments lack. It names
        // this hub like its reading consumer, so the stream's list of hubs counts it once.
        _ = try connection.jetStream("CONSUMER.CREATE." + names.stream,
                                     Self.readingConsumer(names: names, deliver: deliver, from: streamNext, metadata: worker.metadata))
        var idle = ContinuousClock.now
        while streamNext <= through {
            let messages = try connection.read(timeoutMilliseconds: 200)
            if messages.isEmpty, ContinuousClock.now - idle > .seconds(10) {
                var stalled = StorageError("the stream \(names.stream) stopped delivering at stream seq \(streamNext) of \(through)")
                stalled.isTransient = true
                throw stalled
            }
            for message in messages where message.sid == sid {
                if let replies = Self.controlReplies(message, deliverSubject: deliver) {
                    for reply in replies { connection.publish(reply, payload: []) }
                    continue
                }
                guard let ack = message.reply.flatMap(JetStreamAckSubject.init), ack.stream == names.stream else { continue }
                if ack.streamSequence < streamNext { continue }
                guard ack.streamSequence == streamNext else {
                    throw StorageError("the stream \(names.stream) delivered stream seq \(ack.streamSequence) where stream seq \(streamNext) was expected; messages are missing from the stream", isDataProblem: true)
                }
                switch Self.validRecords(message, names: names, keys: configuration.keys, history: history,
                                         next: position.seq + 1, previousTag: position.tag) {
                case .success(let batch):
                    records.append(contentsOf: batch)
                    position = LogPosition(seq: batch.last?.seq ?? position.seq, streamSeq: streamNext,
                                           tag: message.headers?[JetStreamLog.Replicator.tagHeader] ?? "")
                case .failure(let reason):
                    skipped += 1
                    if skipped <= 20 {
                        logger.warning("skipped stream seq \(streamNext) of \(names.stream): \(reason.message); every hub of the stream skips it alike")
                    }
                }
                streamNext += 1
                // Progress is a message, not a heartbeat: a consumer that only beats is stuck.
                idle = .now
            }
            try connection.flush()
        }
        return (records, position, skipped)
    }

    /// The `CONSUMER.CREATE` body of the consumer a hub reads the stream with, at open and
    /// afterwards (the one configuration).
    ///
    /// Pushed to `deliver` from stream seq `start`, every subject (a message another client
    /// published on the genesis subject is a message of the stream like any, skipped as not a
    /// record: a filter would leave gaps in the stream seqs), no acknowledgements, flow control,
    /// a heartbeat a second, gone 10 s after its hub stops reading, and the hub's `metadata`
    /// (``LogPeer``).
    ///
    /// - Parameters:
    ///   - names: The stream's names.
    ///   - deliver: The subject it delivers to.
    ///   - start: The first stream seq it delivers.
    ///   - metadata: What it says about its hub.
    /// - Returns: The request's body.
    static func readingConsumer(names: Names, deliver: String, from start: UInt64, metadata: JSON) -> JSON {
        ["stream_name": .string(names.stream), "config": [
            "deliver_subject": .string(deliver), "deliver_policy": "by_start_sequence", "opt_start_seq": JSON(start),
            "ack_policy": "none", "flow_control": true, "idle_heartbeat": 1_000_000_000,
            "inactive_threshold": 10_000_000_000, "metadata": metadata,
        ]]
    }

    /// Whether a message on a consumer's subscription is one of JetStream's own (an idle
    /// heartbeat or a flow-control request), and if so the subjects to answer on.
    ///
    /// JetStream sends those on the consumer's deliver subject, with status 100; a stored
    /// message comes with the subject it was published on, whatever headers its publisher
    /// wrote (a publisher could store `NATS/1.0 100` and `Nats-Consumer-Stalled:
    /// $JS.API.STREAM.PURGE.…`). So a status is honoured only on the deliver subject, and
    /// only `$JS.FC.` subjects are answered: nothing a publisher stored can make the hub send
    /// a request of its choosing.
    ///
    /// - Parameters:
    ///   - message: A message on the consumer's subscription.
    ///   - deliverSubject: The consumer's deliver subject.
    /// - Returns: `nil` for a stored message; else the flow-control subjects to answer (maybe none).
    static func controlReplies(_ message: NATSMessage, deliverSubject: String) -> [String]? {
        guard message.subject == deliverSubject, let headers = message.headers, headers.status == 100 else { return nil }
        var replies: [String] = []
        if let reply = message.reply, reply.hasPrefix("$JS.FC.") { replies.append(reply) }
        if let stalled = headers["Nats-Consumer-Stalled"], stalled.hasPrefix("$JS.FC."), !stalled.contains(" ") {
            replies.append(stalled)
        }
        return replies
    }

    /// The records a message holds, if it is the valid next record batch of the history:
    /// published on the actions subject, one or more record bodies (one per line) of seqs
    /// `next`, `next + 1`, …, tagged under `keys` on `previousTag` (the tag of the last valid
    /// batch). Anything else (another client's message, a forged or damaged record, a copy of an
    /// old one, a hub's proposal stored after another record than the one it was proposed on)
    /// is skipped by every hub alike: validity depends on the stream's contents and the key only.
    ///
    /// - Parameters:
    ///   - message: A message of the stream.
    ///   - names: The stream's names.
    ///   - keys: The log's keys.
    ///   - history: The history id.
    ///   - next: The action seq the next valid record has.
    ///   - previousTag: The tag of the last valid batch ("" before the first).
    /// - Returns: The records, or why the message is not a batch of them (text from the message escaped).
    static func validRecords(_ message: NATSMessage, names: Names, keys: LogKeys, history: String, next: UInt64,
                             previousTag: String) -> Result<[LogRecord], StorageError> {
        guard message.subject == names.actions || message.subject == names.records else {
            return .failure(StorageError("it was published on \(ControlCharacters.escaped(String(message.subject.prefix(200)))), not on \(names.actions) or \(names.records)"))
        }
        guard let tag = message.headers?[Replicator.tagHeader] else {
            return .failure(StorageError("it carries no \(Replicator.tagHeader) tag: no hub of this stream wrote it"))
        }
        // The tag first: nothing of a message another client forged is parsed.
        guard keys.isValid(tag, for: .record(history: history, seq: next, previous: previousTag, body: message.payload)) else {
            return .failure(StorageError("its tag does not verify under this hub's key for action seq \(next): forged, written with another key, or proposed on another record than the last valid one"))
        }
        var records: [LogRecord] = []
        var expected = next
        for body in message.payload.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            let read = body.withUnsafeBytes { LogRecord(canonicalBody: $0) }
                ?? (try? JSON(parsing: Array(body))).flatMap { LogRecord(json: $0) }
            guard let record = read else {
                return .failure(StorageError("its body (\(message.payload.count) bytes) holds something that is not a record"))
            }
            guard record.seq == expected else {
                return .failure(StorageError("it holds action seq \(record.seq) where seq \(expected) comes next"))
            }
            records.append(record)
            expected += 1
        }
        return .success(records)
    }

    private func readSharedSnapshot(_ connection: NATSConnection, history: String, layout: StreamLayout) throws -> StoredSnapshot? {
        guard let head = try lastMessage(connection, stream: names.meta, subject: layout.headSubject(names)),
              let json = try? JSON(parsing: head.data), json["history"]?.stringValue == history,
              let seq = json["seq"]?.uint64Value, let chunks = json["chunks"]?.intValue, let first = json["first"]?.uint64Value,
              (1...(1 << 20)).contains(chunks), let tag = json["tag"]?.stringValue,
              let content = json["content"]?.stringValue else { return nil }
        // The head is tagged like a record: only a hub holding the key wrote it.
        guard configuration.keys.isValid(head.headers?[Replicator.tagHeader] ?? "", for: .snapshotHead(body: head.data, contentDigest: [])) else {
            logger.warning("the shared snapshot head at seq \(seq) does not verify under this hub's key (not written by a hub of this stream); starting without it")
            return nil
        }
        var body: [UInt8] = []
        var position = first
        var found = 0
        // Messages of other writers between the chunks are passed over, within a bound.
        var reads = 0
        while found < chunks {
            reads += 1
            guard reads <= chunks * 2 + 1_000,
                  let chunk = try getMessage(connection, stream: names.meta,
                                             body: ["seq": JSON(position), "next_by_subj": .string(layout.chunkSubject(names))]) else { return nil }
            position = chunk.seq + 1
            guard chunk.headers?["StoreSync-Snapshot"] == tag else { continue }
            body.append(contentsOf: chunk.data)
            found += 1
        }
        guard SHA256.hex(SHA256.hash(body)) == content, let parsed = try? JSON(parsing: body),
              case .success(let snapshot) = StoredSnapshot.read(parsed), snapshot.seq == seq, snapshot.position != nil else {
            logger.warning("the shared snapshot at seq \(seq) is damaged; starting from an older one")
            return nil
        }
        if let app = snapshot.app, !carries(app) {
            throw StorageError("app-mismatch: the shared log \(configuration.redacted) was upgraded to app \(ControlCharacters.escaped(app)) (its shared snapshot at seq \(seq) holds a state of that version), and this hub carries \(accepts.joined(separator: ", ")); start it with a build that carries \(ControlCharacters.escaped(app))", isDataProblem: true)
        }
        return snapshot
    }

    private func readLease(_ connection: NATSConnection) throws(NATSError) -> (below: Int, subjectSeq: UInt64) {
        guard let lease = try lastMessage(connection, stream: names.meta, subject: names.lease),
              let json = try? JSON(parsing: lease.data), let below = json["below"]?.intValue,
              (0...Self.maxReplicaID).contains(below) else { return (0, 0) }
        return (below, lease.seq)
    }

    // MARK: - The contract

    /// Proposals of this pass, not handed to the worker yet (the hub's thread only): a pass's
    /// proposals go as one command, and the worker writes them as few messages (record batches).
    private var proposals: [Command] = []
    /// The chain being gathered for the next command: records that each follow the one before,
    /// of one epoch, the first expected after `chainExpecting` (appended in place, never copied).
    private var chain: [LogRecord] = []
    private var chainExpecting: UInt64 = 0
    private var chainEpoch = 0

    package func propose(_ records: [LogRecord], expectingLast: UInt64, epoch: Int) {
        // Following the last one of the same epoch: the same batch.
        if let last = chain.last, chainEpoch == epoch, last.seq == expectingLast {
            chain.append(contentsOf: records)
            return
        }
        closeChain()
        chain = records
        chainExpecting = expectingLast
        chainEpoch = epoch
    }

    /// Ends the chain being gathered: it becomes one command.
    private func closeChain() {
        guard !chain.isEmpty else { return }
        proposals.append(.propose(chain, expectingLast: chainExpecting, epoch: chainEpoch))
        chain = []
    }

    /// The group commit of the pass: the proposals go to the worker, in one wake-up.
    package func flush() {
        closeChain()
        guard !proposals.isEmpty else { return }
        worker.enqueue(contentsOf: proposals)
        proposals.removeAll(keepingCapacity: true)
    }

    package func poll(into events: inout [LogEvent]) {
        let first = events.count
        worker.takeEvents(into: &events)
        for event in events[first...] {
            if case .broken(let error) = event, error.discardsLocalSnapshots, let localSnapshots {
                localSnapshots.discardAll()
                logger.notice("discarded the local snapshots in \(localSnapshots.directory): they may hold the record the stream no longer has")
            }
        }
    }

    package var readiness: LogReadiness? { LogReadiness(fd: worker.readyFD) }

    package func reserveReplicaIDs(from next: Int, count: Int) throws(StorageError) -> Range<Int> {
        try worker.reserve(from: next, count: count)
    }

    package func requestReplicaIDs(from next: Int, count: Int) {
        worker.enqueue(.lease(from: next, count: count, answer: .event))
    }

    package func writeSnapshot(_ snapshot: StoredSnapshot) throws(StorageError) {
        if let localSnapshots {
            try localSnapshots.write(snapshot)
        }
        worker.enqueue(.snapshot(snapshot))
    }

    package func probe() -> Bool { worker.isAvailable }

    package var status: LogStatus {
        var status = LogStatus(kind: "nats", location: configuration.redacted)
        status.dataDirectory = dataDirectory
        status.snapshotSeq = worker.facts.sharedSnapshotSeq
        status.shared = worker.statusJSON
        return status
    }

    package var isShared: Bool { true }
    package var mayRefuse: Bool { true }

    package func hubs() throws(StorageError) -> [LogPeer] {
        guard case .hubs(let result) = try worker.ask(.hubs) else { throw StorageError("the shared log answered another question") }
        return try result.get()
    }

    package func prepareUpgrade() throws(StorageError) {
        guard case .moved(let result) = try worker.ask(.moveToRecords) else { throw StorageError("the shared log answered another question") }
        let layout = try result.get()
        logger.notice("the stream \(names.stream) is in the \(layout.rawValue) layout: hubs that predate upgrade records can no longer write to it")
    }

    package func close() {
        guard started else { return }
        started = false
        worker.stop()
        localSnapshots?.close()
    }
}

// MARK: - Local snapshots

/// Snapshots a hub on a shared log keeps in its data directory for a fast restart: the same
/// `snapshot-SEQ.snap` files as a file log's, a `storesync.json` naming the app, the history
/// and the log, and the directory lock.
final class LocalSnapshots {
    let directory: String
    private let handle: DirectoryHandle
    private let lockFD: Int32
    private(set) var newest: StoredSnapshot?

    init(directory: String, accepts: [String], history: String, log: String) throws(StorageError) {
        self.directory = directory
        do throws(SystemError) {
            try FileSystem.makeDirectory(directory)
        } catch {
            throw StorageError("cannot use the data directory: \(error.message)")
        }
        // A symbolic link, another user's directory or one others may write in is refused before
        // anything (the lock first) is created in it.
        do throws(SystemError) {
            try FileSystem.checkPrivateDirectory(directory)
        } catch {
            throw StorageError(error.message)
        }
        let locked: Int32?
        do throws(SystemError) {
            locked = try FileSystem.lockExclusive(directory + "/lock")
        } catch {
            throw StorageError("cannot lock the data directory: \(error.message)")
        }
        guard let lockFD = locked else {
            throw StorageError("another hub is using the data directory \(directory) (it holds \(directory)/lock); stop it first, or give this hub another --data-dir")
        }
        self.lockFD = lockFD
        do throws(SystemError) {
            handle = try DirectoryHandle(directory)
        } catch {
            FileSystem.close(lockFD)
            throw StorageError("cannot use the data directory: \(error.message)")
        }
        let metaPath = directory + "/" + FileLog.metaName
        if let bytes = try? FileSystem.read(metaPath), let meta = try? JSON(parsing: bytes) {
            guard let app = meta["app"]?.stringValue, accepts.contains(where: { JSONKey($0) == JSONKey(app) }) else {
                close()
                throw StorageError("app-mismatch: the data directory \(directory) was written by app \(ControlCharacters.escaped(meta["app"]?.stringValue ?? "?")), this hub runs \(accepts.joined(separator: ", ")); use another --data-dir", isDataProblem: true)
            }
            if meta["history"]?.stringValue != history {
                // Another history (or a file log's directory): its snapshots say nothing about this log.
                close()
                throw StorageError("the data directory \(directory) holds history \(meta["history"]?.stringValue ?? "?"), the shared log \(log) history \(history); give this hub an empty --data-dir for its local snapshots", isDataProblem: true)
            }
        } else {
            let meta: JSON = ["app": .string(accepts.last ?? ""), "format": JSON(JournalFormat.currentFormat),
                              "history": .string(history), "log": .string(log)]
            do throws(SystemError) {
                try handle.writeAtomically(FileLog.metaName, meta.canonicalBytes)
            } catch {
                close()
                throw StorageError("cannot write \(metaPath): \(error.message)")
            }
        }
        for (_, path) in (try? FileLog.listSnapshots(directory)) ?? [] {
            if case .success(let snapshot) = FileLog.readSnapshot(path) {
                newest = snapshot
                break
            }
        }
    }

    func path(of seq: UInt64) -> String { directory + "/" + FileLog.snapshotName(seq) }

    func write(_ snapshot: StoredSnapshot) throws(StorageError) {
        do throws(SystemError) {
            try handle.writeAtomically(FileLog.snapshotName(snapshot.seq), FileLog.snapshotFile(snapshot))
        } catch {
            throw StorageError("cannot write a local snapshot: \(error.message)")
        }
        newest = snapshot
        if let snapshots = try? FileLog.listSnapshots(directory) {
            for (_, path) in snapshots.dropFirst(2) { FileSystem.remove(path) }
        }
    }

    /// Removes every local snapshot (the next start reads the shared snapshot and the stream).
    func discardAll() {
        for (_, path) in (try? FileLog.listSnapshots(directory)) ?? [] { FileSystem.remove(path) }
        newest = nil
    }

    /// Releases the directory and its lock (once; later calls do nothing).
    func close() {
        guard !closed else { return }
        closed = true
        handle.close()
        FileSystem.close(lockFD)
    }

    private var closed = false
}
