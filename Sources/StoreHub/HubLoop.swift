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

/// One client connection, owned by the hub's event-loop thread.
final class Connection {
    let fd: Int32
    var decoder: FrameDecoder
    /// Bytes queued for this client; `outOffset` of them already written.
    var out: [UInt8] = []
    var outOffset = 0
    /// Set once `hello` succeeds.
    var replica: Int?
    var name = ""
    /// After an `error`: read nothing more, flush, then close (by `closeBy` at the latest).
    var closeBy: ContinuousClock.Instant?

    init(fd: Int32, maxFrameBytes: Int) {
        self.fd = fd
        self.decoder = FrameDecoder(maxPayloadBytes: maxFrameBytes)
    }

    var pendingBytes: Int { out.count - outOffset }
}

/// The hub's event loop and everything it owns: sockets, the root store, the sequence.
///
/// Single-threaded by design: `serve` runs on one thread and nothing else touches this object.
/// Not generic: the app is reached through `engine`, whose closures are specialised for it.
final class HubLoop {
    let engine: HubEngine
    let configuration: HubConfiguration
    let hubID: String
    /// The seq of the last sequenced action (0 before the first).
    private(set) var seq: UInt64 = 0

    private var connections: [Int32: Connection] = [:]
    /// Attached replicas in attach order: the broadcast list.
    private var attached: [Connection] = []
    private var nextReplica = 1
    /// Action frames sequenced since the last flush, encoded once for every replica.
    private var batch: [UInt8] = []
    private let readBuffer: UnsafeMutableRawBufferPointer

