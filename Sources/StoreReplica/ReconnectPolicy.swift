/// How a replica comes back after its connection drops (the hub restarted, it dropped this
/// replica as a slow consumer, the socket broke).
///
/// Attempts wait with capped exponential backoff and jitter: about `initialDelay`, then
/// twice that each time, never more than `maxDelay`, each delay randomised by ±50 % so that
/// many replicas of a restarted hub do not come back in lockstep. Each attempt says `hello`
/// with `resume` (the history and the last applied seq): the hub answers a resumed welcome
/// and sends exactly the missed actions, or, when it cannot (another history, a gap beyond
/// its backlog, a hub that lost a tail), a full welcome whose state replaces the local one.
public struct ReconnectPolicy: Sendable, Equatable {
    /// Whether to reconnect at all; ``never`` keeps the connection's end final.
    public var enabled: Bool
    /// The first delay before reconnecting.
    public var initialDelay: Duration
    /// The longest delay between attempts.
    public var maxDelay: Duration
    /// Give up after this many failed attempts in a row (`nil`: keep trying until ``Replica/close()``).
    public var maxAttempts: Int?
    /// The most dispatches that may wait for the link to come back (default 10,000); past
    /// it, a dispatch made while reconnecting fails at once with ``ReplicaError/disconnected(_:)``.
    public var maxPendingDispatches: Int = 10_000

    /// Creates a policy.
    ///
    /// - Parameters:
    ///   - initialDelay: The first delay (default 50 ms).
    ///   - maxDelay: The cap (default 2 s).
    ///   - maxAttempts: Attempts before giving up; `nil` (the default) never gives up.
    public init(initialDelay: Duration = .milliseconds(50), maxDelay: Duration = .seconds(2), maxAttempts: Int? = nil) {
        self.enabled = true
        self.initialDelay = initialDelay
        self.maxDelay = maxDelay
        self.maxAttempts = maxAttempts
    }

    /// Reconnect with the defaults: 50 ms doubling up to 2 s, forever.
    public static var automatic: ReconnectPolicy { ReconnectPolicy() }

    /// Never reconnect: the first end of the connection is final (the behaviour before reconnection existed).
    public static var never: ReconnectPolicy {
        var policy = ReconnectPolicy()
        policy.enabled = false
        return policy
    }

    /// The delay before attempt `attempt` (1-based), with jitter.
    func delay(before attempt: Int) -> Duration {
        var delay = initialDelay
        for _ in 1..<max(1, attempt) where delay < maxDelay { delay = delay * 2 }
        delay = min(delay, maxDelay)
        return delay * Double.random(in: 0.5...1.5)
    }
}
