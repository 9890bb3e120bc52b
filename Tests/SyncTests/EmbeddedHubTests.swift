@testable import StoreHub
import SyncCore
import SyncPOSIX
import Testing

/// The hub's decisions with bytes and a manual clock: ``HubCore`` driven by ``EmbeddedHub``,
/// no socket, no thread, no sleep. Timeouts are reached by moving the clock.
@Suite("HubCore: the hub's decisions, driven with bytes and a manual clock")
struct EmbeddedHubTests {
    /// Attaches a client and reads its welcome.
    private func attach(_ hub: EmbeddedHub, name: String = "", session: String? = nil) throws -> Int32 {
        let fd = try #require(hub.connect())
        hub.send(hub.hello(name: name, session: session), from: fd)
        hub.settle()
        let welcome = hub.messages(to: fd)
        guard case .welcome? = welcome.first else {
            Issue.record("expected a welcome, got \(welcome.map(\.typeName))")
            return fd
        }
        return fd
    }

    private func dispatch(_ id: Int, path: String = "/n", value: Int) -> String {
        #"{"type":"dispatch","id":\#(id),"action":{"type":"set","path":"\#(path)","value":\#(value)}}"#
    }

    @Test("a dispatch is sequenced, acknowledged to its dispatcher and broadcast to every replica, in order")
    func dispatchAndBroadcast() throws {
        let hub = try EmbeddedHub()
        let alice = try attach(hub, name: "alice")
        let bob = try attach(hub, name: "bob")
        hub.send([dispatch(1, value: 1), dispatch(2, value: 2)], from: alice)
        hub.settle()
        for fd in [alice, bob] {
            let seqs = hub.messages(to: fd).compactMap { message -> UInt64? in
                if case .action(let seq, _, _, _, _) = message { return seq }
                return nil
            }
            #expect(seqs == [1, 2])
        }
        #expect(hub.core.seq == 2)
    }

