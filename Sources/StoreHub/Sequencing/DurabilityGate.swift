/// The third of the sequencer's three parts: whether dispatches may be proposed at all.
///
/// It closes on a real outage only — the log could not make proposals durable (a full disk,
/// an I/O error) or the link to a replicated log is down — never for a conflict, which is
/// ordinary when several hubs share a log. While it is closed every dispatch is refused with
/// `unavailable` (nothing applied); it asks the log whether it works again (a disk about once a
/// second, a shared log every pass), and opens by itself when it does.
///
/// On the event-loop thread only.
struct DurabilityGate {
    /// Why dispatches are refused, while they are.
    private(set) var reason: String?
    /// When the log was last asked (set when the gate closes).
    private var lastProbe: ContinuousClock.Instant?
    /// How often a closed gate asks the log: about once a second for a disk (a test write);
    /// every pass for a shared log, whose answer is a flag its worker keeps.
    let probeInterval: Duration

    /// Creates an open gate.
    ///
    /// - Parameter probeInterval: How often a closed gate asks the log.
    init(probeInterval: Duration = .seconds(1)) { self.probeInterval = probeInterval }

    /// Whether dispatches may be proposed.
    var isOpen: Bool { reason == nil }

    /// Closes the gate.
    ///
    /// - Parameters:
    ///   - reason: What the refusals say (what happened, and that nothing was applied).
    ///   - now: The time (the first probe is due one interval later).
    mutating func close(_ reason: String, now: ContinuousClock.Instant) {
        if self.reason == nil { lastProbe = now }
        self.reason = reason
    }

    /// While closed, asks the log about once a second whether it works again.
    ///
    /// - Parameters:
    ///   - now: The time.
    ///   - probe: Asks the log.
    /// - Returns: Whether the gate opened.
    mutating func probeIfDue(now: ContinuousClock.Instant, _ probe: () -> Bool) -> Bool {
        guard reason != nil, lastProbe.map({ now - $0 >= probeInterval }) ?? true else { return false }
        lastProbe = now
        guard probe() else { return false }
        reason = nil
        return true
    }
}
