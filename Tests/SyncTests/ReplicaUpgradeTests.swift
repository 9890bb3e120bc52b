import BuiltinApps
import Foundation
import StoreReplica
@testable import StoreSyncCommands
import SyncCore
import SyncLocks
import SyncPOSIX
import Synchronization
import Testing

/// One connection of a ``ScriptedHub``, seen from the hub: read what the replica sends, send
/// what the script says.
struct ScriptedConnection {
    let fd: Int32
    private var decoder = FrameDecoder(maxPayloadBytes: 1 << 20)

    init(fd: Int32) { self.fd = fd }

    /// The replica's next message, or `nil` at end of file or after `timeoutMilliseconds`.
    mutating func read(timeoutMilliseconds: Int32 = 10_000) -> JSON? {
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            if let frame = try? decoder.nextFrame() { return try? JSON(parsing: frame) }
            guard UnixSocket.waitUntil(fd, timeoutMilliseconds: timeoutMilliseconds) else { return nil }
            switch buffer.withUnsafeMutableBytes({ UnixSocket.read(fd, into: $0) }) {
            case .bytes(let count): decoder.append(Array(buffer[0..<count]))
            case .wouldBlock: continue
            case .endOfFile, .failed: return nil
            }
        }
    }

    /// The replica's next message of `type` (others are skipped), or `nil`.
    mutating func read(type: String, timeoutMilliseconds: Int32 = 10_000) -> JSON? {
        while let message = read(timeoutMilliseconds: timeoutMilliseconds) {
            if message["type"]?.stringValue == type { return message }
        }
        return nil
    }

    /// Sends one message.
    func send(_ message: JSON) {
        guard let frame = try? Frame.encode(message) else { return }
        try? UnixSocket.writeAll(fd, frame)
    }

    /// Sends one hub message.
    func send(_ message: HubMessage) { send(message.json) }

    /// Waits until the replica closes the connection (or `timeoutMilliseconds` pass).
    mutating func waitForClose(timeoutMilliseconds: Int32 = 30_000) {
        while read(timeoutMilliseconds: timeoutMilliseconds) != nil {}
    }
}

/// A fake hub on a temp socket: each connection it accepts is played by the next handler of
/// its script, on a thread of its own; a connection past the script is closed at once.
///
/// Its accept thread is the only user of the listening descriptor, so it alone closes it, and
/// ``stop()`` waits for that. Closed from another thread while the accept thread was between
/// its check of `stopped` and its `poll`/`accept`, the descriptor's number could be reused at
/// once by a socket of a test running in parallel (another fake hub's listener, a hub's):
/// this thread would then accept that test's connection and, past its script, close it with
/// the `hello` unread, and that test's attach failed with "Connection reset by peer".
final class ScriptedHub: Sendable {
    typealias Handler = @Sendable (inout ScriptedConnection) -> Void

    let fixture: Fixture
    private let accepted = Atomic<Int>(0)
    private let closed = Atomic<Int>(0)
    private let stopped = Atomic<Bool>(false)
    /// Signalled once the accept thread has closed the listener, its last use of it.
    private let listenerClosed = DispatchSemaphore(value: 0)

    init(_ script: [Handler]) throws {
        fixture = try Fixture()
        let listener: ListeningSocket
        do {
            listener = try UnixSocket.listen(at: fixture.socket)
        } catch {
            fixture.shutdown()
            throw error
        }
        Thread.detachNewThread { [self] in
            var remaining = script[...]
            while !stopped.load(ordering: .acquiring) {
                guard UnixSocket.waitUntil(listener.fd, timeoutMilliseconds: 20),
                      let connection = try? UnixSocket.accept(listener.fd) else { continue }
                accepted.add(1, ordering: .acquiringAndReleasing)
                guard let handler = remaining.popFirst() else {
                    UnixSocket.close(connection)
                    continue
                }
                Thread.detachNewThread {
                    var scripted = ScriptedConnection(fd: connection)
                    handler(&scripted)
                    UnixSocket.close(connection)
                    self.closed.add(1, ordering: .acquiringAndReleasing)
                }
            }
            _ = listener.close()
            listenerClosed.signal()
        }
    }

    /// How many connections it accepted.
    var connections: Int { accepted.load(ordering: .acquiring) }

    /// How many connections its script played to the end and closed.
    var closedConnections: Int { closed.load(ordering: .acquiring) }

    /// Stops accepting, waits until the accept thread has closed the listener (within one
    /// 20 ms poll), and removes the socket. Connections already accepted play on.
    func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        listenerClosed.wait()
        fixture.shutdown()
    }

    // MARK: Messages of the json app's hub

    static let app = JSONApp()
    static let history = "0123456789abcdef"

    /// A full welcome for the json app at `seq`, with `state`.
    static func welcome(seq: UInt64, state: JSON = .object([:]), replica: Int = 1) -> HubMessage {
        .welcome(Welcome(hub: "00000000000000aa", replica: replica, seq: seq, state: state, digest: app.digest(of: state),
                         history: history, fingerprint: JSONApp.fingerprint))
    }
}

