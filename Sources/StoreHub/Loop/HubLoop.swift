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

/// The hub's reactor: owns the listening socket, every connection's descriptor, readiness
/// (of the sockets, and of the log when it has a descriptor), the read buffer, the clock and
/// the thread. It hands what it sees to the ``HubCore`` as ``LoopEvent``s and carries out the
/// ``LoopAction``s the core returns; every decision is the core's.
///
/// One pass: `tick` (deadlines); `poll`; accept (each connection handed in as `accepted`);
/// read each readable connection (`input`); `pass` (the sequencer's pass); write what each
/// connection is owed, in the core's order (`wrote`); `written`.
///
/// Single-threaded by design: `serve` runs on one thread and nothing else touches this
/// object, its core, the connections, the sequencer or the log. Debug builds check it:
/// `serve` claims the loop and the sequencer for its thread (``ThreadOwner``), and their
/// entry points stop a call from any other.
///
/// **Exclusivity.** The stored `var`s that the hub touches for every action or frame, in the
/// per-action classes under the core (``Connection``, ``SessionEntry``, ``Sequencer``,
/// ``Proposer``, ``Applier``, ``Backlog``, `MemoryLog`, `HubEngine.States`), are
/// `@exclusivity(unchecked)`: the runtime's dynamic check of each class-property access (a
/// thread-local access set, entered and left about 30 times per action) cost 15 % of the
/// hub's instructions. Which fields are hot was measured, not guessed: with every attribute
/// removed, a uprobe on `swift_beginAccess` during `sync-bench --only hub.throughput` counted
/// the calls per call site (docs/PERFORMANCE.md); fields reached once per pass or less
/// (`core` here, the sequencer's replica-id lease and caches, the connection's write pass)
/// keep the check. Dropping it is safe because (1) only the loop thread touches these
/// objects (above), so no two threads can overlap; (2) no code keeps an `inout` access to one
/// of them open across a call that could reach the same property: each carries its own line
/// of proof (`// Unchecked: …`) saying why. The core is a value mutated only through
/// `handle`, which calls back into nothing outside it, and the ``RequestPipeline`` hands its
/// entries out instead of calling back while it is mutated; the reducer, the only user code,
/// gets the state inout and holds no reference to the hub. Static checks still apply to
/// everything else; a new property must be measured hot and meet (2), with its line, to carry
/// the attribute.
final class HubLoop {
    /// The decisions.
    private var core: HubCore
    /// Whether shutdown removed the socket file (it does not when the path now names another file).
    private(set) var socketRemoved = false
    private let readBuffer: UnsafeMutableRawBufferPointer
    private var lastWatchdog = ContinuousClock.now
    private let watchdogInterval: Duration?
    private let notifySystemd: Bool
    private let logger: HubLogger
    /// Set while new connections are not accepted because accepting failed (e.g. the process
    /// is out of file descriptors): the listener stays readable, so polling it would spin.
    private var acceptPausedUntil: ContinuousClock.Instant?
    /// Whether the last accept failed (so the failure is logged once, not every 100 ms).
    private var acceptFailing = false
    /// The actions of the last event (one buffer, reused).
    private var actions: [LoopAction] = []
    /// The thread running ``serve``: debug builds check it where the loop hands work on.
    private var owner = ThreadOwner()

