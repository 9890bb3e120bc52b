import SyncCore

/// The app's work for the hub, as closures over two copies of the state: the **root** state
/// (every applied action, in log order) and the **speculative** state (the root plus the
/// proposals not yet in the log), against which new dispatches are validated.
///
/// A proposal never touches the root: when the log appends it, the applier applies it there
/// (or, when every proposal made since the two were equal is in the log in the same order,
/// adopts the speculative state in O(1)); when the log refuses it, the speculative state is
/// reset to the root in O(1) (value types share storage until written). So a failed commit
/// never leaves the root state ahead of the log.
///
/// The loop itself is not generic. The closures are built by `Hub`'s `@inlinable`
/// initialiser, so they are compiled specialised for the concrete app in the module that
/// creates the hub: decoding and applying an action costs no generic look-ups per frame.
/// Used on the event-loop thread only (the box is not locked).
@usableFromInline
struct HubEngine: Sendable {
    /// What happened to an action.
    @usableFromInline
    enum Outcome: Sendable {
        /// Decoded and applied.
        case applied
        /// Not an action of this app (`bad-action`).
        case badAction(String)
        /// The reducer refused it (`rejected`).
        case rejected(String)
    }

    /// Which copy of the state.
    @usableFromInline
    enum Copy: Sendable {
        case root, speculative
    }

    /// The app's name (`hello.app` must equal it).
    @usableFromInline let appName: String
    /// The app's fingerprint.
    @usableFromInline let fingerprint: String
    /// The versions the app's binary carries, ending with this one (``SyncApp/versions``).
    @usableFromInline let chain: AppVersionChain
    /// Decodes a dispatched action and applies it to the speculative state (`--check-determinism`
    /// applies).
    @usableFromInline let propose: @Sendable (WireAction) -> Outcome
    /// Decodes a logged action and applies it to the root state: never `--check-determinism`ed
    /// (the record was accepted once, and refusing it now would keep the hub from going on).
    /// Another hub's record arrives only while nothing of this hub's is in flight, or after
    /// the root was kept aside.
    @usableFromInline let apply: @Sendable (WireAction) -> Outcome
    /// Makes the root state the speculative one (every proposal was appended, in order).
    @usableFromInline let adopt: @Sendable () -> Void
    /// Makes the speculative state the root one again (proposals refused or voided).
    @usableFromInline let reset: @Sendable () -> Void
    /// A copy of the state as JSON.
    @usableFromInline let snapshot: @Sendable (Copy) -> JSON
    /// Replaces both states with a decoded one (recovery).
    @usableFromInline let restore: @Sendable (JSON) -> AppCodingError?
    /// Whether a state's JSON decodes with the app (without installing it).
    @usableFromInline let validate: @Sendable (JSON) -> AppCodingError?
    /// The app's initial state as JSON (a history without a snapshot starts from it).
    @usableFromInline let initialState: JSON
    /// Whether proposals may be refused by the log: then the root state is kept aside while
    /// proposals are in flight. `false` (a memory log) keeps a single copy.
    @usableFromInline let setKeepsRoot: @Sendable (Bool) -> Void

    /// The two states, owned by the event-loop thread.
    ///
    /// `root` is `nil` while it equals `speculative` (nothing in flight): then one copy is
    /// kept. The first proposal after that keeps the root aside (one copy-on-write share) when
    /// proposals may be refused; a log that never refuses (memory) keeps one copy throughout.
    @usableFromInline
    final class States<State>: @unchecked Sendable {
        // @unchecked: the hub touches these only from its event-loop thread (and from `Hub.init`
        // before that thread starts); the box exists so the engine's closures can share them.
        // Exclusivity unchecked (each field below): see `HubLoop`'s note; the reducer gets
        // `speculative` or `root` inout and cannot reach this box (the engine's closures hold
        // it, the app does not).
        // Unchecked: applied to by every record; the reducer gets it inout and holds no reference to the engine, the only code that reaches it.
        @exclusivity(unchecked) @usableFromInline var root: State?
        // Unchecked: reduced by every proposal; the reducer gets it inout and holds no reference to the engine, the only code that reaches it.
        @exclusivity(unchecked) @usableFromInline var speculative: State
        // Unchecked: read by every proposal and record; only assigned.
        @exclusivity(unchecked) @usableFromInline var keepsRoot = true
        @usableFromInline init(_ state: State) {
            speculative = state
        }
    }

