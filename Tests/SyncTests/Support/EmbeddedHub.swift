import BuiltinApps
@testable import StoreHub
import SyncCore
import SyncPOSIX

/// A ``HubCore`` driven by hand, as swift-nio's `EmbeddedChannel` drives a handler: clients
/// are numbers, bytes go in as `input` events, what each client is owed is "read" by copying
/// it out, and time moves only when the test says (``advance(by:)``). No socket, no thread,
/// no clock.
///
/// Each ``pass()`` is one pass of the reactor: `tick`, the inputs handed since the last pass
/// (already handled as they came), `pass`, the writes in the core's order, `written`.
final class EmbeddedHub {
    private(set) var core: HubCore
    /// The time the core sees.
    private(set) var now: ContinuousClock.Instant
    /// Bytes each client has been written and not yet read by the test.
    private var delivered: [Int32: FrameDecoder] = [:]
    /// At most this many bytes are written to a client per pass (`nil`: all; 0: a client
    /// that never reads).
    var readLimit: [Int32: Int] = [:]
    /// Descriptors the core closed, in order.
    private(set) var closed: [Int32] = []
    /// Descriptors the core refused, with the frame each got.
    private(set) var refused: [Int32: [UInt8]] = [:]
    /// The hub's user id (admitted).
    let hubUID: UInt32 = 1_000
    private var nextFD: Int32 = 10
    private var actions: [LoopAction] = []

    /// A hub over an in-memory log, running the JSON app.
    ///
    /// - Parameter configure: Changes to the default configuration.
    convenience init(configure: (inout HubConfiguration) -> Void = { _ in }) throws {
        try self.init(app: JSONApp(), configure: configure)
    }

    /// A hub over a log (in memory by default) running `app`, carrying the versions of
    /// `carries` (an upgrade moves its history along them).
    ///
    /// - Parameters:
    ///   - app: The app the history runs at the start.
    ///   - carries: A newer version's chain, or `nil` for `app`'s own.
    ///   - log: The log.
    ///   - configure: Changes to the default configuration.
    init<App: SyncApp>(app: App, carries: AppVersionChain? = nil, log: any HubLog = MemoryLog(),
                       configure: (inout HubConfiguration) -> Void = { _ in }) throws {
        var configuration = HubConfiguration(socketPath: "/embedded")
        configuration.maxClients = 64
        configure(&configuration)
        let engine = HubEngine(app: app)
        let versions = HubVersions(chain: carries ?? engine.chain, primary: engine, checkDeterminism: false)
        let sequencer = try Sequencer(engine: engine, versions: versions, log: log, snapshotEvery: 1_000,
                                      backlogActions: configuration.retainedActions, backlogBytes: configuration.backlogBytes,
                                      checkpointEvery: configuration.checkpointEvery, dedupWindow: configuration.dedupWindow,
                                      logger: configuration.logger)
        now = .now
        core = HubCore(sequencer: sequencer, configuration: configuration, hubID: "embedded", hubUID: hubUID, now: now)
    }

    /// Sets how many `hello`s the core holds for an upgrade at most.
    func setMaxHeldHellos(_ count: Int) { core.maxHeldHellos = count }

    /// Moves the clock.
    func advance(by duration: Duration) { now += duration }

    /// Connects a client; `nil` when the core refused it (``refused`` holds its frame).
    ///
    /// - Parameters:
    ///   - uid: The client's user id (the hub's by default).
    ///   - pid: Its process id.
    /// - Returns: Its descriptor.
    @discardableResult
    func connect(uid: UInt32? = nil, pid: Int32 = 4_242) -> Int32? {
        let fd = nextFD
        nextFD += 1
        let peer = PeerCredentials(uid: uid ?? hubUID, gid: uid ?? hubUID, pid: pid)
        handle(.accepted(fd: fd, peer: peer, groups: { nil }))
        return refused[fd] == nil ? fd : nil
    }

    /// Hands bytes from a client to the core (one read).
    func send(bytes: [UInt8], from fd: Int32) {
        guard let connection = core.connections[fd] else { return }
        bytes.withUnsafeBytes { handle(.input(connection, .bytes($0))) }
    }