    init(sequencer: Sequencer, configuration: HubConfiguration, hubID: String) {
        self.core = HubCore(sequencer: sequencer, configuration: configuration, hubID: hubID, hubUID: geteuid(), now: .now)
        self.watchdogInterval = configuration.notifySystemd ? Systemd.watchdogInterval : nil
        self.notifySystemd = configuration.notifySystemd
        self.logger = configuration.logger
        self.readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: HubConfiguration.Defaults.inputSlackBytes,
                                                                 alignment: 16)
    }

    deinit { readBuffer.deallocate() }

    /// The seq of the last applied action.
    var seq: UInt64 { core.seq }

    /// Who may attach, for the start-up line.
    var accessDescription: String { core.admittedDescription }

    /// The connection limit in force.
    var clientLimit: Int { core.maxClients }

    /// Why the loop stopped serving on its own (the log broke), if it did.
    var brokenLog: StorageError? { core.brokenLog }

    // MARK: - Event loop

    /// Runs the loop until a stop is requested (or the log breaks), then shuts down.
    ///
    /// - Throws: ``SystemError`` when `poll` itself fails; every connection is closed and the
    ///   socket released first, so nothing leaks.
    func serve(listener: ListeningSocket, wake: Int32, stopFD: Int32?,
               stopRequested: borrowing Atomic<Bool>) throws(SystemError) {
        var failure: SystemError?
        var pollSet: [pollfd] = []
        var order: [Connection] = []
        // From here on this thread alone drives the loop and the sequencer (checked in debug builds).
        owner.claim()
        core.sequencer.owner.claim()
        serving: while !stopRequested.load(ordering: .relaxed) {
            pollSet.removeAll(keepingCapacity: true)
            order.removeAll(keepingCapacity: true)
            var now = ContinuousClock.now
            if let until = acceptPausedUntil, now >= until { acceptPausedUntil = nil }
            handle(.tick, now: now)
            // While accepting is paused (out of descriptors), poll ignores the listener (fd -1).
            pollSet.append(pollfd(fd: acceptPausedUntil == nil ? listener.fd : -1, events: Int16(POLLIN), revents: 0))
            pollSet.append(pollfd(fd: wake, events: Int16(POLLIN), revents: 0))
            pollSet.append(pollfd(fd: stopFD ?? -1, events: Int16(POLLIN), revents: 0))
            let log = core.sequencer.log
            let readiness = log.readiness
            pollSet.append(pollfd(fd: readiness?.fd ?? -1, events: Int16(POLLIN), revents: 0))
            let fixed = pollSet.count
            for connection in core.connections.values {
                let interest = core.interest(of: connection)
                let events = (interest.read ? Int16(POLLIN) : 0) | (interest.write ? Int16(POLLOUT) : 0)
                // Nothing wanted from it now: left out of the poll (a negative descriptor), since
                // poll reports POLLHUP whatever was asked, and a peer that hung up while its
                // frames wait would wake the loop at once, again and again.
                pollSet.append(pollfd(fd: events == 0 ? -1 : connection.fd, events: events, revents: 0))
                order.append(connection)
            }
            // Proposals judged in the last round of the previous pass are committed by the
            // next pass's pump: it runs at once.
            let timers = core.timersPending || acceptPausedUntil != nil
            var timeout: Int32 = core.mustNotWait ? 0 : (timers ? 100 : -1)
            if let watchdogInterval { timeout = Self.sooner(timeout, until: lastWatchdog + watchdogInterval, now: now) }
            let ready = poll(&pollSet, nfds_t(pollSet.count), timeout)
            if ready < 0 {
                if currentErrno() == EINTR { continue }
                failure = SystemError.lastCall("poll")
                break
            }
            now = .now
            if pollSet[1].revents != 0 { drainPipe(wake) }
            if pollSet[2].revents != 0 { break }
            if pollSet[0].revents != 0 { acceptAll(listener.fd, now: now) }
            for (index, connection) in order.enumerated() where core.isServing(connection) {
                let revents = pollSet[index + fixed].revents
                if revents & Int16(POLLIN | POLLHUP | POLLERR) != 0, pollSet[index + fixed].events & Int16(POLLIN) != 0 {
                    handle(.input(connection, readInput(connection)), now: now)
                } else if core.hasFramesToHandle(connection) {
                    handle(.input(connection, .nothing), now: now)
                }
            }
            if handle(.pass, now: now) { break serving }
            // The pass listed what to write (`writeList`): read, never changed, by the reactor.
            for connection in core.writeList where core.isOpen(connection) {
                let result = core.withOutput(of: connection, maxPieces: Self.piecesPerWrite) { vectors in
                    vectors.isEmpty ? UnixSocket.IOResult.bytes(0) : UnixSocket.write(connection.fd, gathering: vectors)
                }
                handle(.wrote(connection, result), now: now)
            }
            handle(.written, now: now)
            if let watchdogInterval, now - lastWatchdog >= watchdogInterval {
                lastWatchdog = now
                Systemd.notify("WATCHDOG=1")
            }
        }
        shutdown(listener: listener)
        if let failure { throw failure }
    }

    /// Hands one event to the core and carries out its actions.
    ///
    /// - Returns: Whether the core asked to stop serving.
    @discardableResult
    private func handle(_ event: LoopEvent, now: ContinuousClock.Instant) -> Bool {
        // The one way into the core: only the loop's thread may take it (debug builds check).
        owner.check()
        core.handle(event, now: now, into: &actions)
        var stop = false
        for action in actions {
            switch action {
            case .close(let fd):
                UnixSocket.close(fd)
            case .refuse(let fd, let frame):
                // The socket's buffer is empty, so the one small frame goes out without waiting.
                _ = frame.withUnsafeBytes { UnixSocket.write(fd, $0, dontWait: true) }
                UnixSocket.close(fd)
            case .stop:
                stop = true
            }
        }
        return stop
    }

    /// A poll timeout (ms, -1 forever) no later than `deadline`.
    private static func sooner(_ timeout: Int32, until deadline: ContinuousClock.Instant, now: ContinuousClock.Instant) -> Int32 {
        let left = max(0, Int(nanoseconds: deadline - now) / 1_000_000 + 1)
        let milliseconds = Int32(clamping: left)
        return timeout < 0 ? milliseconds : min(timeout, milliseconds)
    }

    private func drainPipe(_ fd: Int32) {
        var scratch = [UInt8](repeating: 0, count: 64)
        while scratch.withUnsafeMutableBytes({ read(fd, $0.baseAddress, $0.count) }) > 0 {}
    }

    // MARK: - Accepting and reading

    /// Accepts every waiting connection, handing each to the core.
    private func acceptAll(_ listener: Int32, now: ContinuousClock.Instant) {
        while true {
            do {
                guard let fd = try UnixSocket.accept(listener) else { return }
                if acceptFailing {
                    acceptFailing = false
                    logger.notice("accepting connections again")
                }
                handle(.accepted(fd: fd, peer: PeerCredentials.of(fd), groups: { PeerCredentials.groups(of: fd) }), now: now)
            } catch {
                // Connected clients carry on; new ones wait in the listen backlog meanwhile,
                // and accepting is retried every 100 ms.
                if !acceptFailing {
                    acceptFailing = true
                    logger.notice("cannot accept new connections: \(error.message); waiting clients stay queued and accepting is retried every 100 ms (raise the open-files limit, ulimit -n, or lower --max-clients)")
                }
                acceptPausedUntil = now + .milliseconds(100)
                return
            }
        }
    }

    /// Reads what one connection has sent, at most as much as the core takes.
    private func readInput(_ connection: Connection) -> ConnectionRead {
        let room = core.readRoom(of: connection, bufferSize: readBuffer.count)
        switch UnixSocket.read(connection.fd, into: UnsafeMutableRawBufferPointer(rebasing: readBuffer[0..<room])) {
        case .bytes(let count): return .bytes(UnsafeRawBufferPointer(rebasing: readBuffer[0..<count]))
        case .wouldBlock: return .nothing
        case .endOfFile: return .ended
        case .failed: return .failed
        }
    }

    /// The most pieces gathered into one `sendmsg`.
    private static let piecesPerWrite = 64

    // MARK: - Closing

    /// Stop accepting, remove the socket, flush what is applied then `shutting-down` (up to
    /// 2 s), close everything, and leave a final snapshot.
    private func shutdown(listener: ListeningSocket) {
        if notifySystemd { Systemd.notify("STOPPING=1\nSTATUS=stopping at seq \(core.seq)") }
        // Removes the socket file only if it is still the one this hub bound.
        socketRemoved = listener.close()
        handle(.shutdown, now: .now)
        // One deadline for everyone: write what each socket takes, then wait in a single
        // poll for any of them to take more, until all is written or 2 s have passed.
        let deadline = ContinuousClock.now + .seconds(2)
        var pending: [Connection] = []
        while true {
            for connection in core.connections.values where core.isOpen(connection) && core.owes(connection) {
                let result = core.withOutput(of: connection, maxPieces: Self.piecesPerWrite) { vectors in
                    vectors.isEmpty ? UnixSocket.IOResult.bytes(0) : UnixSocket.write(connection.fd, gathering: vectors)
                }
                handle(.wrote(connection, result), now: .now)
            }
            pending = core.connections.values.filter { core.owes($0) }
            let remaining = deadline - ContinuousClock.now
            guard !pending.isEmpty, remaining > .zero else { break }
            var waitSet = pending.map { pollfd(fd: $0.fd, events: Int16(POLLOUT), revents: 0) }
            let milliseconds = Int32(clamping: max(1, Int(nanoseconds: remaining) / 1_000_000))
            _ = poll(&waitSet, nfds_t(waitSet.count), milliseconds)
        }
        handle(.finish, now: .now)
        handle(.closeLog, now: .now)
    }
}

extension Int {
    /// The whole nanoseconds in a duration (saturating).
    init(nanoseconds duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = Int(clamping: seconds) &* 1_000_000_000 &+ Int(attoseconds / 1_000_000_000)
    }
}
