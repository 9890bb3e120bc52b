#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import BuiltinApps
@testable import StoreHub
import SyncCore
import SyncPOSIX
import Testing

/// A todos@2 whose migration always throws: what a refused upgrade must leave untouched.
private struct ThrowingTodos: SyncApp, UpgradingApp {
    typealias State = TodosApp.State
    typealias Action = TodosApp.Action
    static let name = "todos"
    static let version = "3"
    var previous: TodosV1App { TodosV1App() }
    var initialState: State { TodosApp().initialState }
    func migrate(_ old: TodosV1App.State) throws(MigrationError) -> State {
        throw MigrationError("two todos share the id t1")
    }
    func reduce(into state: inout State, action: Action) throws(TodosApp.Failure) {
        try TodosApp().reduce(into: &state, action: action)
    }
    func decodeAction(_ json: JSON) throws(AppCodingError) -> Action { try TodosApp().decodeAction(json) }
    func encodeAction(_ action: Action) -> JSON { TodosApp().encodeAction(action) }
    func encodeState(_ state: State) -> JSON { TodosApp().encodeState(state) }
    func decodeState(_ json: JSON) throws(AppCodingError) -> State { try TodosApp().decodeState(json) }
}

/// Upgrades: the history moves from todos@1 to todos@2 at a seq of its own, with the guarantees
/// an action has (ordered, durable, checked by digest), driven with bytes (``EmbeddedHub``)
/// and over a real data directory.
@Suite("Upgrades: the history moves to the next version of its app", .serialized)
struct UpgradeTests {
    private func hello(_ fingerprint: String?, name: String = "") -> String {
        var members = [#""type":"hello""#, #""protocol":\#(syncProtocolVersion)"#, #""app":"todos""#]
        if let fingerprint { members.append(#""fingerprint":"\#(fingerprint)""#) }
        if !name.isEmpty { members.append(#""name":"\#(name)""#) }
        return "{" + members.joined(separator: ",") + "}"
    }

    private func add(_ id: Int, _ todo: String) -> String {
        #"{"type":"dispatch","id":\#(id),"action":{"type":"add","id":"\#(todo)","title":"Buy \#(todo)","createdAt":1700000000000}}"#
    }

    private func upgradeRequest(_ id: String, to: String? = "todos@2", dryRun: Bool = false) -> String {
        let target = to.map { #","to":"\#($0)""# } ?? ""
        return #"{"type":"upgrade","id":"\#(id)"\#(target),"dry_run":\#(dryRun)}"#
    }

    /// A hub whose history runs todos@1 and which carries todos@2.
    private func todosHub(configure: (inout HubConfiguration) -> Void = { _ in }) throws -> EmbeddedHub {
        try EmbeddedHub(app: TodosV1App(), carries: TodosApp().versions, configure: configure)
    }

    @Test("an upgrade: old replicas hear upgraded in order and leave, a waiting todos@2 replica is welcomed with the migrated state")
    func upgradeEndToEnd() throws {
        let hub = try todosHub()
        let alice = try #require(hub.connect())
        hub.send([hello("todos@1", name: "alice"), add(1, "milk")], from: alice)
        hub.settle()
        #expect(hub.types(to: alice) == ["welcome", "action"])
        // A todos@2 replica before the upgrade is held, told what it waits for.
        let carol = try #require(hub.connect())
        hub.send(hello("todos@2", name: "carol"), from: carol)
        hub.settle()
        guard case .waiting(let waiting)? = hub.messages(to: carol).first else {
            Issue.record("expected waiting")
            return
        }
        #expect(waiting.fingerprint == "todos@2" && waiting.seq == 1)
        #expect(hub.isOpen(carol))
        // One that gives up while held is let go at once.
        let quitter = try #require(hub.connect())
        hub.send(hello("todos@2", name: "quitter"), from: quitter)
        hub.settle()
        #expect(hub.types(to: quitter) == ["waiting"])
        hub.endInput(of: quitter)
        hub.settle()
        #expect(!hub.isOpen(quitter))
        // At its limit of held hellos, the hub refuses the next one app-ahead.
        hub.setMaxHeldHellos(1)
        let crowd = try #require(hub.connect())
        hub.send(hello("todos@2", name: "crowd"), from: crowd)
        hub.settle()
        guard case .error(let ahead)? = hub.messages(to: crowd).first else { Issue.record("expected app-ahead"); return }
        #expect(ahead.code == .appAhead && !hub.isOpen(crowd))
        // The status says the newest version the hub could move to.
        let admin = try #require(hub.connect())
        hub.send(#"{"type":"status"}"#, from: admin)
        hub.settle()
        guard case .status(let before)? = hub.messages(to: admin).first else { Issue.record("expected status"); return }
        #expect(before.fingerprint == "todos@1" && before.upgradableTo == "todos@2")
        // The upgrade, asked by a client that is not attached.
        hub.send(upgradeRequest("u1"), from: admin)
        hub.settle()
        guard case .upgrade(let report)? = hub.messages(to: admin).first else { Issue.record("expected an upgrade report"); return }
        #expect(report.changed && !report.dryRun && report.seq == 2 && report.from == "todos@1" && report.to == "todos@2")
        #expect(report.detaches.map(\.name) == ["alice"] && report.detaches.first?.fingerprint == "todos@1")
        // Alice: the upgrade in order after her action, then the end of her connection.
        let aliceSaw = hub.messages(to: alice)
        guard case .upgraded(let notice)? = aliceSaw.first else { Issue.record("expected upgraded, got \(aliceSaw.map(\.typeName))"); return }
        #expect(notice == UpgradeNotice(seq: 2, from: "todos@1", to: "todos@2", digest: report.digest))
        #expect(!hub.isOpen(alice))
        // Carol: welcomed at the upgrade's seq with the migrated state, of todos@2.
        guard case .welcome(let welcome)? = hub.messages(to: carol).first else { Issue.record("expected a welcome"); return }
        #expect(welcome.seq == 2 && welcome.fingerprint == "todos@2" && welcome.digest == report.digest)
        #expect(welcome.state?["todos"]?.arrayValue?.first?["title"] == "Buy milk")
        // The new version's action is sequenced after it.
        hub.send(#"{"type":"dispatch","id":1,"action":{"type":"setDue","id":"milk","due":1767225600000}}"#, from: carol)
        hub.settle()
        guard case .action(let seq, _, _, _, _)? = hub.messages(to: carol).first else { Issue.record("expected an action"); return }
        #expect(seq == 3)
        // An old replica is now outdated; a new hello of todos@2 attaches at once.
        let late = try #require(hub.connect())
        hub.send(hello("todos@1"), from: late)
        hub.settle()
        guard case .error(let outdated)? = hub.messages(to: late).first else { Issue.record("expected an error"); return }
        #expect(outdated.code == .appOutdated && outdated.message.contains("todos@2"))
        hub.send(#"{"type":"status"}"#, from: admin)
        hub.settle()
        guard case .status(let after)? = hub.messages(to: admin).first else { Issue.record("expected status"); return }
        #expect(after.fingerprint == "todos@2" && after.upgradableTo == nil && after.seq == 3)
        // Asking again changes nothing: retries and concurrent requests are safe.
        hub.send(upgradeRequest("u2"), from: admin)
        hub.settle()
        guard case .upgrade(let again)? = hub.messages(to: admin).first else { Issue.record("expected a report"); return }
        #expect(!again.changed && again.seq == 3 && hub.core.seq == 3)
    }

    @Test("a replica that reads nothing for a while after the upgrade still gets upgraded; one that never reads is closed after --welcome-timeout")
    func busyReplicaHearsUpgrade() throws {
        let hub = try todosHub { $0.welcomeTimeout = .seconds(30) }
        let busy = try #require(hub.connect())
        let gone = try #require(hub.connect())
        hub.send([hello("todos@1", name: "busy")], from: busy)
        hub.send([hello("todos@1", name: "gone")], from: gone)
        hub.settle()
        #expect(hub.types(to: busy) == ["welcome"] && hub.types(to: gone) == ["welcome"])
        hub.readLimit[busy] = 0
        hub.readLimit[gone] = 0
        hub.send(add(1, "milk"), from: busy)
        hub.settle()
        #expect(hub.core.seq == 1)
        let admin = try #require(hub.connect())
        hub.send(upgradeRequest("u1"), from: admin)
        hub.settle()
        guard case .upgrade(let report)? = hub.messages(to: admin).last, report.changed else { Issue.record("expected an upgrade"); return }
        // Far past the 2 s an ended connection gets, both are still owed their stream.
        hub.advance(by: .seconds(20))
        hub.pass()
        #expect(hub.isOpen(busy) && hub.isOpen(gone))
        hub.readLimit[busy] = nil
        hub.settle()
        #expect(hub.types(to: busy) == ["action", "upgraded"] && !hub.isOpen(busy))
        // The one that never reads is not held for ever.
        hub.advance(by: .seconds(11))
        hub.pass()
        #expect(!hub.isOpen(gone))
    }

    @Test("an outdated replica resuming its session learns the fate of each dispatch in doubt before it is refused")
    func inDoubtAcrossUpgrade() throws {
        let hub = try todosHub()
        let alice = try #require(hub.connect())
        hub.send([#"{"type":"hello","protocol":1,"app":"todos","fingerprint":"todos@1","session":"alice-1"}"#, add(1, "milk")], from: alice)
        hub.settle()
        #expect(hub.types(to: alice) == ["welcome", "action"])
        let admin = try #require(hub.connect())
        hub.send(upgradeRequest("u"), from: admin)
        hub.settle()
        // Alice reconnects, in doubt about dispatch 1 (sequenced) and 2 (which never reached the hub).
        let again = try #require(hub.connect())
        hub.send(#"{"type":"hello","protocol":1,"app":"todos","fingerprint":"todos@1","session":"alice-1","resume":{"history":"\#(hub.core.facts.history)","seq":1},"in_doubt":[1,2]}"#, from: again)
        hub.settle()
        let answers = hub.messages(to: again)
        #expect(answers.count == 3)
        guard answers.count == 3, case .duplicate(let first, let seq) = answers[0], case .reject(let second, let refusal) = answers[1],
              case .error(let error) = answers[2] else {
            Issue.record("expected duplicate, reject, error; got \(answers.map(\.typeName))")
            return
        }
        #expect(first == .number(1) && seq == 1)
        #expect(second == .number(2) && refusal.code == .appOutdated && refusal.message.contains("never applied"))
        #expect(error.code == .appOutdated && !hub.isOpen(again))
        #expect(hub.core.seq == 2)
    }

    @Test("a hello behind the upgrade in the same read is never welcomed with the other version's state")
    func helloDuringPause() throws {
        let hub = try todosHub()
        let old = try #require(hub.connect())
        hub.send([upgradeRequest("u"), hello("todos@1")], from: old)
        hub.settle()
        let seen = hub.messages(to: old)
        #expect(seen.map(\.typeName) == ["upgrade", "error"])
        guard case .error(let error)? = seen.last else { return }
        #expect(error.code == .appOutdated)
        let generic = try #require(hub.connect())
        hub.send([#"{"type":"upgrade","id":"v","to":"todos@2"}"#, hello(nil)], from: generic)
        hub.settle()
        // The history already runs todos@2: the generic client is welcomed with it at once.
        guard case .welcome(let welcome)? = hub.messages(to: generic).last else { Issue.record("expected a welcome"); return }
        #expect(welcome.fingerprint == "todos@2")
    }

    @Test("a dispatch behind the upgrade in the same read is never applied under the new reducer")
    func dispatchDuringPause() throws {
        let hub = try todosHub()
        let alice = try #require(hub.connect())
        hub.send(hello("todos@1"), from: alice)
        hub.settle()
        _ = hub.messages(to: alice)
        hub.send([add(1, "milk"), upgradeRequest("u"), add(2, "eggs")], from: alice)
        hub.settle()
        let types = hub.types(to: alice)
        #expect(types.first == "action" && types.contains("upgraded") && types.contains("upgrade"))
        #expect(hub.core.seq == 2)
        #expect(!hub.isOpen(alice))
    }

    @Test("refusals change nothing and say why: no path, backwards, too large, a throwing migration, another user")
    func refusals() throws {
        let hub = try todosHub { $0.allowedUIDs = [4_321] }
        let admin = try #require(hub.connect())
        func refusal(_ request: String, from fd: Int32) -> WireError? {
            hub.send(request, from: fd)
            hub.settle()
            guard case .reject(_, let error)? = hub.messages(to: fd).first else { return nil }
            return error
        }
        let noPath = refusal(upgradeRequest("a", to: "todos@9"), from: admin)
        #expect(noPath?.code == .upgradeRefused && noPath?.message.contains("no path") == true)
        hub.core.sequencer.maxUpgradeStateBytes = 8
        let tooLarge = refusal(upgradeRequest("b"), from: admin)
        #expect(tooLarge?.code == .upgradeRefused && tooLarge?.message.contains("welcome frame") == true)
        hub.core.sequencer.maxUpgradeStateBytes = 1 << 20
        let stranger = try #require(hub.connect(uid: 4_321))
        let forbidden = refusal(upgradeRequest("c"), from: stranger)
        #expect(forbidden?.code == .notPermitted)
        // A dry run migrates and reports, and changes nothing.
        hub.send(upgradeRequest("d", dryRun: true), from: admin)
        hub.settle()
        guard case .upgrade(let dry)? = hub.messages(to: admin).first else { Issue.record("expected a report"); return }
        #expect(dry.dryRun && !dry.changed && dry.to == "todos@2")
        #expect(hub.core.seq == 0 && hub.core.facts.fingerprint == "todos@1")
        // The upgrade, then one backwards.
        hub.send(upgradeRequest("e"), from: admin)
        hub.settle()
        _ = hub.messages(to: admin)
        let backwards = refusal(upgradeRequest("f", to: "todos@1"), from: admin)
        #expect(backwards?.code == .upgradeRefused && backwards?.message.contains("only goes forward") == true)

        let throwing = try EmbeddedHub(app: TodosV1App(), carries: ThrowingTodos().versions)
        let asker = try #require(throwing.connect())
        throwing.send(upgradeRequest("g", to: "todos@3"), from: asker)
        throwing.settle()
        guard case .reject(_, let threw)? = throwing.messages(to: asker).first else { Issue.record("expected a reject"); return }
        #expect(threw.code == .upgradeRefused && threw.message.contains("two todos share the id t1"))
        #expect(throwing.core.seq == 0 && throwing.core.facts.fingerprint == "todos@1")
    }

    // MARK: - Over a data directory

    private func withDirectory(_ body: (String) throws -> Void) throws {
        let fixture = try Fixture()
        defer { fixture.shutdown() }
        try body(fixture.directory + "/data")
    }

    private func sequencer(_ directory: String, app: some SyncApp, carries: AppVersionChain?) throws -> Sequencer {
        let engine = HubEngine(app: app)
        let versions = HubVersions(chain: carries ?? engine.chain, primary: engine, checkDeterminism: false)
        // The directory's lock (flock) was released by the previous sequencer's close, but a
        // child process another test forks at that instant holds a copy of the descriptor until
        // its exec closes it: a reopen right after a close may find it held for that moment.
        let deadline = ContinuousClock.now + .seconds(5)
        var attempt: Result<Sequencer, StorageError>
        repeat {
            attempt = Result { () throws(StorageError) -> Sequencer in
                try Sequencer(engine: engine, versions: versions,
                              log: FileLog(directory: directory, fingerprint: engine.fingerprint,
                                           accepts: versions.fingerprints, mode: .always),
                              snapshotEvery: 1_000_000, backlogActions: 100, backlogBytes: 1 << 20, checkpointEvery: 0,
                              dedupWindow: 100, logger: .discarding)
            }
        } while Self.heldForAMoment(attempt) && ContinuousClock.now < deadline
        return try attempt.get()
    }

    /// Whether opening failed only because the directory's lock was held.
    private static func heldForAMoment(_ attempt: Result<Sequencer, StorageError>) -> Bool {
        guard case .failure(let error) = attempt else { return false }
        return error.message.hasPrefix("another hub is using")
    }

    private func addTodo(_ sequencer: Sequencer, _ id: Int) {
        let action: JSON = ["type": "add", "id": .string("t\(id)"), "title": .string("todo \(id)"), "createdAt": 1_700_000_000_000]
        _ = sequencer.dispatch(action, id: .number(id), origin: 1, session: nil)
        _ = sequencer.pump(now: .now)
    }

    @Test("the journal keeps the upgrade as its own record; storesync.json changes only with it; a restart goes on under todos@2")
    func durableUpgrade() throws {
        try withDirectory { directory in
            let first = try sequencer(directory, app: TodosV1App(), carries: TodosApp().versions)
            for id in 1...3 { addTodo(first, id) }
            guard case .report(let report, true) = first.upgrade(to: nil, dryRun: false, id: .string("u"), origin: 0, originName: "",
                                                                 detaches: []) else {
                Issue.record("the upgrade was not proposed")
                return
            }
            let pumped = first.pump(now: .now)
            #expect(pumped.upgraded?.to == "todos@2" && first.appliedSeq == 4)
            addTodo(first, 5)
            let digest = first.appliedState().digest
            first.close()
            let meta = try JSON(parsing: FileSystem.read(directory + "/storesync.json"))
            #expect(meta["app"] == "todos@2" && meta["format"] == 3)
            #expect(meta["upgrades"]?.arrayValue?.first?["seq"] == 4 && meta["upgrades"]?.arrayValue?.first?["digest"] == .string(report.digest))
            let journal = try FileLog.listSegments(directory).map { try FileSystem.read(directory + "/" + $0.1) }.reduce([], +)
            #expect(journal.windowsContain(Array("SSJU".utf8)))
            // The snapshot written at the upgrade names its version.
            #expect(try FileLog.listSnapshots(directory).contains { path in
                (try? FileLog.readSnapshot(path.1).get())?.app == "todos@2"
            })
            // Restarted (newest first) it runs todos@2 at the same digest.
            let again = try sequencer(directory, app: TodosApp(), carries: nil)
            #expect(again.engine.fingerprint == "todos@2" && again.appliedSeq == 5 && again.appliedState().digest == digest)
            again.close()
            // A hub that carries only todos@1 refuses it, naming todos@2.
            #expect(throws: StorageError.self) { _ = try sequencer(directory, app: TodosV1App(), carries: nil) }
            do {
                _ = try sequencer(directory, app: TodosV1App(), carries: nil)
            } catch let error as StorageError {
                #expect(error.message.contains("todos@2"))
            }
        }
    }

    @Test("killed after the record and before storesync.json: the record counts, the file is completed; a migrated snapshot without its record is ignored")
    func crashBetweenRecordAndMeta() throws {
        try withDirectory { directory in
            let first = try sequencer(directory, app: TodosV1App(), carries: TodosApp().versions)
            for id in 1...2 { addTodo(first, id) }
            let oldMeta = try FileSystem.read(directory + "/storesync.json")
            _ = first.upgrade(to: nil, dryRun: false, id: .string("u"), origin: 0, originName: "", detaches: [])
            _ = first.pump(now: .now)
            let upgradedDigest = first.appliedState().digest
            first.close()
            // As if killed right after the record's fsync: the old file, and no snapshot after it.
            for (seq, path) in try FileLog.listSnapshots(directory) where seq >= 3 { FileSystem.remove(path) }
            try FileSystem.writeAtomically(directory + "/storesync.json", oldMeta)
            // An old-version binary (this build carrying todos@1 only) stops at the record.
            #expect(throws: StorageError.self) { _ = try sequencer(directory, app: TodosV1App(), carries: nil) }
            let again = try sequencer(directory, app: TodosApp(), carries: nil)
            #expect(again.engine.fingerprint == "todos@2" && again.appliedSeq == 3 && again.appliedState().digest == upgradedDigest)
            again.close()
            #expect(try JSON(parsing: FileSystem.read(directory + "/storesync.json"))["app"] == "todos@2")
        }
        try withDirectory { directory in
            // A snapshot of todos@2 at a seq whose upgrade never committed.
            let first = try sequencer(directory, app: TodosV1App(), carries: TodosApp().versions)
            for id in 1...2 { addTodo(first, id) }
            let digest = first.appliedState().digest
            first.close()
            let newest = try #require(try FileLog.listSnapshots(directory).first)
            let migrated = try TodosApp().versions.migrate(try FileLog.readSnapshot(newest.1).get().state, from: "todos@1", to: "todos@2")
            let forged = StoredSnapshot(seq: 2, digest: Digest.of(migrated), state: migrated, nextReplica: 2, app: "todos@2")
            try FileSystem.writeAtomically(directory + "/" + FileLog.snapshotName(2), FileLog.snapshotFile(forged))
            let again = try sequencer(directory, app: TodosApp(), carries: nil)
            #expect(again.engine.fingerprint == "todos@1" && again.appliedState().digest == digest)
            again.close()
        }
    }

    @Test("storesync.json not rewritten after the record (a full disk): nothing more is written until it is, then the hub goes on")
    func metaRewriteFails() throws {
        try withDirectory { directory in
            defer { StorageFaults.metaWriteFailure.withLock { $0 = nil } }
            let hub = try sequencer(directory, app: TodosV1App(), carries: TodosApp().versions)
            addTodo(hub, 1)
            StorageFaults.metaWriteFailure.withLock { $0 = ENOSPC }
            _ = hub.upgrade(to: nil, dryRun: false, id: .string("u"), origin: 0, originName: "", detaches: [])
            let pumped = hub.pump(now: .now)
            #expect(pumped.upgraded?.to == "todos@2" && hub.appliedSeq == 2, "the record is durable: the upgrade happened")
            #expect(try JSON(parsing: FileSystem.read(directory + "/storesync.json"))["app"] == "todos@1")
            // No snapshot of todos@2 was written beside a file that names todos@1.
            #expect(try FileLog.listSnapshots(directory).allSatisfy { (try? FileLog.readSnapshot($0.1).get())?.app != "todos@2" })
            // The next dispatch is refused, nothing applied.
            let action: JSON = ["type": "add", "id": "t9", "title": "x", "createdAt": 1]
            _ = hub.dispatch(action, id: .number(9), origin: 1, session: nil)
            _ = hub.pump(now: .now)
            #expect(hub.appliedSeq == 2 && hub.unavailableReason?.contains("storesync.json") == true)
            // Room again: the probe rewrites it, and dispatches go on.
            StorageFaults.metaWriteFailure.withLock { $0 = nil }
            _ = hub.pump(now: .now + .seconds(2))
            #expect(hub.unavailableReason == nil)
            #expect(try JSON(parsing: FileSystem.read(directory + "/storesync.json"))["app"] == "todos@2")
            addTodo(hub, 10)
            #expect(hub.appliedSeq == 3)
            hub.close()
        }
    }

    @Test("a reader that predates upgrade records finds no item it knows where the record is, with a complete commit after it: it refuses, never skips")
    func oldReaderStops() throws {
        var segment: [UInt8] = []
        let record = LogRecord(seq: 4, origin: 0, id: .string("u"), upgrade: LogUpgrade(from: "todos@1", to: "todos@2", digest: "0123456789abcdef"))
        JournalFormat.appendRecord(record, to: &segment)
        JournalFormat.appendCommit(seq: 4, groupStart: 0, to: &segment)
        #expect(Array(segment[0..<4]) == Array("SSJU".utf8))
        // The magics a format-2 reader knows are SSJR, SSJC and SSJH: at offset 0 it finds none,
        // and a complete commit follows, which it reports as corruption in the middle.
        segment.withUnsafeBytes { raw in
            #expect(JournalFormat.completeCommit(in: raw, after: 0) != nil)
            guard case .success(let (.record(decoded), _)) = JournalFormat.decode(raw, at: 0) else {
                Issue.record("this reader must read its own upgrade record")
                return
            }
            #expect(decoded == record)
        }
        // Its body has no "action": an old parser of records refuses it as one.
        #expect(record.json["action"] == nil && LogRecord(json: record.json) == record)
    }
}

private extension Array where Element == UInt8 {
    func windowsContain(_ needle: [UInt8]) -> Bool {
        guard count >= needle.count else { return false }
        return (0...(count - needle.count)).contains { Array(self[$0..<($0 + needle.count)]) == needle }
    }
}