/// A policy that retries fast, for tests.
private let quickRetries = ReconnectPolicy(initialDelay: .milliseconds(5), maxDelay: .milliseconds(20))

/// The outdated reason in an error, if it is one.
private func outdated(_ error: any Error) -> AppOutdated? {
    guard case .appOutdated(let reason)? = error as? ReplicaError else { return nil }
    return reason
}

@Suite("StoreReplica and replica-cli across app-version upgrades (a fake hub, and one real)")
struct ReplicaUpgradeTests {
    static let set1: JSON = ["type": "set", "path": "/a", "value": 1]
    static let set2: JSON = ["type": "set", "path": "/b", "value": 2]

    @Test("upgraded to another version: pending dispatches fail app-outdated (never applied), the replica ends typed and does not reconnect")
    func upgradedPastThisReplica() async throws {
        let notice = UpgradeNotice(seq: 2, from: "json@1", to: "json@2", digest: "00112233445566778899aabbccddeeff")
        let hub = try ScriptedHub([{ connection in
            guard let hello = connection.read(type: "hello"), hello["fingerprint"] == "json@1" else { return }
            connection.send(ScriptedHub.welcome(seq: 0))
            // Two dispatches arrive (one awaited, one through the store); neither is sequenced.
            guard connection.read(type: "dispatch") != nil, connection.read(type: "dispatch") != nil else { return }
            connection.send(.action(seq: 1, origin: 9, id: .number(1), action: ["type": "set", "path": "/x", "value": 0]))
            connection.send(.upgraded(notice))
        }])
        defer { hub.stop() }
        let failures = Locked<[ReplicaError]>([])
        let events = Locked<[ReplicaEvent<JSONApp.Action>]>([])
        let replica = try Replica.attach(app: JSONApp(), socketPath: hub.fixture.socket, startReading: false, reconnect: quickRetries,
                                         onDispatchFailure: { error, _ in failures.withLock { $0.append(error) } })
        defer { replica.close() }
        let token = replica.observeEvents { event in events.withLock { $0.append(event) } }
        defer { token.cancel() }
        replica.startReading()
        let awaited = Task { () -> Result<UInt64, ReplicaError> in
            do throws(ReplicaError) { return .success(try await replica.dispatch(json: Self.set1)) } catch { return .failure(error) }
        }
        try await waitUntil("the first dispatch to be sent") { hub.connections == 1 }
        try await Task.sleep(for: .milliseconds(20))
        replica.store.dispatch(.set(try JSONPointer("/b"), 2))

        let reason = await replica.waitUntilDisconnected()
        #expect(outdated(reason)?.notice == notice)
        #expect(outdated(reason)?.historyFingerprint == "json@2")
        #expect(reason.wireError?.code == .appOutdated)
        #expect(reason.description.contains("json@2") && reason.description.contains("seq 2"))
        #expect(replica.seq == 1, "the action before the upgrade was applied")

        guard case .failure(let failure) = await awaited.value else {
            Issue.record("a dispatch not sequenced before the upgrade must fail")
            return
        }
        #expect(outdated(failure)?.notice == notice)
        #expect(failure.wireError?.code == .appOutdated)
        #expect(failure.description.contains("never applied"), "\(failure)")
        try await waitUntil("the store's dispatch to be reported") { failures.withLock { $0.count } == 1 }
        #expect(failures.withLock { $0.allSatisfy { outdated($0)?.notice == notice } })

        // Ended for good: a later dispatch is refused with the same typed reason, and no
        // reconnection is attempted.
        #expect(throws: ReplicaError.self) { try replica.send(json: Self.set2) }
        do {
            try replica.send(json: Self.set2)
        } catch {
            #expect(outdated(error) != nil)
        }
        try await Task.sleep(for: .milliseconds(200))
        #expect(hub.connections == 1)
        #expect(replica.linkState == .disconnected(reason))
        let last = events.withLock { $0.last }
        guard case .disconnected(let ended)? = last else {
            Issue.record("the last event must be disconnected, got \(String(describing: last))")
            return
        }
        #expect(ended == reason)
        #expect(!events.withLock { $0.contains { if case .connection = $0 { true } else { false } } }, "no reconnection")
    }

