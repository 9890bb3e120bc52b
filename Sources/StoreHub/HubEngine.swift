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
    /// The root store's state as JSON.
    @usableFromInline let snapshot: @Sendable () -> JSON
    /// Replaces the root store's state with a decoded snapshot (recovery and rollback).
    @usableFromInline let restore: @Sendable (JSON) -> AppCodingError?
    /// The app's initial state as JSON (a history without a snapshot starts from it).
    @usableFromInline let initialState: JSON

    @inlinable
    init<App: SyncApp>(app: App) {
        let store = Store(initialState: app.initialState, reducer: app)
        appName = App.name
        fingerprint = App.fingerprint
        apply = { json in
            let action: App.Action
            do throws(AppCodingError) {
                action = try app.decodeAction(json)
            } catch {
                return .badAction(error.message)
            }
            do throws(App.Failure) {
                try store.apply(action)
            } catch {
                return .rejected(app.describe(error))
            }
            return .applied
        }
        snapshot = { app.encodeState(store.state) }
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
}