    @inlinable
    init<App: SyncApp>(app: App, checkDeterminism: Bool = false) {
        let states = States(app.initialState)
        appName = App.name
        fingerprint = App.fingerprint
        chain = app.versions
        propose = { wire in
            let action: App.Action
            do throws(AppCodingError) {
                action = try Self.decode(wire, app: app)
            } catch {
                return .badAction(error.message)
            }
            if checkDeterminism, let refusal = Self.determinismRefusal(app, action: action, json: wire.json, state: states.speculative) {
                return .rejected(refusal)
            }
            // The applied state is kept aside before the first speculative change (a share of
            // its storage; the reducer's first write then copies what it changes).
            if states.keepsRoot, states.root == nil { states.root = states.speculative }
            do throws(App.Failure) {
                try app.reduce(into: &states.speculative, action: action)
            } catch {
                return .rejected(app.describe(error))
            }
            return .applied
        }
        apply = { wire in
            let action: App.Action
            do throws(AppCodingError) {
                action = try Self.decode(wire, app: app)
            } catch {
                return .badAction(error.message)
            }
            do throws(App.Failure) {
                if states.root != nil {
                    try app.reduce(into: &states.root!, action: action)
                } else {
                    try app.reduce(into: &states.speculative, action: action)
                }
            } catch {
                return .rejected(app.describe(error))
            }
            return .applied
        }
        adopt = { states.root = nil }
        reset = {
            if let root = states.root { states.speculative = root }
            states.root = nil
        }
        snapshot = { copy in app.encodeState(copy == .root ? (states.root ?? states.speculative) : states.speculative) }
        setKeepsRoot = { states.keepsRoot = $0 }
        validate = { json in
            do throws(AppCodingError) {
                _ = try app.decodeState(json)
                return nil
            } catch {
                return error
            }
        }
        initialState = app.encodeState(app.initialState)
        restore = { json in
            do throws(AppCodingError) {
                states.speculative = try app.decodeState(json)
                states.root = nil
                return nil
            } catch {
                return error
            }
        }
    }

    /// Decodes an action: from its canonical bytes when it is held as bytes and the app reads
    /// them (``SyncApp/decodeAction(canonical:maxDepth:)``), else from its parsed value.
    @inlinable
    static func decode<App: SyncApp>(_ wire: WireAction, app: App) throws(AppCodingError) -> App.Action {
        if let decoded = wire.withCanonicalBytes({ app.decodeAction(canonical: $0, maxDepth: 511) }), let action = decoded {
            return action
        }
        return try app.decodeAction(wire.json)
    }

    /// `--check-determinism`: applies the action to two copies of the state (the second
    /// decoded again from the wire form, as a replica receives it) and compares their digests.
    ///
    /// - Returns: Why the action is refused, or `nil` when both copies agree.
    @inlinable
    static func determinismRefusal<App: SyncApp>(_ app: App, action: App.Action, json: JSON, state: App.State) -> String? {
        var first = state, second = state
        let again: App.Action
        do throws(AppCodingError) {
            again = try app.decodeAction(json)
        } catch {
            return "the action does not decode twice alike (\(error.message)); --check-determinism refuses it"
        }
        let firstAccepted: Bool, secondAccepted: Bool
        do throws(App.Failure) { try app.reduce(into: &first, action: action); firstAccepted = true } catch { firstAccepted = false }
        do throws(App.Failure) { try app.reduce(into: &second, action: again); secondAccepted = true } catch { secondAccepted = false }
        guard firstAccepted == secondAccepted, !firstAccepted || app.digest(of: first) == app.digest(of: second) else {
            return "the reducer is not deterministic: applied twice to the same state, this action gave different results (a clock, a random value or a global read inside the reducer?); --check-determinism refuses it so that replicas cannot diverge. Choose such values in the dispatching process and carry them in the action"
        }
        return nil
    }
}