    @Test("upgraded, then the hub closes with the replica's dispatch unread (a reset): the frames before the reset win, the replica ends outdated")
    func upgradedThenReset() async throws {
        let notice = UpgradeNotice(seq: 2, from: "json@1", to: "json@2", digest: "00112233445566778899aabbccddeeff")
        let hub = try ScriptedHub([{ connection in
            guard connection.read(type: "hello") != nil else { return }
            connection.send(ScriptedHub.welcome(seq: 0))
            // The dispatch arrives and is left unread: closing with it in the socket's buffer
            // makes the replica's next read after these frames fail with ECONNRESET.
            guard UnixSocket.waitUntil(connection.fd, timeoutMilliseconds: 10_000) else { return }
            connection.send(.action(seq: 1, origin: 9, id: .number(1), action: ["type": "set", "path": "/x", "value": 0]))
            connection.send(.upgraded(notice))
        }])
        defer { hub.stop() }
        let replica = try Replica.attach(app: JSONApp(), socketPath: hub.fixture.socket, startReading: false, reconnect: quickRetries)
        defer { replica.close() }
        let awaited = Task { () -> Result<UInt64, ReplicaError> in
            do throws(ReplicaError) { return .success(try await replica.dispatch(json: Self.set1)) } catch { return .failure(error) }
        }
        // The reader starts only once the hub has closed: the reset is there before the frames are read.
        try await waitUntil("the hub to close the connection") { hub.closedConnections == 1 }
        replica.startReading()

        let reason = await replica.waitUntilDisconnected()
        #expect(outdated(reason)?.notice == notice, "\(reason)")
        #expect(replica.seq == 1, "the action before the upgrade was applied")
        guard case .failure(let failure) = await awaited.value else {
            Issue.record("a dispatch not sequenced before the upgrade must fail")
            return
        }
        #expect(outdated(failure)?.notice == notice, "\(failure)")
        try await Task.sleep(for: .milliseconds(100))
        #expect(hub.connections == 1, "no reconnection")
    }

    @Test("upgraded to this replica's own version: it attaches again and takes the full welcome")
    func upgradedToOwnVersion() async throws {
        let migrated: JSON = ["a": 1, "migrated": true]
        let resumeAsked = Atomic<Bool>(true)
        let hub = try ScriptedHub([
            { connection in
                guard connection.read(type: "hello") != nil else { return }
                connection.send(ScriptedHub.welcome(seq: 0))
                connection.send(.upgraded(UpgradeNotice(seq: 1, from: "json@0", to: "json@1", digest: JSONApp().digest(of: migrated))))
            },
            { connection in
                guard let hello = connection.read(type: "hello") else { return }
                resumeAsked.store(hello["resume"] != nil, ordering: .releasing)
                connection.send(ScriptedHub.welcome(seq: 1, state: migrated, replica: 2))
                connection.waitForClose()
            },
        ])
        defer { hub.stop() }
        let changes = Locked<[ConnectionChange]>([])
        let replica = try Replica.attach(app: JSONApp(), socketPath: hub.fixture.socket, startReading: false, reconnect: quickRetries)
        defer { replica.close() }
        let token = replica.observeEvents { event in
            if case .connection(let change) = event { changes.withLock { $0.append(change) } }
        }
        defer { token.cancel() }
        replica.startReading()
        try await waitUntil("the replica to take the upgraded state") {
            changes.withLock { $0.contains(.rehydrated(seq: 1)) }
        }
        #expect(replica.store.state == migrated)
        #expect(replica.seq == 1 && replica.isConnected && replica.replicaID == 2)
        let resumed = resumeAsked.load(ordering: .acquiring)
        #expect(!resumed, "after an upgrade to its version the replica asks for a full welcome")
    }

    @Test("error app-outdated at hello: attach throws the typed error and does not retry")
    func outdatedAtHello() async throws {
        let hub = try ScriptedHub([{ connection in
            guard connection.read(type: "hello") != nil else { return }
            connection.send(.error(WireError(.appOutdated, "the history runs json@2 since seq 4; this replica runs json@1")))
        }])
        defer { hub.stop() }
        do {
            _ = try Replica.attach(app: JSONApp(), socketPath: hub.fixture.socket, reconnect: quickRetries)
            Issue.record("attach must fail")
        } catch {
            #expect(outdated(error)?.notice == nil)
            #expect(outdated(error)?.fingerprint == "json@1")
            #expect(error.wireError?.code == .appOutdated)
            #expect(error.description.contains("json@2"))
        }
        try await Task.sleep(for: .milliseconds(100))
        #expect(hub.connections == 1)
    }

