#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import SyncCore
import SyncPOSIX
import Synchronization

/// The hub's event loop: owns the listening socket and every connection's descriptor, waits
/// for readiness, reads frames, hands each to the protocol (``HubProtocol``), applies the
/// effects, and writes. The order of actions lives in the ``Sequencer``.
///
/// Single-threaded by design: `serve` runs on one thread and nothing else touches this object.
/// Not generic: the app is reached through the sequencer's engine, specialised for it.
final class HubLoop {
    let configuration: HubConfiguration
    let hubID: String
    let sequencer: Sequencer
    private let hubProtocol: HubProtocol
    /// Whether shutdown removed the socket file (it does not when the path now names another file).
    private(set) var socketRemoved = false

    private var connections: [Int32: Connection] = [:]
    /// The connection attached with each session (a newer `hello` with it supersedes).
    private var sessionOwners: [JSONKey: Connection] = [:]
    /// Attached replicas in attach order: the broadcast list.
    private var attached: [Connection] = []
    private let readBuffer: UnsafeMutableRawBufferPointer

    init(sequencer: Sequencer, configuration: HubConfiguration, hubID: String) {
        self.sequencer = sequencer
        self.configuration = configuration
        self.hubID = hubID
        self.hubProtocol = HubProtocol(sequencer: sequencer, maxFrameBytes: configuration.maxFrameBytes, hubID: hubID)
        self.readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 << 10, alignment: 16)
    }

    deinit { readBuffer.deallocate() }

    /// The seq of the last sequenced action.
    var seq: UInt64 { sequencer.seq }

    // MARK: - Event loop

    /// Runs the loop until a stop is requested, then shuts down.
    ///
    /// - Throws: ``SystemError`` when `poll` itself fails; every connection is closed and the
    ///   socket released first, so nothing leaks.
    func serve(listener: ListeningSocket, wake: Int32, stopFD: Int32?,
               stopRequested: borrowing Atomic<Bool>) throws(SystemError) {
        var failure: SystemError?
        var idle: [Connection] = []
        var pollSet: [pollfd] = []
        var order: [Connection] = []
        while !stopRequested.load(ordering: .relaxed) {
            pollSet.removeAll(keepingCapacity: true)
            order.removeAll(keepingCapacity: true)
            if let until = acceptPausedUntil, ContinuousClock.now >= until {
                acceptPausedUntil = nil
            }
            // While accepting is paused (out of descriptors), poll ignores the listener (fd -1).
            pollSet.append(pollfd(fd: acceptPausedUntil == nil ? listener.fd : -1, events: Int16(POLLIN), revents: 0))
            pollSet.append(pollfd(fd: wake, events: Int16(POLLIN), revents: 0))
            pollSet.append(pollfd(fd: stopFD ?? -1, events: Int16(POLLIN), revents: 0))
            var closingSoon = false
            var framesWaiting = false
            var watchingIdle = false
            let now = ContinuousClock.now
            for connection in connections.values {
                var events: Int16 = 0
                if connection.state.isClosing {
                    closingSoon = true
                } else {
                    if !connection.inputEnded { events |= Int16(POLLIN) }
                    if connection.moreFrames { framesWaiting = true }
                    // Not attached yet, or half a frame buffered: it must make progress in time.
                    if case .greeting = connection.state {
                        watchingIdle = true
                        if now - connection.lastFrameAt > configuration.idleTimeout { idle.append(connection) }
                    } else if let since = connection.partialSince {
                        watchingIdle = true
                        if now - since > configuration.idleTimeout { idle.append(connection) }
                    }
                }
                if owed(connection) > 0 { events |= Int16(POLLOUT) }
                pollSet.append(pollfd(fd: connection.fd, events: events, revents: 0))
                order.append(connection)
            }
            for connection in idle {
                fail(connection, WireError(.timeout, "no complete hello, status or sync (or half a frame held) for \(configuration.idleTimeout) (--idle-timeout); connect again and send a whole frame"))
                // `fail` queued the error; this pass's poll includes the connection as closing.
            }
            idle.removeAll(keepingCapacity: true)
            let timers = closingSoon || watchingIdle || acceptPausedUntil != nil || sequencer.unavailableReason != nil
            let timeout: Int32 = framesWaiting ? 0 : (timers ? 100 : -1)
            let ready = poll(&pollSet, nfds_t(pollSet.count), timeout)
            if ready < 0 {
                if currentErrno() == EINTR { continue }
                failure = SystemError.lastCall("poll")
                break
            }
            if pollSet[1].revents != 0 { drainPipe(wake) }
            if pollSet[2].revents != 0 { break }
            if pollSet[0].revents != 0 { acceptAll(listener.fd) }
            for (index, connection) in order.enumerated() {
                guard connections[connection.fd] === connection, !connection.state.isClosing else { continue }
                let revents = pollSet[index + 3].revents
                if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0, !connection.inputEnded {
                    guard readFrom(connection) else { continue }
                } else if !connection.moreFrames {
                    continue
                }
                handleFrames(connection)
            }
            _ = sequencer.retryIfUnavailable()
            flushBatch()
            writeAll()
            reapClosing()
        }
        shutdown(listener: listener)
        if let failure { throw failure }
    }

    private func drainPipe(_ fd: Int32) {
        var scratch = [UInt8](repeating: 0, count: 64)
        while scratch.withUnsafeMutableBytes({ read(fd, $0.baseAddress, $0.count) }) > 0 {}
    }

    /// Set while new connections are not accepted because accepting failed (e.g. the process
    /// is out of file descriptors): the listener stays readable, so polling it would spin.
    private var acceptPausedUntil: ContinuousClock.Instant?
    /// Whether the last accept failed (so the failure is logged once, not every 100 ms).
    private var acceptFailing = false

    private func acceptAll(_ listener: Int32) {
        while true {
            do {
                guard let fd = try UnixSocket.accept(listener) else { return }
                if acceptFailing {
                    acceptFailing = false
                    configuration.log("hubd: accepting connections again")
                }
                connections[fd] = Connection(fd: fd, maxFrameBytes: configuration.maxFrameBytes)
            } catch {
                // Connected clients carry on; new ones wait in the listen backlog meanwhile,
                // and accepting is retried every 100 ms.
                if !acceptFailing {
                    acceptFailing = true
                    configuration.log("hubd: cannot accept new connections: \(error.message); waiting clients stay queued and accepting is retried every 100 ms (raise the open-files limit, ulimit -n, if this persists)")
                }
                acceptPausedUntil = .now + .milliseconds(100)
                return
            }
        }
    }

    /// The most frames handled for one connection per loop pass, so that a client
    /// pipelining many frames cannot keep the loop from everyone else.
    private static let framesPerPass = 256

    /// Reads what one connection has sent into its decoder.
    ///
    /// - Returns: Whether the connection is still open.
    private func readFrom(_ connection: Connection) -> Bool {
        switch UnixSocket.read(connection.fd, into: readBuffer) {
        case .bytes(let count):
            connection.decoder.append(UnsafeRawBufferPointer(rebasing: readBuffer[0..<count]))
            if connection.partialSince == nil { connection.partialSince = .now }
        case .wouldBlock:
            break
        case .endOfFile:
            // The client is done sending (closed, or half-closed with SHUT_WR). Frames already
            // buffered are still handled; then it gets what is queued for it, and a close.
            connection.inputEnded = true
        case .failed:
            drop(connection, reason: "disconnected")
            return false
        }
        return true
    }

    /// Handles up to `framesPerPass` complete frames buffered for one connection.
    private func handleFrames(_ connection: Connection) {
        connection.moreFrames = false
        var budget = Self.framesPerPass
        // Progress for --idle-timeout: one clock read per batch of frames, not per frame.
        defer {
            if budget < Self.framesPerPass {
                connection.lastFrameAt = .now
                connection.partialSince = connection.decoder.bufferedByteCount > 0 ? connection.lastFrameAt : nil
            }
        }
        while !connection.state.isClosing, connections[connection.fd] === connection {
            guard budget > 0 else {
                connection.moreFrames = true
                return
            }
            budget -= 1
            let effect: HubEffect??
            do throws(FrameError) {
                // Zero-copy: the payload is parsed where it lies in the decoder's buffer.
                effect = try connection.decoder.decodeNext { payload in hubProtocol.handle(payload, from: connection) }
            } catch {
                switch error {
                case .emptyFrame:
                    fail(connection, WireError(.badFrame, "a frame's length must be at least 1; got 0"))
                case .tooLarge(let length, let limit):
                    fail(connection, WireError(.frameTooLarge, "frame of \(length) bytes exceeds this hub's limit of \(limit) bytes (--max-frame-bytes); split the action or raise the limit"))
                }
                return
            }
            guard let handled = effect else {
                // No complete frame: this attempt is not progress.
                budget += 1
                if connection.inputEnded { finishAfterFlush(connection) }
                return
            }
            if let handled { apply(handled, to: connection) }
        }
    }

    /// Carries out what the protocol decided for one message.
    private func apply(_ effect: HubEffect, to connection: Connection) {
        switch effect {
        case .reply(let message):
            send(message, to: connection)
        case .synced(let id):
            flushBatch()
            send(.synced(seq: sequencer.seq, id: id), to: connection)
        case .status:
            flushBatch()
            let replicas = attached.compactMap { peer in
                peer.state.replica.map {
                    ReplicaInfo(replica: $0, name: peer.state.name, queuedBytes: owed(peer),
                                lag: Int(clamping: sequencer.seq &- min(sequencer.seq, writtenSeq(of: peer))))
                }
            }
            send(.status(hubProtocol.statusMessage(replicas: replicas)), to: connection)
        case .fail(let error):
            fail(connection, error)
        case .attach(let replica, let name, let resumeFrom, let session):
            attach(connection, replica: replica, name: name, resumeFrom: resumeFrom, session: session)
        case .duplicate(let id, let action):
            // The original goes out first (a duplicate is never answered before the action
            // it repeats); if it could not be made durable, it is forgotten and this one is
            // judged afresh.
            flushBatch()
            if case .attached(_, _, let session?) = connection.state, let seq = sequencer.sequenced(session: session, id: id) {
                send(.duplicate(id: id, seq: seq), to: connection)
            } else if let effect = hubProtocol.dispatch(action, id: id, from: connection) {
                apply(effect, to: connection)
            }
        }
    }

    /// Attaches a connection: everything sequenced so far goes out before the snapshot, so
    /// the new replica's stream starts exactly after the welcome's seq (atomic hydration).
    private func attach(_ connection: Connection, replica: Int, name: String, resumeFrom: UInt64?, session: String?) {
        flushBatch()
        if let session {
            // One connection per session: a replica that reconnected before its old
            // connection was noticed as gone takes the session over.
            let key = JSONKey(session)
            if let previous = sessionOwners[key], previous !== connection, connections[previous.fd] === previous,
               !previous.state.isClosing {
                fail(previous, WireError(.superseded, "another connection attached with this session (\(session)); this one is closed"))
            }
            sessionOwners[key] = connection
        }
        connection.state = .attached(replica: replica, name: name, session: session)
        if let resumeFrom, let position = resumeFrom >= backlog.lastSeq ? backlog.end : backlog.position(after: resumeFrom) {
            let welcome = Welcome.resumed(hub: hubID, replica: replica, seq: resumeFrom, history: sequencer.history,
                                          maxFrameBytes: configuration.maxFrameBytes)
            // The welcome, then the missed frames straight from the backlog, then whatever follows.
            send(.welcome(welcome), to: connection, after: position)
            connection.cursor = position
            connection.follows = true
            attached.append(connection)
            configuration.log("hubd: \(connection.label) resumed at seq \(resumeFrom) (\(sequencer.seq - resumeFrom) actions replayed)")
            return
        }
        let snapshot = sequencer.currentSnapshot()
        do throws(FrameError) {
            var frame: [UInt8] = []
            try appendWelcome(replica: replica, snapshot: snapshot, to: &frame)
            connection.queue(frame, after: backlog.end)
        } catch {
            // A frame's length is 32 bits: a state this large cannot be sent in one welcome.
            fail(connection, WireError(.frameTooLarge, "the state is \(snapshot.stateBytes.count) bytes, more than one frame can carry (4 GiB); it cannot be sent to a new replica"))
            return
        }
        connection.cursor = backlog.end
        connection.follows = true
        attached.append(connection)
        configuration.log("hubd: \(connection.label) attached at seq \(sequencer.seq)")
    }

    /// Appends a `welcome` frame built around the cached canonical state bytes.
    private func appendWelcome(replica: Int, snapshot: Sequencer.Snapshot, to buffer: inout [UInt8]) throws(FrameError) {
        var payload: [UInt8] = []
        payload.reserveCapacity(snapshot.stateBytes.count + 200)
        payload.append(contentsOf: #"{"type":"welcome","protocol":"#.utf8)
        JSON(syncProtocolVersion).writeCanonical(into: &payload)
        payload.append(contentsOf: #","hub":"#.utf8)
        JSON.string(hubID).writeCanonical(into: &payload)
        payload.append(contentsOf: #","history":"#.utf8)
        JSON.string(sequencer.history).writeCanonical(into: &payload)
        payload.append(contentsOf: #","replica":"#.utf8)
        JSON(replica).writeCanonical(into: &payload)
        payload.append(contentsOf: #","seq":"#.utf8)
        JSON(snapshot.seq).writeCanonical(into: &payload)
        payload.append(contentsOf: #","resumed":false"#.utf8)
        payload.append(contentsOf: #","digest":"#.utf8)
        JSON.string(snapshot.digest).writeCanonical(into: &payload)
        payload.append(contentsOf: #","max_frame_bytes":"#.utf8)
        JSON(configuration.maxFrameBytes).writeCanonical(into: &payload)
        payload.append(contentsOf: #","state":"#.utf8)
        payload.append(contentsOf: snapshot.stateBytes)
        payload.append(UInt8(ascii: "}"))
        try Frame.append(payload: payload, to: &buffer)
    }

    // MARK: - Output

    /// The shared stream of sequenced frames.
    private var backlog: Backlog { sequencer.backlog }

    /// Bytes owed to a connection: backlog frames from its position plus its private messages.
    private func owed(_ connection: Connection) -> Int { connection.pendingBytes(end: backlog.end) }

    /// The seq of the last action written whole to a connection's socket.
    private func writtenSeq(of connection: Connection) -> UInt64 {
        guard let cursor = connection.cursor else { return sequencer.seq }
        return backlog.seq(before: cursor)
    }

    /// Sends one message to one connection, after everything sequenced before it.
    ///
    /// - Parameters:
    ///   - message: The message.
    ///   - connection: The connection.
    ///   - after: The position in the shared stream the message follows (default: its end,
    ///     after everything released so far).
    private func send(_ message: HubMessage, to connection: Connection, after: UInt64? = nil) {
        flushBatch()
        do throws(FrameError) {
            connection.queue(try Frame.encode(message), after: after ?? backlog.end)
        } catch {
            // Only a message carrying client-chosen text could get here (it never does in
            // practice: such text arrived in a frame of at most --max-frame-bytes).
            configuration.log("hubd: cannot frame a \(message.typeName) message for \(connection.label): \(error.description)")
        }
    }

    /// Sends `error` and closes the connection once it is flushed; other clients carry on.
    ///
    /// - Parameters:
    ///   - connection: The connection.
    ///   - error: What it is told.
    private func fail(_ connection: Connection, _ error: WireError) {
        configuration.log("hubd: closing \(connection.label): \(error.rawCode): \(error.message)")
        send(.error(error), to: connection)
        detach(connection)
        connection.follows = false
        connection.state = connection.state.closing(by: .now + .seconds(2))
    }

    /// Commits what the sequencer has sequenced, which releases it into the shared backlog
    /// every attached replica reads; dispatchers of actions that could not be made durable
    /// get `reject` `unavailable` instead.
    private func flushBatch() {
        let failed = sequencer.commit()
        for (connection, id, error) in failed where connections[connection.fd] === connection {
            if let frame = try? Frame.encode(HubMessage.reject(id: id, error: error)) {
                connection.queue(frame, after: backlog.end)
            }
        }
    }

    /// Frees backlog memory no reader needs: bytes before both the resume window and every
    /// connection's position. (A replica more than `--max-queue-bytes` behind has already
    /// left the stream, so this keeps at most about that much beyond the window.)
    private func compactBacklog() {
        var keep = backlog.heldStart
        let end = backlog.end
        for connection in connections.values {
            guard let cursor = connection.cursor, cursor < keep,
                  let limit = connection.sharedLimit(end: end), cursor < limit else { continue }
            guard backlog.inMemory(cursor) else {
                // Cannot happen (compaction never passes a reader); a stream with a gap would
                // be corrupt, so the connection is closed instead.
                drop(connection, reason: "lost its place in the backlog")
                continue
            }
            keep = cursor
        }
        backlog.compact(keepingFrom: keep)
    }

    /// A replica too far behind: it gets the rest of the frame it was half-way through, then
    /// `slow-consumer`, and leaves the shared stream (holding none of the backlog).
    private func fallOut(_ connection: Connection, lagBytes: Int) {
        var carry: [UInt8] = []
        if let cursor = connection.cursor {
            let frameEnd = backlog.frameEnd(containing: cursor)
            if frameEnd > cursor, backlog.inMemory(cursor) {
                carry = backlog.copy(from: cursor, to: frameEnd)
            }
        }
        connection.leaveStream(carry: carry)
        fail(connection, WireError(.slowConsumer, "\(lagBytes) bytes were waiting for this replica, more than this hub's limit of \(configuration.maxQueuedBytesPerReplica) (--max-queue-bytes); read faster, or attach again (with resume) to catch up"))
    }

    /// One write per connection with queued bytes: everything pending, gathered.
    private func writeAll() {
        for connection in connections.values where owed(connection) > 0 {
            write(connection)
            let pending = owed(connection)
            if !connection.state.isClosing, pending > configuration.maxQueuedBytesPerReplica {
                // No more broadcasts; the error follows the frame being written, and the close
                // comes when that is written or after 2 s, whichever is first.
                fallOut(connection, lagBytes: pending)
            }
        }
        compactBacklog()
    }

    /// The most pieces gathered into one `sendmsg`.
    private static let piecesPerWrite = 64

    /// Writes as much of what a connection is owed as its socket takes, in one system call
    /// (shared frames straight from the backlog, private messages from the connection).
    private func write(_ connection: Connection) {
        let result = connection.withOutput(backlog: backlog, maxPieces: Self.piecesPerWrite) { vectors in
            vectors.isEmpty ? UnixSocket.IOResult.bytes(0) : UnixSocket.write(connection.fd, gathering: vectors)
        }
        switch result {
        case .bytes(let count):
            connection.consume(count)
        case .wouldBlock:
            break
        case .endOfFile, .failed:
            drop(connection, reason: "disconnected")
        }
    }

    private func reapClosing() {
        let now = ContinuousClock.now
        for connection in Array(connections.values) {
            guard case .closing(_, _, let deadline) = connection.state else { continue }
            if owed(connection) == 0 || now >= deadline {
                close(connection)
            }
        }
    }

    // MARK: - Closing

    private func detach(_ connection: Connection) {
        guard connection.state.replica != nil else { return }
        attached.removeAll { $0 === connection }
        if case .attached(_, _, let session?) = connection.state, sessionOwners[JSONKey(session)] === connection {
            sessionOwners[JSONKey(session)] = nil
        }
    }

    /// Stops broadcasting to a client that finished sending and closes it once its queue is written.
    private func finishAfterFlush(_ connection: Connection) {
        if connection.state.replica != nil {
            configuration.log("hubd: \(connection.label) disconnected")
        }
        detach(connection)
        connection.state = connection.state.closing(by: .now + .seconds(2))
    }

    private func drop(_ connection: Connection, reason: String) {
        if connection.state.replica != nil, !connection.state.isClosing {
            configuration.log("hubd: \(connection.label) \(reason)")
        }
        detach(connection)
        close(connection)
    }

    private func close(_ connection: Connection) {
        guard connections[connection.fd] === connection else { return }
        connections[connection.fd] = nil
        UnixSocket.close(connection.fd)
    }

    /// Stop accepting, remove the socket, flush queued frames then `shutting-down` (up to 2 s),
    /// close everything, and leave a final snapshot.
    private func shutdown(listener: ListeningSocket) {
        // Removes the socket file only if it is still the one this hub bound.
        socketRemoved = listener.close()
        flushBatch()
        for connection in connections.values where !connection.state.isClosing {
            send(.error(WireError(.shuttingDown, "the hub is shutting down at seq \(sequencer.seq); attach again when it is back")), to: connection)
        }
        // One deadline for everyone: write what each socket takes, then wait in a single
        // poll for any of them to take more, until all is written or 2 s have passed.
        let deadline = ContinuousClock.now + .seconds(2)
        while true {
            for connection in connections.values where owed(connection) > 0 { write(connection) }
            let pending = connections.values.filter { owed($0) > 0 }
            let remaining = deadline - ContinuousClock.now
            guard !pending.isEmpty, remaining > .zero else { break }
            var waitSet = pending.map { pollfd(fd: $0.fd, events: Int16(POLLOUT), revents: 0) }
            let milliseconds = Int32(clamping: max(1, Int(nanoseconds: remaining) / 1_000_000))
            _ = poll(&waitSet, nfds_t(waitSet.count), milliseconds)
        }
        for connection in Array(connections.values) { close(connection) }
        attached.removeAll()
        sequencer.close()
    }
}

extension Int {
    /// The whole nanoseconds in a duration (saturating).
    init(nanoseconds duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = Int(clamping: seconds) &* 1_000_000_000 &+ Int(attoseconds / 1_000_000_000)
    }
}