    init(engine: HubEngine, configuration: HubConfiguration, hubID: String) {
        self.engine = engine
        self.configuration = configuration
        self.hubID = hubID
        self.readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 256 << 10, alignment: 16)
        batch.reserveCapacity(64 << 10)
    }

    deinit { readBuffer.deallocate() }

    // MARK: - Event loop

    func serve(listener: Int32, wake: Int32, stopFD: Int32?, stopRequested: borrowing Atomic<Bool>) throws(SystemError) {
        var pollSet: [pollfd] = []
        var order: [Connection] = []
        while !stopRequested.load(ordering: .relaxed) {
            pollSet.removeAll(keepingCapacity: true)
            order.removeAll(keepingCapacity: true)
            if let until = acceptPausedUntil, ContinuousClock.now >= until {
                acceptPausedUntil = nil
            }
            // While accepting is paused (out of descriptors), poll ignores the listener (fd -1).
            pollSet.append(pollfd(fd: acceptPausedUntil == nil ? listener : -1, events: Int16(POLLIN), revents: 0))
            pollSet.append(pollfd(fd: wake, events: Int16(POLLIN), revents: 0))
            pollSet.append(pollfd(fd: stopFD ?? -1, events: Int16(POLLIN), revents: 0))
            var closingSoon = false
            for connection in connections.values {
                var events: Int16 = 0
                if connection.closeBy == nil { events |= Int16(POLLIN) } else { closingSoon = true }
                if connection.pendingBytes > 0 { events |= Int16(POLLOUT) }
                pollSet.append(pollfd(fd: connection.fd, events: events, revents: 0))
                order.append(connection)
            }
            let ready = poll(&pollSet, nfds_t(pollSet.count), closingSoon || acceptPausedUntil != nil ? 100 : -1)
            if ready < 0 {
                if currentErrno() == EINTR { continue }
                throw SystemError.lastCall("poll")
            }
            if pollSet[1].revents != 0 { drainPipe(wake) }
            if pollSet[2].revents != 0 { break }
            if pollSet[0].revents != 0 { acceptAll(listener) }
            for (index, connection) in order.enumerated() {
                let revents = pollSet[index + 3].revents
                guard revents != 0, connections[connection.fd] === connection else { continue }
                if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0, connection.closeBy == nil {
                    readAndHandle(connection)
                }
            }
            flushBatch()
            writeAll()
            reapClosing()
        }
        shutdown(listener: listener)
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

    /// Reads what one connection has sent and handles each complete frame.
    private func readAndHandle(_ connection: Connection) {
        switch UnixSocket.read(connection.fd, into: readBuffer) {
        case .bytes(let count):
            connection.decoder.append(UnsafeRawBufferPointer(rebasing: readBuffer[0..<count]))
        case .wouldBlock:
            return
        case .endOfFile:
            // The client is done sending (closed, or half-closed with SHUT_WR): it gets what
            // is already queued for it, such as the acks of its last dispatches, then a close.
            finishAfterFlush(connection)
            return
        case .failed:
            drop(connection, reason: "disconnected")
            return
        }
        while connection.closeBy == nil, connections[connection.fd] === connection {
            let handled: Void?
            do throws(FrameError) {
                // Zero-copy: the payload is parsed where it lies in the decoder's buffer.
                handled = try connection.decoder.decodeNext { payload in handle(payload, from: connection) }
            } catch {
                switch error {
                case .emptyFrame:
                    fail(connection, WireError(.badFrame, "a frame's length must be at least 1; got 0"))
                case .tooLarge(let length, let limit):
                    fail(connection, WireError(.frameTooLarge, "frame of \(length) bytes exceeds this hub's limit of \(limit) bytes (--max-frame-bytes); split the action or raise the limit"))
                }
                return
            }
            guard handled != nil else { return }
        }
    }

    private func handle(_ payload: UnsafeRawBufferPointer, from connection: Connection) {
        let json: JSON
        do {
            json = try JSON(parsing: payload)
        } catch {
            fail(connection, WireError(.badJSON, "frame payload is not valid JSON: \(error.description)"))
            return
        }
        let message: ClientMessage
        do {
            message = try ClientMessage(json: json)
        } catch {
            fail(connection, error)
            return
        }
        switch message {
        case .status:
            send(.status(status()), to: connection)
        case .hello(let version, let appName, let fingerprint, let name):
            hello(connection, version: version, appName: appName, fingerprint: fingerprint, name: name)
        case .dispatch(let id, let action):
            dispatch(connection, id: id, action: action)
        }
    }

    private func hello(_ connection: Connection, version: Int, appName: String, fingerprint: String?, name: String?) {
        guard connection.replica == nil else {
            fail(connection, WireError(.alreadyAttached, "this connection is already attached as replica \(connection.replica ?? 0); send hello once"))
            return
        }
        guard version == syncProtocolVersion else {
            fail(connection, WireError(.protocolMismatch, "this hub speaks protocol \(syncProtocolVersion), the client asked for \(version); upgrade the older side"))
            return
        }
        guard appName == engine.appName else {
            fail(connection, WireError(.appMismatch, "this hub runs app \"\(engine.appName)\", not \"\(appName)\"; start the replica with --app \(engine.appName) or run a hub for \(appName)"))
            return
        }
        if let fingerprint, fingerprint != engine.fingerprint {
            fail(connection, WireError(.appMismatch, "this hub runs \(engine.fingerprint), the replica has \(fingerprint); both sides must run the same reducer version"))
            return
        }
        // Everything sequenced so far goes out before the snapshot, so the new replica's
        // stream starts exactly after `seq` (atomic hydration).
        flushBatch()
        let replica = nextReplica
        nextReplica += 1
        connection.replica = replica
        connection.name = name ?? ""
        let state = engine.snapshot()
        let digest = Digest.of(state)
        connection.out.append(contentsOf: Frame.encode(.welcome(hub: hubID, replica: replica, seq: seq, state: state, digest: digest)))
        attached.append(connection)
        configuration.log("hubd: replica \(replica)\(connection.name.isEmpty ? "" : " (\(connection.name))") attached at seq \(seq)")
    }

    private func dispatch(_ connection: Connection, id: DispatchID, action json: JSON) {
        guard let origin = connection.replica else {
            fail(connection, WireError(.notAttached, "dispatch before hello; send {\"type\":\"hello\",\"protocol\":\(syncProtocolVersion),\"app\":\"\(engine.appName)\"} first"))
            return
        }
        switch engine.apply(json) {
        case .applied:
            break
        case .badAction(let message):
            send(.reject(id: id, error: WireError(.badAction, message)), to: connection)
            return
        case .rejected(let message):
            send(.reject(id: id, error: WireError(.rejected, message)), to: connection)
            return
        }
        seq += 1
        Frame.appendActionEnvelope(seq: seq, origin: origin, id: id, action: json, to: &batch)
    }

    private func status() -> HubStatus {
        HubStatus(protocolVersion: syncProtocolVersion, app: engine.appName, fingerprint: engine.fingerprint, hub: hubID,
                  seq: seq, digest: Digest.of(engine.snapshot()),
                  replicas: attached.compactMap { c in c.replica.map { ReplicaInfo(replica: $0, name: c.name) } })
    }

    // MARK: - Output

    /// Sends one message to one connection, after everything sequenced before it.
    private func send(_ message: HubMessage, to connection: Connection) {
        flushBatch()
        connection.out.append(contentsOf: Frame.encode(message))
    }

    /// Sends `error` and closes the connection once it is flushed; other clients carry on.
    private func fail(_ connection: Connection, _ error: WireError) {
        configuration.log("hubd: closing \(label(connection)): \(error.rawCode): \(error.message)")
        send(.error(error), to: connection)
        detach(connection)
        connection.closeBy = .now + .seconds(2)
    }

    /// Appends the batch of newly sequenced frames to every attached replica's queue.
    private func flushBatch() {
        guard !batch.isEmpty else { return }
        for connection in attached {
            connection.out.append(contentsOf: batch)
        }
        batch.removeAll(keepingCapacity: true)
    }

    /// One write per connection with queued bytes: everything pending, coalesced.
    private func writeAll() {
        for connection in Array(connections.values) where connection.pendingBytes > 0 {
            write(connection)
            if connection.closeBy == nil, connection.pendingBytes > configuration.maxQueuedBytesPerReplica {
                // No more broadcasts; the error follows what is queued, and the close comes
                // when that is written or after 2 s, whichever is first.
                fail(connection, WireError(.slowConsumer, "\(connection.pendingBytes) bytes were waiting for this replica, more than this hub's limit of \(configuration.maxQueuedBytesPerReplica) (--max-queue-bytes); read faster, or attach again to resync"))
            }
        }
    }

    private func write(_ connection: Connection) {
        let result = connection.out.withUnsafeBytes { bytes in
            UnixSocket.write(connection.fd, UnsafeRawBufferPointer(rebasing: bytes[connection.outOffset...]))
        }
        switch result {
        case .bytes(let count):
            connection.outOffset += count
            if connection.outOffset == connection.out.count {
                connection.out.removeAll(keepingCapacity: connection.out.capacity <= 4 << 20)
                connection.outOffset = 0
            } else if connection.outOffset >= 1 << 20, connection.outOffset * 2 >= connection.out.count {
                connection.out.removeFirst(connection.outOffset)
                connection.outOffset = 0
            }
        case .wouldBlock:
            break
        case .endOfFile, .failed:
            drop(connection, reason: "disconnected")
        }
    }

    private func reapClosing() {
        let now = ContinuousClock.now
        for connection in Array(connections.values) {
            guard let deadline = connection.closeBy else { continue }
            if connection.pendingBytes == 0 || now >= deadline {
                close(connection)
            }
        }
    }

    // MARK: - Closing

    private func detach(_ connection: Connection) {
        guard connection.replica != nil else { return }
        attached.removeAll { $0 === connection }
    }

    /// Stops broadcasting to a client that finished sending and closes it once its queue is written.
    private func finishAfterFlush(_ connection: Connection) {
        if connection.replica != nil {
            configuration.log("hubd: \(label(connection)) disconnected")
        }
        detach(connection)
        connection.closeBy = .now + .seconds(2)
    }

    private func drop(_ connection: Connection, reason: String) {
        if connection.replica != nil, connection.closeBy == nil {
            configuration.log("hubd: \(label(connection)) \(reason)")
        }
        detach(connection)
        close(connection)
    }

    private func close(_ connection: Connection) {
        guard connections[connection.fd] === connection else { return }
        connections[connection.fd] = nil
        UnixSocket.close(connection.fd)
    }

    private func label(_ connection: Connection) -> String {
        guard let replica = connection.replica else { return "client (not attached)" }
        return connection.name.isEmpty ? "replica \(replica)" : "replica \(replica) (\(connection.name))"
    }

    /// Stop accepting, remove the socket, flush queued frames then `shutting-down` (up to 2 s),
    /// close everything.
    private func shutdown(listener: Int32) {
        UnixSocket.close(listener)
        unlink(configuration.socketPath)
        flushBatch()
        for connection in connections.values where connection.closeBy == nil {
            connection.out.append(contentsOf: Frame.encode(.error(WireError(.shuttingDown, "the hub is shutting down at seq \(seq); attach again when it is back"))))
        }
        let deadline = ContinuousClock.now + .seconds(2)
        while ContinuousClock.now < deadline {
            let pending = connections.values.filter { $0.pendingBytes > 0 }
            if pending.isEmpty { break }
            for connection in pending {
                write(connection)
                if connection.pendingBytes > 0 {
                    _ = UnixSocket.waitUntil(connection.fd, writable: true, timeoutMilliseconds: 50)
                }
            }
        }
        for connection in Array(connections.values) { close(connection) }
        attached.removeAll()
    }
}