    @Test("reconnecting into app-outdated: dispatches in doubt get their outcome (duplicate) or fail app-outdated; the replica ends, no retry")
    func outdatedAtReconnect() async throws {
        let firstID = Locked<DispatchID?>(nil)
        let hub = try ScriptedHub([
            { connection in
                guard connection.read(type: "hello") != nil else { return }
                connection.send(ScriptedHub.welcome(seq: 0))
                // Two dispatches arrive; the link drops before any answer.
                _ = connection.read(type: "dispatch")
                _ = connection.read(type: "dispatch")
            },
            { connection in
                guard connection.read(type: "hello") != nil else { return }
                // The first was sequenced (at seq 1) before the upgrade: its outcome comes first.
                connection.send(.duplicate(id: firstID.withLock { $0 } ?? .number(0), seq: 1))
                connection.send(.error(WireError(.appOutdated, "the history runs json@2 since seq 2; this replica runs json@1")))
            },
        ])
        defer { hub.stop() }
        let failures = Locked<[ReplicaError]>([])
        let replica = try Replica.attach(app: JSONApp(), socketPath: hub.fixture.socket, reconnect: quickRetries,
                                         onDispatchFailure: { error, _ in failures.withLock { $0.append(error) } })
        defer { replica.close() }
        let first = try replica.send(json: Self.set1)
        firstID.withLock { $0 = first }
        let dispatched = Task { () -> Result<UInt64, ReplicaError> in
            do throws(ReplicaError) { return .success(try await replica.dispatch(json: Self.set2)) } catch { return .failure(error) }
        }
        let reason = await replica.waitUntilDisconnected()
        #expect(outdated(reason) != nil, "\(reason)")
        guard case .failure(let failure) = await dispatched.value else {
            Issue.record("the dispatch the hub never sequenced must fail")
            return
        }
        #expect(outdated(failure) != nil, "\(failure)")
        #expect(failure.description.contains("never applied"))
        try await Task.sleep(for: .milliseconds(100))
        #expect(hub.connections == 2, "no attempt after app-outdated")
        #expect(failures.withLock { $0 }.isEmpty, "the dispatch answered duplicate is not reported as failed")
    }

    @Test("waiting, then welcome: attach reports the wait and keeps waiting past its read timeout slices, then attaches")
    func waitingThenWelcome() async throws {
        let notice = WaitingNotice(reason: "upgrade", fingerprint: "json@1", seq: 3, message: "the history runs json@0; waiting for an upgrade to json@1")
        let hub = try ScriptedHub([{ connection in
            guard let hello = connection.read(type: "hello"), hello["fingerprint"] == "json@1" else { return }
            connection.send(.waiting(notice))
            Thread.sleep(forTimeInterval: 0.6)
            connection.send(ScriptedHub.welcome(seq: 4, state: ["upgraded": true]))
            connection.waitForClose()
        }])
        defer { hub.stop() }
        let heard = Locked<[WaitingNotice]>([])
        let replica = try Replica.attach(app: JSONApp(), socketPath: hub.fixture.socket, reconnect: .never,
                                         onWaiting: { notice in heard.withLock { $0.append(notice) } })
        defer { replica.close() }
        #expect(heard.withLock { $0 } == [notice])
        #expect(replica.seq == 4 && replica.store.state == ["upgraded": true])
        #expect(replica.waiting == nil && replica.isConnected)
    }

    @Test("the async attach waits while held at most its timeout")
    func waitingBoundedByTimeout() async throws {
        // The hold as the hub sees it, from its `waiting` to the replica's close, timed on the
        // hub's thread: when the suite's other tests hold the cooperative threads, this test's
        // task may resume seconds after the attach thread gave up, which says nothing of the hold.
        let held = Locked<Duration?>(nil)
        let hub = try ScriptedHub([{ connection in
            guard connection.read(type: "hello") != nil else { return }
            let sent = ContinuousClock.now
            connection.send(.waiting(WaitingNotice(reason: "upgrade", fingerprint: "json@1", seq: 0, message: "held")))
            connection.waitForClose()
            held.withLock { $0 = ContinuousClock.now - sent }
        }])
        defer { hub.stop() }
        let heard = Atomic<Int>(0)
        let started = ContinuousClock.now
        do {
            _ = try await Replica.attach(app: JSONApp(), socketPath: hub.fixture.socket, reconnect: .never, timeout: .seconds(1),
                                         onWaiting: { _ in heard.add(1, ordering: .relaxed) })
            Issue.record("attach must give up")
        } catch {
            guard case .disconnected(let message) = error else {
                Issue.record("unexpected \(error)")
                return
            }
            #expect(message.contains("held this replica's hello"), "\(message)")
        }
        #expect(heard.load(ordering: .relaxed) == 1)
        try await waitUntil("the hub to see the replica close") { held.withLock { $0 } != nil }
        let hold = held.withLock { $0 } ?? .zero
        #expect(hold >= .seconds(1) && hold < scaled(.seconds(5)), "held for \(hold), with a timeout of 1 s")
        #expect(ContinuousClock.now - started < scaled(.seconds(30)), "the async attach returns once its thread gives up")
    }

