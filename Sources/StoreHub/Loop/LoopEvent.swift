import SyncPOSIX

/// Something the reactor (``HubLoop``) saw, handed to ``HubCore/handle(_:now:into:)``.
///
/// The reactor owns descriptors, readiness and the clock; each event says what happened,
/// and the core decides what follows. A pass of the loop hands, in order: `tick`; then, for
/// what `poll` reported, `accepted` and `input`; then `pass`; then a `wrote` for each
/// connection ``HubCore/writeList`` lists; then `written`.
enum LoopEvent {
    /// A pass begins: deadlines are checked (`--idle-timeout`, `--welcome-timeout`, a
    /// resume's catch-up), and the core says what the next `poll` waits for.
    case tick
    /// A connection was accepted on the listening socket.
    ///
    /// - fd: Its descriptor (the core answers `refuse` or keeps it).
    /// - peer: Who connected, as the kernel says (`nil`: the system cannot tell).
    /// - groups: The peer's groups, asked only when a group decides.
    case accepted(fd: Int32, peer: PeerCredentials?, groups: () -> [UInt32]?)
    /// What reading a connection gave (or `nothing`: it was not read, but frames wait in its
    /// buffer); the core handles the frames it now holds.
    case input(Connection, ConnectionRead)
    /// Reads are done: the sequencer's pass runs (the log's group commit), answers the
    /// applied seq allows are released, and replicas that waited for this hub to catch up
    /// get their welcome.
    case pass
    /// What writing a connection gave (each listed in ``HubCore/writeList``).
    case wrote(Connection, UnixSocket.IOResult)
    /// Writes are done: backlog memory no reader needs is freed, and finished connections close.
    case written
    /// The hub stops: what is applied is answered, and every client is told.
    case shutdown
    /// Every connection closes.
    case finish
    /// The last event: the log closes (with a final snapshot when it is sound), after the
    /// reactor has closed every connection.
    case closeLog
}

/// What reading a connection gave.
enum ConnectionRead {
    /// These bytes arrived (valid for the call only).
    case bytes(UnsafeRawBufferPointer)
    /// The client ended its input (end of file): buffered frames are still handled.
    case ended
    /// The read failed: the connection is gone.
    case failed
    /// Nothing new (not read, or it would block): frames already buffered are handled.
    case nothing
}

/// What the core asks the reactor to do, in order, after an event.
enum LoopAction: Equatable {
    /// Write this frame to a connection it did not admit (one small write, never waited
    /// for), then close the descriptor.
    case refuse(fd: Int32, frame: [UInt8])
    /// Close this descriptor: the core has forgotten its connection.
    case close(fd: Int32)
    /// Stop serving: the log broke (``HubCore/brokenLog`` says why).
    case stop
}
