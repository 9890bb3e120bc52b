#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import SyncCore
import SyncPOSIX

/// Why a connection is torn down: the one argument of ``HubCore/tearDown(_:_:)``.
enum Teardown: Equatable {
    /// It ended its input and every answer it was owed is queued: it closes once they are
    /// written (or after 2 s).
    case finished
    /// The history moved to a newer version while it streamed: it is written the rest of its
    /// stream, `upgraded` last, then closes once that is written (or after the larger of
    /// `--welcome-timeout` and 2 s, as a slow consumer: a replica busy for a moment still
    /// learns of the upgrade, and the time is bounded).
    case upgraded
    /// It gets this `error` after what is queued, then closes once that is written (or
    /// after a grace: 2 s, as long as a welcome for a slow consumer).
    case failed(WireError)
    /// Its socket failed, or the hub lost its place: it closes now; the words say why, for
    /// the log.
    case lost(String)
}

/// What each connection is owed and how it leaves: queuing messages, the write pass, slow
/// consumers, backlog compaction, and tearing down.
extension HubCore {
    /// The shared stream of applied frames.
    var backlog: Backlog { sequencer.backlog }

    /// Whether anything is owed to a connection.
    func owes(_ connection: Connection) -> Bool { connection.output.owesAnything(end: backlog.end) }

    /// The seq of the last action written whole to a connection's socket.
    func writtenSeq(of connection: Connection) -> UInt64 {
        guard let cursor = connection.output.cursor else { return sequencer.appliedSeq }
        return backlog.seq(before: cursor)
    }

    /// Sends one message to every connection whose stream started and whose input is not
    /// over, after everything applied so far.
    ///
    /// - Parameter message: The message.
    mutating func broadcast(_ message: HubMessage) {
        for connection in streaming where !connection.isClosing && !connection.phase.inputOver { send(message, to: connection) }
    }

    /// Sends one message to one connection, after everything applied so far.
    ///
    /// - Parameters:
    ///   - message: The message.
    ///   - connection: The connection.
    ///   - after: The position in the shared stream the message follows (default: its end).
    mutating func send(_ message: HubMessage, to connection: Connection, after: UInt64? = nil) {
        do throws(FrameError) {
            connection.output.queue(try Frame.encode(message), after: after ?? backlog.end)
        } catch {
            // Only a message carrying client-chosen text could get here (it never does in
            // practice: such text arrived in a frame of at most --max-frame-bytes).
            configuration.logger.notice("cannot frame a \(message.typeName) message for \(connection.label): \(error.description)")
        }
    }

    /// Adds a connection to those that get every broadcast.
    mutating func startBroadcasts(to connection: Connection) { streaming.append(connection) }

    // MARK: - The write pass

    /// Lists the connections to write in this pass (``writeList``), each once, in order: those
    /// whose frames the pass handled first (an unloaded round trip is then one write from the
    /// hub to the dispatcher, not one behind every other replica's copy), then every other that
    /// is owed something. Done by `handle(.pass)` and `handle(.shutdown)`; the reactor writes
    /// each (``withOutput(of:maxPieces:_:)``) and reports a `wrote` event, then `written`.
    ///
    /// - Parameter order: Emptied, then filled with the connections.
    mutating func writeOrder(into order: inout [Connection]) {
        order.removeAll(keepingCapacity: true)
        writePass &+= 1
        for connection in spoke where connections[connection.fd] === connection { list(connection, into: &order) }
        spoke.removeAll(keepingCapacity: true)
        for connection in connections.values { list(connection, into: &order) }
    }

    /// Lists a connection for this write pass, once, when it is owed something.
    private func list(_ connection: Connection, into order: inout [Connection]) {
        guard connection.writePass != writePass else { return }
        connection.writePass = writePass
        if owes(connection) { order.append(connection) }
    }

    /// Calls `body` with what a connection is owed, in order, as at most `maxPieces` buffers
    /// (shared ranges of the backlog and private bytes) for one gathered write.
    ///
    /// - Parameters:
    ///   - connection: The connection.
    ///   - maxPieces: The most buffers.
    ///   - body: Writes them (or some of their bytes) and says what the write gave.
    /// - Returns: What `body` returned.
    func withOutput<R>(of connection: Connection, maxPieces: Int, _ body: (UnsafeBufferPointer<iovec>) -> R) -> R {
        connection.output.withOutput(backlog: backlog, maxPieces: maxPieces, body)
    }