    @Test("waiting while reconnecting: an event and Replica.waiting until the welcome")
    func waitingWhileReconnecting() async throws {
        let release = Atomic<Bool>(false)
        let notice = WaitingNotice(reason: "upgrade", fingerprint: "json@1", seq: 7, message: "held")
        let hub = try ScriptedHub([
            { connection in
                guard connection.read(type: "hello") != nil else { return }
                connection.send(ScriptedHub.welcome(seq: 0))
            },   // then closed without a word: the replica reconnects
            { connection in
                guard connection.read(type: "hello") != nil else { return }
                connection.send(.waiting(notice))
                let deadline = ContinuousClock.now + scaled(.seconds(30))
                while !release.load(ordering: .acquiring), ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.01) }
                connection.send(ScriptedHub.welcome(seq: 8, state: ["n": 8], replica: 3))
                connection.waitForClose()
            },
        ])
        defer { hub.stop() }
        let changes = Locked<[ConnectionChange]>([])
        let replica = try Replica.attach(app: JSONApp(), socketPath: hub.fixture.socket, startReading: false, reconnect: quickRetries)
        defer { replica.close() }
        let token = replica.observeEvents { event in
            if case .connection(let change) = event { changes.withLock { $0.append(change) } }
        }
        defer { token.cancel() }
        replica.startReading()
        try await waitUntil("the hub to hold the replica") { replica.waiting != nil }
        #expect(replica.waiting == notice)
        #expect(changes.withLock { $0.contains(.waiting(notice)) })
        release.store(true, ordering: .releasing)
        try await waitUntil("the welcome") { replica.isConnected && replica.seq == 8 }
        #expect(replica.waiting == nil)
        #expect(changes.withLock { $0.last } == .rehydrated(seq: 8))
    }

    @Test("app-ahead at attach: retried with the policy's backoff, the wait reported once; never retried under .never")
    func appAheadRetries() async throws {
        let ahead: ScriptedHub.Handler = { connection in
            guard connection.read(type: "hello") != nil else { return }
            connection.send(.error(WireError(.appAhead, "this hub holds as many waiting replicas as it may")))
        }
        let hub = try ScriptedHub([ahead, ahead, { connection in
            guard connection.read(type: "hello") != nil else { return }
            connection.send(ScriptedHub.welcome(seq: 5, state: ["n": 5]))
            connection.waitForClose()
        }])
        defer { hub.stop() }
        let heard = Locked<[WaitingNotice]>([])
        let replica = try Replica.attach(app: JSONApp(), socketPath: hub.fixture.socket, reconnect: quickRetries,
                                         onWaiting: { notice in heard.withLock { $0.append(notice) } })
        defer { replica.close() }
        #expect(replica.seq == 5 && hub.connections == 3)
        #expect(heard.withLock { $0.count } == 1)
        #expect(heard.withLock { $0.first?.fingerprint } == "json@1")
        #expect(heard.withLock { $0.first?.message.contains("app-ahead") } == true)

        let refusing = try ScriptedHub([ahead])
        defer { refusing.stop() }
        do {
            _ = try Replica.attach(app: JSONApp(), socketPath: refusing.fixture.socket, reconnect: .never)
            Issue.record("attach must fail under .never")
        } catch {
            #expect(error.wireError?.code == .appAhead)
        }
        #expect(refusing.connections == 1)

        let limited = try ScriptedHub([ahead, ahead, ahead])
        defer { limited.stop() }
        var policy = quickRetries
        policy.maxAttempts = 1
        do {
            _ = try Replica.attach(app: JSONApp(), socketPath: limited.fixture.socket, reconnect: policy)
            Issue.record("attach must give up after one retry")
        } catch {
            #expect(error.wireError?.code == .appAhead)
        }
        #expect(limited.connections == 2)
    }

    @Test("app-ahead while reconnecting: retried, one waiting event, then attached")
    func appAheadWhileReconnecting() async throws {
        let hub = try ScriptedHub([
            { connection in
                guard connection.read(type: "hello") != nil else { return }
                connection.send(ScriptedHub.welcome(seq: 0))
            },
            { connection in
                guard connection.read(type: "hello") != nil else { return }
                connection.send(.error(WireError(.appAhead, "full")))
            },
            { connection in
                guard connection.read(type: "hello") != nil else { return }
                connection.send(.error(WireError(.appAhead, "full")))
            },
            { connection in
                guard connection.read(type: "hello") != nil else { return }
                connection.send(ScriptedHub.welcome(seq: 2, state: ["n": 2], replica: 4))
                connection.waitForClose()
            },
        ])
        defer { hub.stop() }
        let changes = Locked<[ConnectionChange]>([])
        let replica = try Replica.attach(app: JSONApp(), socketPath: hub.fixture.socket, startReading: false, reconnect: quickRetries)
        defer { replica.close() }
        let token = replica.observeEvents { event in
            if case .connection(let change) = event { changes.withLock { $0.append(change) } }
        }
        defer { token.cancel() }
        replica.startReading()
        try await waitUntil("the replica to attach after app-ahead") { replica.isConnected && replica.seq == 2 }
        let waits = changes.withLock { $0.filter { if case .waiting = $0 { true } else { false } } }
        #expect(waits.count == 1, "\(changes.withLock { $0 })")
        #expect(replica.waiting == nil)
        #expect(hub.connections == 4)
    }

    @Test("HubConnection.upgrade sends the request without hello and reads the report, or the refusal")
    func upgradeRequest() throws {
        let report = UpgradeReport(id: .string("u"), dryRun: true, changed: false, seq: 7, from: "todos@1", to: "todos@2",
                                   digest: "d", stateBytes: 120, detaches: [.init(replica: 3, name: "a", fingerprint: "todos@1")])
        let asked = Locked<JSON?>(nil)
        let hub = try ScriptedHub([
            { connection in
                guard let request = connection.read() else { return }
                asked.withLock { $0 = request }
                connection.send(.upgrade(report))
            },
            { connection in
                guard connection.read(type: "upgrade") != nil else { return }
                connection.send(.reject(id: .string("u"), error: WireError(.upgradeRefused, "the migration threw: no")))
            },
        ])
        defer { hub.stop() }
        let first = try HubConnection(path: hub.fixture.socket)
        #expect(try first.upgrade(to: "todos@2", dryRun: true, id: .string("u")) == report)
        #expect(asked.withLock { $0 } == ["type": "upgrade", "id": "u", "to": "todos@2", "dry_run": true])
        let second = try HubConnection(path: hub.fixture.socket)
        #expect(throws: ReplicaError.rejected(WireError(.upgradeRefused, "the migration threw: no"))) {
            try second.upgrade(id: .string("u"))
        }
    }

    @Test("a real hub: a todos@2 replica waits, the upgrade ends the todos@1 replica typed, and the waiting one attaches with the migrated state")
    func realHubUpgrade() async throws {
        let hub = try InProcessHub(TodosV1App()) { $0.versions = TodosApp().versions }
        defer { Task { try? await hub.stop() } }
        let old = try Replica.attach(app: TodosV1App(), socketPath: hub.fixture.socket, reconnect: quickRetries)
        defer { old.close() }
        try await old.dispatch(.add(id: "1", title: "milk", createdAt: 0))

        // The newer replica is held until the upgrade.
        let heard = Locked<[WaitingNotice]>([])
        let newer = Task { () -> Result<Replica<TodosApp>, ReplicaError> in
            do throws(ReplicaError) {
                return .success(try await Replica.attach(app: TodosApp(), socketPath: hub.fixture.socket, reconnect: quickRetries,
                                                         timeout: scaled(.seconds(60)),
                                                         onWaiting: { notice in heard.withLock { $0.append(notice) } }))
            } catch {
                return .failure(error)
            }
        }
        try await waitUntil("the hub to hold the todos@2 replica") { !heard.withLock { $0.isEmpty } }
        #expect(heard.withLock { $0.first?.fingerprint } == "todos@2")

        let report = try HubConnection(path: hub.fixture.socket).upgrade(to: "todos@2")
        #expect(report.changed && report.from == "todos@1" && report.to == "todos@2" && report.seq == 2)
        #expect(report.detaches.map(\.fingerprint) == ["todos@1"])

        let reason = await old.waitUntilDisconnected()
        #expect(outdated(reason)?.notice == UpgradeNotice(seq: 2, from: "todos@1", to: "todos@2", digest: report.digest))
        do {
            try await old.dispatch(.add(id: "2", title: "eggs", createdAt: 0))
            Issue.record("an outdated replica's dispatch must fail")
        } catch {
            #expect(outdated(error) != nil)
        }

        guard case .success(let upgraded) = await newer.value else {
            Issue.record("the todos@2 replica must attach: \(await newer.value)")
            return
        }
        defer { upgraded.close() }
        #expect(upgraded.seq == 2 && upgraded.store.state.todos.map(\.title) == ["milk"])
        #expect(upgraded.app.digest(of: upgraded.store.state) == report.digest)

        // A todos@1 replica that comes now is refused, typed, at hello.
        do {
            _ = try Replica.attach(app: TodosV1App(), socketPath: hub.fixture.socket, reconnect: quickRetries)
            Issue.record("a todos@1 hello after the upgrade must be refused")
        } catch {
            #expect(outdated(error)?.fingerprint == "todos@1")
            #expect(error.wireError?.code == .appOutdated)
        }
    }

    // MARK: replica-cli

    @Test("replica-cli upgrade: --to and --dry-run are its own; history keeps its --to; mistakes are usage errors")
    func upgradeOptions() throws {
        let options = try ReplicaOptions.parse(["replica-cli", "upgrade", "--to", "x@2", "--dry-run"])
        #expect(options.command == "upgrade" && options.upgradeTo == "x@2" && options.dryRun && options.arguments.isEmpty)
        let plain = try ReplicaOptions.parse(["replica-cli", "--json", "upgrade"])
        #expect(plain.command == "upgrade" && plain.upgradeTo == nil && !plain.dryRun && plain.json)
        #expect(try ReplicaOptions.parse(["replica-cli", "history", "--from", "1", "--to", "5"]).arguments == ["--from", "1", "--to", "5"])
        func error(_ arguments: String...) -> String? {
            do throws(UsageError) {
                _ = try ReplicaOptions.parse(["replica-cli"] + arguments)
                return nil
            } catch {
                return error.message
            }
        }
        #expect(error("upgrade", "--to", "x") == #"upgrade --to needs NAME@VERSION, e.g. --to todos@2, got "x""#)
        #expect(error("upgrade", "--to") == "upgrade --to needs NAME@VERSION, e.g. --to todos@2; see replica-cli --help")
        #expect(error("upgrade", "--bogus") == #"upgrade takes --to NAME@VERSION and --dry-run, not "--bogus"; see replica-cli --help"#)
        #expect(error("upgrade", "--bogus", "--help") == nil)
        let usage = ReplicaOptions.usage(program: "replica-cli", apps: [JSONApp()])
        #expect(usage.contains("  upgrade [--to NAME@VERSION] [--dry-run]\n"))
    }

    @Test("replica-cli upgrade prints one stable line for each kind of answer")
    func upgradeLines() throws {
        let detaches: [UpgradeReport.Detached] = [.init(replica: 1, name: "a", fingerprint: "todos@1"),
                                                  .init(replica: 2, name: "", fingerprint: nil),
                                                  .init(replica: 3, name: "b", fingerprint: "todos@1")]
        let upgraded = UpgradeReport(id: .number(1), dryRun: false, changed: true, seq: 7, from: "todos@1", to: "todos@2",
                                     digest: "abc", stateBytes: 312, detaches: detaches)
        #expect(ReplicaCommand.upgradeLine(upgraded) == "upgraded todos@1 → todos@2 at seq 7, digest abc (312 bytes); detached 3 replicas (todos@1: 2, generic: 1)")
        var lone = upgraded
        lone.detaches = []
        #expect(ReplicaCommand.upgradeLine(lone) == "upgraded todos@1 → todos@2 at seq 7, digest abc (312 bytes); detached no replicas")
        let same = UpgradeReport(id: .number(1), dryRun: false, changed: false, seq: 9, from: "todos@2", to: "todos@2",
                                 digest: "def", stateBytes: 40)
        #expect(ReplicaCommand.upgradeLine(same) == "the history already runs todos@2 (seq 9, digest def); nothing changed")
        var dry = upgraded
        dry.dryRun = true
        dry.changed = false
        dry.detaches = [detaches[0]]
        #expect(ReplicaCommand.upgradeLine(dry) == "dry run: todos@1 → todos@2 would migrate the state at seq 7 to digest abc (312 bytes) and detach 1 replica (todos@1: 1); nothing changed")
        var drySame = same
        drySame.dryRun = true
        #expect(ReplicaCommand.upgradeLine(drySame) == "dry run: the history already runs todos@2 (seq 9, digest def); nothing would change")
        // On a shared log: the hubs that lack the target, said after the replicas, and on the wire.
        var lacking = dry
        lacking.hubsLacking = [.init(name: "b pid 7", versions: ["todos@1"]), .init(name: "consumer X\u{1B}[2J", versions: nil)]
        let line = ReplicaCommand.upgradeLine(lacking)
        #expect(line.hasPrefix("dry run: todos@1 → todos@2 would migrate the state at seq 7 to digest abc (312 bytes) and detach 1 replica (todos@1: 1); hubs of the shared log without todos@2: b pid 7 (carries todos@1), consumer X"))
        #expect(line.hasSuffix("[2J (predates upgrades); nothing changed") && !line.contains("\u{1B}"), "\(line)")
        let wire = HubMessage.upgrade(lacking).json
        #expect(wire["hubs_lacking"] == [["hub": "b pid 7", "versions": ["todos@1"]], ["hub": "consumer X\u{1B}[2J", "versions": .null]])
        #expect(try HubMessage(json: wire) == .upgrade(lacking))
        #expect(HubMessage.upgrade(dry).json["hubs_lacking"] == nil, "absent when every hub has the target")
        var hostile = upgraded
        hostile.to = "todos@2\u{1B}[2J"
        #expect(!ReplicaCommand.upgradeLine(hostile).contains("\u{1B}"))
        #expect(WaitingReporter.line(history: "todos@1", running: "todos@2", program: "replica-cli")
            == "waiting: the hub's history runs todos@1; this replica runs todos@2 and attaches when the history is upgraded (replica-cli upgrade)")
    }
}

