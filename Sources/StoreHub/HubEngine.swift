import SyncCore

/// Everything the hub's event loop needs from the app, as closures over the root store.
///
/// The loop itself is not generic. The closures are built by `Hub`'s `@inlinable`
/// initialiser, so they are compiled specialised for the concrete app in the module that
/// creates the hub: decoding and applying an action costs no generic look-ups per frame.
@usableFromInline
struct HubEngine: Sendable {
    /// What happened to a dispatched action.
    @usableFromInline
    enum Outcome: Sendable {
        /// Decoded and applied to the root store: it may be sequenced.
        case applied
        /// Not an action of this app (`bad-action`).
        case badAction(String)
        /// The reducer refused it (`rejected`).
        case rejected(String)
    }

    /// The app's name (`hello.app` must equal it).
    @usableFromInline let appName: String
    /// The app's fingerprint.
    @usableFromInline let fingerprint: String
    /// Decodes a wire action and applies it to the root store.
    @usableFromInline let apply: @Sendable (JSON) -> Outcome
    /// Applies a recovered journal record: never `--check-determinism`ed (the record was
    /// accepted once, and refusing it now would keep the hub from starting).
    @usableFromInline let replay: @Sendable (JSON) -> Outcome
    /// The root store's state as JSON.
    @usableFromInline let snapshot: @Sendable () -> JSON
    /// Replaces the root store's state with a decoded snapshot (recovery and rollback).
    @usableFromInline let restore: @Sendable (JSON) -> AppCodingError?
    /// Whether a state's JSON decodes with the app (without installing it).
    @usableFromInline let validate: @Sendable (JSON) -> AppCodingError?
    /// The app's initial state as JSON (a history without a snapshot starts from it).
    @usableFromInline let initialState: JSON

    @inlinable
    init<App: SyncApp>(app: App, checkDeterminism: Bool = false) {
        let store = Store(initialState: app.initialState, reducer: app)
        appName = App.name
        fingerprint = App.fingerprint
        let applyOnce: @Sendable (JSON, Bool) -> Outcome = { json, check in
            let action: App.Action
            do throws(AppCodingError) {
                action = try app.decodeAction(json)
            } catch {
                return .badAction(error.message)
            }
            if check, let refusal = Self.determinismRefusal(app, action: action, json: json, state: store.unobservedState) {
                return .rejected(refusal)
            }
            do throws(App.Failure) {
                try store.apply(action)
            } catch {
                return .rejected(app.describe(error))
            }
            return .applied
        }
        apply = { json in applyOnce(json, checkDeterminism) }
        replay = { json in applyOnce(json, false) }
        // `unobservedState`: reading `state` would switch on Observation bookkeeping for every
        // later dispatch, and nothing observes the hub's store.
        snapshot = { app.encodeState(store.unobservedState) }
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
                store.replaceState(try app.decodeState(json))
                return nil
            } catch {
                return error
            }
        }
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