    /// Takes what a write gave: the bytes written are consumed; a failed write tears the
    /// connection down; a replica that lags too far falls out of the broadcast.
    mutating func wrote(_ result: UnixSocket.IOResult, to connection: Connection) {
        guard connections[connection.fd] === connection else { return }
        switch result {
        case .bytes(let count):
            connection.output.consume(count)
        case .wouldBlock:
            break
        case .endOfFile, .failed:
            tearDown(connection, .lost("disconnected"))
            return
        }
        guard !stopping, !connection.isClosing else { return }
        let pending = connection.output.countedPending(end: backlog.end)
        if pending > configuration.maxQueuedBytesPerReplica {
            // No more broadcasts; the error follows the frame being written.
            fallOut(connection, lagBytes: pending)
        }
    }

    /// A replica too far behind: it gets the rest of the frame it was half-way through, then
    /// `slow-consumer`, and leaves the shared stream (holding none of the backlog).
    private mutating func fallOut(_ connection: Connection, lagBytes: Int) {
        var carry: [UInt8] = []
        if let cursor = connection.output.cursor {
            let frameEnd = backlog.frameEnd(containing: cursor)
            if frameEnd > cursor, backlog.inMemory(cursor) {
                carry = backlog.copy(from: cursor, to: frameEnd)
            }
        }
        connection.output.leaveStream(carry: carry)
        tearDown(connection, .failed(WireError(.slowConsumer, "\(lagBytes) bytes were waiting for this replica, more than this hub's limit of \(configuration.maxQueuedBytesPerReplica) (--max-queue-bytes); read faster, or attach again (with resume) to catch up")))
    }

    /// Frees backlog memory no reader needs: bytes before both the resume window and every
    /// connection's position.
    mutating func compactBacklog() {
        var keep = backlog.heldStart
        let end = backlog.end
        for connection in connections.values {
            guard let cursor = connection.output.cursor, cursor < keep,
                  let limit = connection.output.sharedLimit(end: end), cursor < limit else { continue }
            guard backlog.inMemory(cursor) else {
                // Cannot happen (compaction never passes a reader); a stream with a gap would
                // be corrupt, so the connection is closed instead.
                tearDown(connection, .lost("lost its place in the backlog"))
                continue
            }
            keep = cursor
        }
        backlog.compact(keepingFrom: keep)
    }

    /// Closes every torn-down connection whose queue is written, or whose deadline passed.
    mutating func reapClosing() {
        for connection in connections.values {
            guard case .closing(_, let deadline) = connection.phase else { continue }
            if !owes(connection) || now >= deadline { forget(connection) }
        }
    }

    // MARK: - Tearing down

    /// Tears a connection down: the one way a connection leaves, whatever the reason.
    ///
    /// It leaves the broadcast and its session at once. A `finished` or `failed` connection
    /// is then written what it is owed (and the error) and closed once that is written or
    /// its deadline passes (``reapClosing()``); a `lost` one closes now.
    ///
    /// - Parameters:
    ///   - connection: The connection.
    ///   - why: Why.
    mutating func tearDown(_ connection: Connection, _ why: Teardown) {
        switch why {
        case .finished:
            if connection.phase.attachment != nil, !connection.isClosing {
                configuration.logger.info("\(connection.label) disconnected")
            }
        case .upgraded:
            break
        case .failed(let error):
            configuration.logger.info("closing \(connection.label): \(error.rawCode): \(ControlCharacters.escaped(error.message))")
            send(.error(error), to: connection)
        case .lost(let reason):
            if connection.phase.attachment != nil, !connection.isClosing {
                configuration.logger.info("\(connection.label) \(reason)")
            }
        }
        leaveBroadcast(connection)
        switch why {
        case .lost:
            forget(connection)
        case .finished, .upgraded, .failed:
            connection.output.stopFollowing(at: backlog.end)
            connection.output.clearReadDeadline()
            // A slow consumer is given as long as a welcome to read the rest of its frame and
            // the error, and so is a replica to read up to `upgraded`.
            var grace: Duration = .seconds(2)
            if why == .upgraded { grace = max(configuration.welcomeTimeout, .seconds(2)) }
            if case .failed(let error) = why, error.code == .slowConsumer { grace = max(configuration.welcomeTimeout, .seconds(2)) }
            connection.phase = connection.phase.closing(by: now + grace)
        }
    }

    /// Takes a connection out of the broadcast and out of its session.
    private mutating func leaveBroadcast(_ connection: Connection) {
        guard let attachment = connection.phase.attachment else { return }
        streaming.removeAll { $0 === connection }
        if let session = attachment.session, sessionOwners[JSONKey(session)] === connection {
            sessionOwners[JSONKey(session)] = nil
        }
    }

    /// Forgets a connection and has the reactor close its descriptor.
    mutating func forget(_ connection: Connection) {
        guard connections[connection.fd] === connection else { return }
        connections[connection.fd] = nil
        if !connection.isClosing { connection.phase = connection.phase.closing(by: now) }
        actions.append(.close(fd: connection.fd))
    }
}
