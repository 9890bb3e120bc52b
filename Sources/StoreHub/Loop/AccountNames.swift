import Dispatch
import SyncLocks
import SyncPOSIX

/// User names for the hub's log lines, looked up off the loop thread.
///
/// A name look-up goes through NSS (`getpwuid_r`), which may ask LDAP or another network
/// service and take seconds: on the loop thread, one slow answer would stall every client,
/// and a local user refused in a loop could stall the hub at will. So the loop never looks a
/// name up: ``withName(_:now:_:)`` runs its line at once when the name is cached (for 10 minutes),
/// and otherwise hands the look-up and the line to one background queue. At most
/// ``maxPending`` look-ups wait there; past that, lines name the uid alone.
final class AccountNames: Sendable {
    /// How long a name is trusted.
    static let lifetime: Duration = .seconds(600)
    /// The most look-ups waiting at once (each is one uid).
    static let maxPending = 64
    /// The most names kept.
    static let maxCached = 4_096

    private struct State {
        var names: [UInt32: (name: String, at: ContinuousClock.Instant)] = [:]
        var pending = 0
    }

    private let state = Locked(State())
    private let queue = DispatchQueue(label: "StoreSync account names")
    private let lookUp: @Sendable (UInt32) -> String

    /// Creates the cache.
    ///
    /// - Parameter lookUp: Gives a uid's name (default: the system's, `Accounts.userName`).
    init(lookUp: @escaping @Sendable (UInt32) -> String = { Accounts.userName($0) }) {
        self.lookUp = lookUp
    }

    /// Runs `body` with `uid`'s name: at once when it is cached, else on the background queue
    /// once it is looked up (or at once with the uid as text, when too many look-ups wait).
    ///
    /// - Parameters:
    ///   - uid: The user id.
    ///   - now: The time (the core passes the loop's, so the core reads no clock; a name
    ///     looked up now is trusted for ``lifetime`` from it).
    ///   - body: What to do with the name (it runs outside any lock; it may run on another thread).
    func withName(_ uid: UInt32, now: ContinuousClock.Instant = .now, _ body: @escaping @Sendable (String) -> Void) {
        enum Next { case cached(String), busy, lookUp }
        let next = state.withLock { state -> Next in
            if let known = state.names[uid], now - known.at < Self.lifetime { return .cached(known.name) }
            guard state.pending < Self.maxPending else { return .busy }
            state.pending += 1
            return .lookUp
        }
        switch next {
        case .cached(let name):
            body(name)
        case .busy:
            body(String(uid))
        case .lookUp:
            queue.async { [self] in
                let name = lookUp(uid)
                state.withLock { state in
                    state.pending -= 1
                    if state.names.count >= Self.maxCached { state.names.removeAll() }
                    state.names[uid] = (name, now)
                }
                body(name)
            }
        }
    }
}