    @Test("status and sync are answered before hello; a dispatch before hello is refused not-attached and closes")
    func beforeHello() throws {
        let hub = try EmbeddedHub()
        let fd = try #require(hub.connect())
        hub.send([#"{"type":"status"}"#, #"{"type":"sync","id":"b"}"#], from: fd)
        hub.settle()
        #expect(hub.types(to: fd) == ["status", "synced"])
        hub.send(dispatch(1, value: 1), from: fd)
        hub.settle()
        let messages = hub.messages(to: fd)
        guard case .error(let error)? = messages.first else {
            Issue.record("expected an error, got \(messages.map(\.typeName))")
            return
        }
        #expect(error.code == .notAttached)
        #expect(!hub.isOpen(fd))
        #expect(hub.closed == [fd])
    }

    @Test("a replica's checked report is shown in its status entry; one from an unattached connection is not kept")
    func checkedReport() throws {
        let hub = try EmbeddedHub()
        let observer = try #require(hub.connect())
        hub.send(#"{"type":"status","checked":{"seq":0,"agreed":true}}"#, from: observer)
        let alice = try attach(hub, name: "alice")
        let bob = try attach(hub, name: "bob")
        hub.send([dispatch(1, value: 1), #"{"type":"status","checked":{"seq":1,"agreed":true,"divergences":2}}"#], from: alice)
        hub.settle()
        hub.send(#"{"type":"status"}"#, from: bob)
        hub.settle()
        guard case .status(let status)? = hub.messages(to: bob).last else {
            Issue.record("expected a status, got \(hub.types(to: bob))")
            return
        }
        #expect(status.replicas.map(\.name) == ["alice", "bob"])
        #expect(status.replicas.map(\.checked) == [DigestCheck(seq: 1, agreed: true, divergences: 2), nil])
        // A later report replaces the earlier one; a status without one leaves it as it is.
        hub.send([#"{"type":"status","checked":{"seq":1,"agreed":false}}"#, #"{"type":"status"}"#], from: alice)
        hub.settle()
        guard case .status(let later)? = hub.messages(to: alice).last else {
            Issue.record("expected a status, got \(hub.types(to: alice))")
            return
        }
        #expect(later.replicas.first?.checked == DigestCheck(seq: 1, agreed: false))
        // A malformed report is bad-frame and closes that connection alone.
        hub.send(#"{"type":"status","checked":{"seq":"one","agreed":true}}"#, from: bob)
        hub.settle()
        guard case .error(let error)? = hub.messages(to: bob).last else {
            Issue.record("expected an error, got \(hub.types(to: bob))")
            return
        }
        #expect(error.code == .badFrame && error.message.contains("\"checked\""))
        #expect(!hub.isOpen(bob) && hub.isOpen(alice))
    }

    @Test("after a refused frame (PROTOCOL.md §4), the frames behind it in the same read are discarded; other clients carry on",
          arguments: ["not json", #"{"type":"no-such-type"}"#, "[]"])
    func discardAfterRefusal(refused: String) throws {
        let hub = try EmbeddedHub()
        let alice = try attach(hub)
        let bob = try attach(hub)
        hub.send([dispatch(1, value: 1), refused, dispatch(2, value: 2)], from: alice)
        hub.settle()
        #expect(hub.types(to: alice) == ["action", "error"])
        #expect(!hub.isOpen(alice))
        #expect(hub.core.seq == 1)
        hub.send(dispatch(7, value: 7), from: bob)
        hub.settle()
        #expect(hub.types(to: bob) == ["action", "action"])
    }

    @Test("--idle-timeout: no hello, or half a frame, is closed with timeout once the clock passes it, not before")
    func idleTimeout() throws {
        let hub = try EmbeddedHub { $0.idleTimeout = .seconds(10) }
        let silent = try #require(hub.connect())
        let replica = try attach(hub)
        hub.send(bytes: [0, 0, 0, 40, UInt8(ascii: "{")], from: replica)
        hub.pass()
        hub.advance(by: .seconds(9))
        hub.pass()
        #expect(hub.isOpen(silent) && hub.isOpen(replica))
        #expect(hub.core.timersPending, "a greeting connection keeps the loop's timer running")
        hub.advance(by: .milliseconds(1_001))
        hub.settle()
        for fd in [silent, replica] {
            let messages = hub.messages(to: fd)
            guard case .error(let error)? = messages.last else {
                Issue.record("expected a timeout, got \(messages.map(\.typeName))")
                continue
            }
            #expect(error.code == .timeout)
            #expect(error.message.contains("--idle-timeout"))
            #expect(!hub.isOpen(fd))
        }
    }

    @Test("an attached replica that sends nothing is never idle")
    func listeningReplicaStays() throws {
        let hub = try EmbeddedHub { $0.idleTimeout = .seconds(1) }
        let replica = try attach(hub)
        hub.advance(by: .seconds(3_600))
        hub.settle()
        #expect(hub.isOpen(replica))
        #expect(hub.messages(to: replica).isEmpty)
    }

    @Test("--welcome-timeout: a joiner that never reads its welcome is failed slow-consumer at the deadline")
    func welcomeTimeout() throws {
        let hub = try EmbeddedHub { $0.welcomeTimeout = .seconds(60) }
        let fd = try #require(hub.connect())
        hub.readLimit[fd] = 0
        hub.send(hub.hello(), from: fd)
        hub.pass()
        hub.advance(by: .seconds(59))
        hub.pass()
        #expect(hub.phase(of: fd)?.isClosing == false)
        hub.advance(by: .seconds(2))
        hub.pass()
        guard case .closing? = hub.phase(of: fd) else {
            Issue.record("the joiner is torn down at the deadline: \(String(describing: hub.phase(of: fd)))")
            return
        }
        // It reads now: the welcome, then the error; and it closes.
        hub.readLimit[fd] = nil
        hub.settle()
        let messages = hub.messages(to: fd)
        #expect(messages.map(\.typeName) == ["welcome", "error"])
        if case .error(let error)? = messages.last { #expect(error.code == .slowConsumer && error.message.contains("--welcome-timeout")) }
        #expect(!hub.isOpen(fd))
    }

    @Test("a replica that lags past --max-queue-bytes falls out with slow-consumer; the others are not held back")
    func slowConsumer() throws {
        let hub = try EmbeddedHub { $0.maxQueuedBytesPerReplica = 4_096 }
        let reader = try attach(hub)
        let sleeper = try attach(hub)
        // It reads 300 bytes, then nothing: it stops half-way through a frame.
        hub.readLimit[sleeper] = 300
        for round in 0..<20 {
            hub.send((0..<10).map { dispatch(round * 10 + $0, path: "/k\($0)", value: round) }, from: reader)
            hub.pass()
        }
        hub.settle()
        #expect(hub.core.seq == 200)
        #expect(hub.messages(to: reader).count == 200)
        guard case .closing? = hub.phase(of: sleeper) else {
            Issue.record("the sleeper fell out: \(String(describing: hub.phase(of: sleeper)))")
            return
        }
        hub.readLimit[sleeper] = nil
        hub.settle()
        let messages = hub.messages(to: sleeper)
        if case .error(let error)? = messages.last {
            #expect(error.code == .slowConsumer && error.message.contains("--max-queue-bytes"))
        } else {
            Issue.record("the sleeper ends with slow-consumer: \(messages.map(\.typeName).suffix(3))")
        }
        // Whole frames only: every frame decoded, and the actions it got are a prefix.
        let seqs = messages.compactMap { message -> UInt64? in
            if case .action(let seq, _, _, _, _) = message { return seq }
            return nil
        }
        #expect(!seqs.isEmpty)
        #expect(seqs == (0..<seqs.count).map { UInt64($0 + 1) })
        #expect(!hub.isOpen(sleeper))
    }

    @Test("one session, two connections: the one accepted later keeps it, whichever hello is handled first (PROTOCOL.md §12)")
    func sessionByAcceptOrder() throws {
        let hub = try EmbeddedHub()
        // A client's first connection, whose hello it gave up on, then its reconnection,
        // accepted in this order.
        let older = try #require(hub.connect())
        let newer = try #require(hub.connect())
        hub.send(hub.hello(session: "s1"), from: newer)
        hub.settle()
        let welcome = hub.messages(to: newer)
        guard case .welcome(let attached)? = welcome.first else {
            Issue.record("\(welcome)")
            return
        }
        // The abandoned hello is handled only now, after the newer connection attached.
        hub.send(hub.hello(session: "s1"), from: older)
        hub.settle()
        let messages = hub.messages(to: older)
        if case .error(let error)? = messages.first { #expect(error.code == .superseded) } else { Issue.record("\(messages)") }
        #expect(!hub.isOpen(older) && hub.isOpen(newer))
        // The newer connection was told nothing: its next messages answer its own requests,
        // and it still dispatches on the session; it alone is attached.
        hub.send([#"{"type":"sync","id":"after"}"#, dispatch(1, path: "/a", value: 1), #"{"type":"status"}"#], from: newer)
        hub.settle()
        let answers = hub.messages(to: newer)
        #expect(answers.map(\.typeName) == ["synced", "action", "status"])
        if case .action(_, let origin, _, _, _)? = answers.dropFirst().first { #expect(origin == attached.replica) }
        if case .status(let status)? = answers.last { #expect(status.replicas.map(\.replica) == [attached.replica]) }
        // A third, newer still, takes the session over from the one holding it, with its ids.
        let newest = try #require(hub.connect())
        hub.send(hub.hello(session: "s1"), from: newest)
        hub.settle()
        #expect(hub.types(to: newest) == ["welcome"])
        if case .error(let error)? = hub.messages(to: newer).first { #expect(error.code == .superseded) }
        #expect(!hub.isOpen(newer))
        hub.send(dispatch(1, path: "/a", value: 2), from: newest)
        hub.settle()
        #expect(hub.messages(to: newest) == [.duplicate(id: .number(1), seq: 1)])
    }

    @Test("the access policy and --max-clients refuse at accept, with the reason, before anything is kept")
    func refusals() throws {
        let hub = try EmbeddedHub { $0.maxClients = 2 }
        #expect(hub.connect(uid: 4_321) == nil)
        #expect(hub.connect(uid: 0) != nil, "root is admitted")
        #expect(hub.connect() != nil)
        #expect(hub.connect() == nil)
        #expect(hub.core.connections.count == 2)
        let codes = hub.refused.sorted { $0.key < $1.key }.compactMap { _, frame -> String? in
            var decoder = FrameDecoder()
            decoder.append(frame)
            guard let payload = try? decoder.nextFrame(), let json = try? JSON(parsing: payload),
                  case .error(let error)? = try? HubMessage(json: json) else { return nil }
            return error.rawCode
        }
        #expect(codes == ["forbidden", "too-many-clients"])
    }

    @Test("end of input: every answer and the client's own actions are written, then the connection closes")
    func endOfInput() throws {
        let hub = try EmbeddedHub()
        let fd = try #require(hub.connect())
        hub.send([hub.hello(), dispatch(1, value: 1), #"{"type":"sync","id":9}"#], from: fd)
        hub.endInput(of: fd)
        hub.settle()
        #expect(hub.types(to: fd) == ["welcome", "action", "synced"])
        #expect(!hub.isOpen(fd))
    }

    @Test("a read that fails closes the connection at once (no error frame), and frees its session for the next hello")
    func lostConnection() throws {
        let hub = try EmbeddedHub()
        let first = try attach(hub, session: "s")
        let connection = try #require(hub.core.connections[first])
        var actions: [LoopAction] = []
        var core = hub.core
        core.handle(.input(connection, .failed), now: hub.now, into: &actions)
        #expect(actions == [.close(fd: first)])
        #expect(core.connections[first] == nil)
        // A later connection with the session attaches, and nobody is told superseded.
        #expect(core.connections.isEmpty)
        let second: Int32 = 99
        core.handle(.accepted(fd: second, peer: PeerCredentials(uid: hub.hubUID, gid: 0, pid: 1), groups: { nil }), now: hub.now, into: &actions)
        #expect(actions.isEmpty)
        var frame: [UInt8] = []
        try Frame.append(payload: Array(hub.hello(session: "s").utf8), to: &frame)
        let secondConnection = try #require(core.connections[second])
        frame.withUnsafeBytes { core.handle(.input(secondConnection, .bytes($0)), now: hub.now, into: &actions) }
        core.handle(.pass, now: hub.now, into: &actions)
        #expect(actions.isEmpty)
        #expect(secondConnection.phase == .attached(Attachment(replica: 2, name: "", session: "s")))
    }

    @Test("shutdown: every client is told shutting-down after what is applied, then every descriptor is closed")
    func shutdown() throws {
        let hub = try EmbeddedHub()
        let alice = try attach(hub)
        let greeting = try #require(hub.connect())
        hub.send(dispatch(1, value: 1), from: alice)
        hub.shutDown()
        #expect(hub.types(to: alice) == ["action", "error"])
        #expect(hub.types(to: greeting) == ["error"])
        #expect(Set(hub.closed) == [alice, greeting])
        #expect(hub.core.connections.isEmpty)
    }

    @Test("a connection's phase is one enum: greeting, attached, ending, closing")
    func phases() throws {
        let hub = try EmbeddedHub()
        let fd = try #require(hub.connect())
        #expect(hub.phase(of: fd) == .greeting)
        hub.send(hub.hello(name: "p", session: "s"), from: fd)
        #expect(hub.phase(of: fd) == .attached(Attachment(replica: 1, name: "p", session: "s")))
        hub.send("[]", from: fd)
        #expect(hub.phase(of: fd) == .ending(Attachment(replica: 1, name: "p", session: "s")))
        // Its socket takes nothing for now: it stays closing, with its error queued.
        hub.readLimit[fd] = 0
        hub.pass()
        guard case .closing(let attachment, _)? = hub.phase(of: fd) else {
            Issue.record("closing after its answers: \(String(describing: hub.phase(of: fd)))")
            return
        }
        #expect(attachment?.replica == 1)
        hub.readLimit[fd] = nil
        hub.settle()
        #expect(hub.phase(of: fd) == nil)
    }
}