/// `replica-cli` against the shipped `hubd` across an upgrade: the waiting line, `upgrade`'s
/// lines, the outdated refusal, and `history` and `state --at` reading across the record.
@Suite("replica-cli across an upgrade (processes)", .serialized)
struct ReplicaCLIUpgradeProcessTests {
    @Test("waiting, upgrade --dry-run, upgrade, again; an outdated todos@1 told what to run; history and state --at across the record")
    func cliAcrossUpgrade() async throws {
        let fixture = try Fixture()
        defer { fixture.shutdown() }
        let data = fixture.directory + "/data"
        let seed = try await fixture.startHub(app: "todos@1", extra: ["--data-dir", data])
        let added = try await fixture.runCLI(["dispatch", #"{"type":"add","id":"a","title":"milk","createdAt":0}"#])
        #expect(added.status == 0 && added.out == ["1"], "\(added.err)")
        seed.signal(SIGTERM)
        #expect(try await seed.waitForExit() == 0)
        let hub = try await fixture.startHub(app: "todos", extra: ["--data-dir", data])
        defer { hub.signal(SIGTERM) }

        // An old terminal (the history's version, taken from the hub) and a new one, held.
        let old = try fixture.cli(["watch"], name: "old")
        let newer = try fixture.cli(["--app", "todos@2", "attach", "--name", "new"], name: "new")
        try await waitUntil("the new terminal to say it waits; stderr: \(newer.errorLines)") {
            newer.errorLines.contains("waiting: the hub's history runs todos@1; this replica runs todos@2 and attaches when the history is upgraded (replica-cli upgrade)")
        }
        // `watch` prints nothing when it attaches: ask the hub, or (under load) the dry run
        // could come first and find no replica to detach. The held one is not attached.
        try await waitUntil("the old terminal to attach; stderr: \(old.errorLines)") {
            try HubStatusProbe.status(fixture.socket).replicas.count == 1
        }

        let dry = try await fixture.runCLI(["upgrade", "--dry-run"])
        #expect(dry.status == 0, "\(dry.err)")
        #expect(dry.out.count == 1 && dry.out.first?.hasPrefix("dry run: todos@1 → todos@2 would migrate the state at seq 1 to digest ") == true, "\(dry.out)")
        #expect(dry.out.first?.hasSuffix("and detach 1 replica (todos@1: 1); nothing changed") == true, "\(dry.out)")

        let up = try await fixture.runCLI(["upgrade", "--to", "todos@2"])
        #expect(up.status == 0, "\(up.err)")
        #expect(up.out.first?.hasPrefix("upgraded todos@1 → todos@2 at seq 2, digest ") == true, "\(up.out)")
        #expect(up.out.first?.hasSuffix("; detached 1 replica (todos@1: 1)") == true, "\(up.out)")

        let again = try await fixture.runCLI(["upgrade", "--to", "todos@2"])
        #expect(again.status == 0 && again.out.first?.hasPrefix("the history already runs todos@2 (seq 2, digest ") == true, "\(again.out)")
        #expect(again.out.first?.hasSuffix("); nothing changed") == true)

        let refused = try await fixture.runCLI(["upgrade", "--to", "todos@9"])
        #expect(refused.status == 1 && refused.err.first?.hasPrefix("replica-cli: upgrade refused: ") == true, "\(refused.err)")

        // The old terminal is told what to run, and exits 1; the new one attached.
        #expect(try await old.waitForExit() == 1)
        #expect(old.errorLines.last == "replica-cli: the history was upgraded from todos@1 to todos@2 at seq 2; this replica runs todos@1: run replica-cli --app todos@2 watch", "\(old.errorLines)")
        try await newer.waitForLine("the attached line") { $0.hasPrefix("attached to hub ") && $0.contains("app todos@2, seq 2,") }
        newer.closeInput()
        #expect(try await newer.waitForExit() == 0)

        let outdated = try await fixture.runCLI(["--app", "todos@1", "state"])
        #expect(outdated.status == 1)
        #expect(outdated.err == ["replica-cli: the hub's history runs todos@2, a newer version than this replica's todos@1: run replica-cli --app todos@2 state"], "\(outdated.err)")

        // The record reads across: a line of its own in history, and state --at on either side.
        _ = try await fixture.runCLI(["dispatch", #"{"type":"setDue","id":"a","due":1000}"#])
        let history = try await fixture.runCLI(["history", "--from", "1"])
        #expect(history.out.count == 3, "\(history.out)")
        let record = try JSON(parsing: Array((history.out.dropFirst().first ?? "").utf8))
        #expect(record["type"] == "upgrade" && record["seq"] == 2 && record["from"] == "todos@1" && record["to"] == "todos@2")
        let before = try await fixture.runCLI(["state", "--at", "1", "--pointer", "/todos/0/title"])
        #expect(before.out == [#""milk""#], "\(before.err)")
        let after = try await fixture.runCLI(["state", "--at", "3", "--pointer", "/todos/0/due"])
        #expect(after.out == ["1000"], "\(after.err)")
        let diff = try await fixture.runCLI(["history", "--from", "2", "--diff"])
        #expect(diff.out.count == 2 && diff.out.first?.contains(#""type":"upgrade""#) == true, "\(diff.out) \(diff.err)")
    }
}