    /// Hands one frame (its JSON text) from a client to the core.
    func send(_ text: String, from fd: Int32) {
        var frame: [UInt8] = []
        try? Frame.append(payload: Array(text.utf8), to: &frame)
        send(bytes: frame, from: fd)
    }

    /// Hands several frames in one read.
    func send(_ texts: [String], from fd: Int32) {
        var frames: [UInt8] = []
        for text in texts { try? Frame.append(payload: Array(text.utf8), to: &frames) }
        send(bytes: frames, from: fd)
    }

    /// The client ends its input (end of file).
    func endInput(of fd: Int32) {
        guard let connection = core.connections[fd] else { return }
        handle(.input(connection, .ended))
    }

    /// A `hello` for the JSON app.
    func hello(name: String = "", session: String? = nil, resume: String? = nil) -> String {
        var members = [#""type":"hello""#, #""protocol":\#(syncProtocolVersion)"#, #""app":"json""#]
        if !name.isEmpty { members.append(#""name":"\#(name)""#) }
        if let session { members.append(#""session":"\#(session)""#) }
        if let resume { members.append(#""resume":\#(resume)"#) }
        return "{" + members.joined(separator: ",") + "}"
    }

    /// One pass of the reactor.
    func pass() {
        handle(.tick)
        for connection in core.connections.values where core.hasFramesToHandle(connection) {
            handle(.input(connection, .nothing))
        }
        handle(.pass)
        for connection in core.writeList {
            let limit = readLimit[connection.fd] ?? Int.max
            var copied: [UInt8] = []
            let result = core.withOutput(of: connection, maxPieces: 64) { vectors -> UnixSocket.IOResult in
                for vector in vectors where copied.count < limit {
                    guard let base = vector.iov_base else { continue }
                    let take = min(vector.iov_len, limit - copied.count)
                    copied += UnsafeRawBufferPointer(start: base, count: take)
                }
                return copied.isEmpty ? .wouldBlock : .bytes(copied.count)
            }
            delivered[connection.fd, default: FrameDecoder(maxPayloadBytes: 1 << 30)].append(copied)
            if let left = readLimit[connection.fd], left != Int.max { readLimit[connection.fd] = left - copied.count }
            handle(.wrote(connection, result))
        }
        handle(.written)
    }

    /// Runs passes until nothing is left to write (at most `limit`).
    func settle(limit: Int = 16) {
        for _ in 0..<limit {
            pass()
            guard core.connections.values.contains(where: { core.owes($0) && readLimit[$0.fd] != 0 }) || core.mustNotWait else { return }
        }
    }

    /// Everything a client was written since the last call, decoded.
    func messages(to fd: Int32) -> [HubMessage] {
        var messages: [HubMessage] = []
        while let payload = try? delivered[fd]?.nextFrame() {
            guard let json = try? JSON(parsing: payload), let message = try? HubMessage(json: json) else { continue }
            messages.append(message)
        }
        return messages
    }

    /// The types of ``messages(to:)``.
    func types(to fd: Int32) -> [String] { messages(to: fd).map(\.typeName) }

    /// Whether a client's connection is open (not closed by the core).
    func isOpen(_ fd: Int32) -> Bool { core.connections[fd] != nil }

    /// The phase of a client's connection.
    func phase(of fd: Int32) -> ConnectionPhase? { core.connections[fd]?.phase }

    /// Stops the hub as the reactor does: `shutdown`, the writes, then `finish`.
    func shutDown() {
        handle(.shutdown)
        for connection in core.writeList {
            var copied: [UInt8] = []
            let result = core.withOutput(of: connection, maxPieces: 64) { vectors -> UnixSocket.IOResult in
                for vector in vectors { if let base = vector.iov_base { copied += UnsafeRawBufferPointer(start: base, count: vector.iov_len) } }
                return .bytes(copied.count)
            }
            delivered[connection.fd, default: FrameDecoder(maxPayloadBytes: 1 << 30)].append(copied)
            handle(.wrote(connection, result))
        }
        handle(.finish)
        handle(.closeLog)
    }

    private func handle(_ event: LoopEvent) {
        core.handle(event, now: now, into: &actions)
        for action in actions {
            switch action {
            case .close(let fd): closed.append(fd)
            case .refuse(let fd, let frame): refused[fd] = frame
            case .stop: break
            }
        }
    }
}
