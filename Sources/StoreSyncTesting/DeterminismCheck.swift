import SyncCore

/// Catches a reducer that is not deterministic before it diverges replicas in production.
///
/// Every process applies every action to its own copy of the state, so a reducer that reads
/// the clock, a random source, a global or anything else outside `(state, action)` leaves the
/// copies different (seed 004's `randomElement()` is the classic case). This check applies each
/// action to two copies — one kept in memory, one that went through the wire (the state
/// encoded and decoded, the action encoded and decoded, as a replica receives them) — and
/// compares their digests after every action.
public enum DeterminismCheck {
    /// Where two copies first differed.
    public struct Divergence: Sendable, Equatable, CustomStringConvertible {
        /// The index of the action after which the copies differed (0-based; -1: the initial
        /// state itself does not survive the wire).
        public let index: Int
        /// The action's wire form.
        public let action: JSON
        /// What differed.
        public let reason: String

        /// One line for a test failure.
        public var description: String { "after action #\(index) \(action.canonicalString): \(reason)" }
    }

    /// Applies `actions` in order to two copies of `initialState` and compares them.
    ///
    /// - Parameters:
    ///   - app: The app.
    ///   - actions: The actions (a generator's output, a recorded session, …).
    ///   - initialState: Where to start; `nil` uses the app's initial state.
    /// - Returns: The first divergence, or `nil` when the copies agreed after every action.
    public static func check<App: SyncApp>(_ app: App, actions: [App.Action],
                                           from initialState: App.State? = nil) -> Divergence? {
        var local = initialState ?? app.initialState
        var wire: App.State
        do throws(AppCodingError) {
            wire = try app.decodeState(app.encodeState(local))
        } catch {
            return Divergence(index: -1, action: .null,
                              reason: "the initial state does not decode from its own encoding (before any action): \(error.message)")
        }
        if app.digest(of: local) != app.digest(of: wire) {
            return Divergence(index: -1, action: .null,
                              reason: "the initial state changes when encoded and decoded (before any action): \(app.encodeState(local).canonicalString) vs \(app.encodeState(wire).canonicalString)")
        }
        for (index, action) in actions.enumerated() {
            let json = app.encodeAction(action)
            let received: App.Action
            do throws(AppCodingError) {
                received = try app.decodeAction(json)
            } catch {
                return Divergence(index: index, action: json, reason: "the action does not decode from its own wire form: \(error.message)")
            }
            let localOutcome = apply(app, action, to: &local)
            let wireOutcome = apply(app, received, to: &wire)
            guard localOutcome == wireOutcome else {
                return Divergence(index: index, action: json,
                                  reason: "one copy \(localOutcome ? "accepted" : "refused") it, the other \(wireOutcome ? "accepted" : "refused") it")
            }
            let (a, b) = (app.digest(of: local), app.digest(of: wire))
            if a != b {
                return Divergence(index: index, action: json, reason: "digests \(a) and \(b): \(app.encodeState(local).canonicalString) vs \(app.encodeState(wire).canonicalString)")
            }
        }
        return nil
    }

    private static func apply<App: SyncApp>(_ app: App, _ action: App.Action, to state: inout App.State) -> Bool {
        do throws(App.Failure) {
            try app.reduce(into: &state, action: action)
            return true
        } catch {
            return false
        }
    }
}
