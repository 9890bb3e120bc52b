import SyncCore
import SyncLocks

/// A hub's per-action engine compiled for an app where its type is written, kept for the hubs
/// that are made where the app is only a generic parameter.
///
/// ``Hub/init(app:configuration:)`` is `@inlinable`: called with a concrete app, the engine
/// that decodes, validates and applies every action is compiled for that app in the caller's
/// module. A hub made from inside a generic function of another module (a command-line tool
/// that takes its apps as `any SyncApp`, such as `HubCommand`) gets that engine as generic code
/// instead, which looks up type metadata at run time for every action. Registering the app
/// once, where its type is known, makes every later hub of it use the compiled engine:
///
/// ```swift
/// HubSpecialization.register(TodosApp.self)   // in the executable's main.swift
/// HubCommand.main(apps: [TodosApp()])
/// ```
///
/// Registering changes no behaviour, only speed; an app never registered works the same.
public enum HubSpecialization {
    /// Compiles the hub's engine for `App` here and keeps it for every later hub of it.
    ///
    /// - Parameter type: The app's type.
    @inlinable
    public static func register<App: SyncApp>(_ type: App.Type) {
        let make: @Sendable (App, Bool) -> HubEngine = { app, checkDeterminism in
            HubEngine(app: app, checkDeterminism: checkDeterminism)
        }
        store(make, for: App.self)
    }

    /// Keeps an engine factory for the app type `type`.
    @usableFromInline
    static func store(_ make: any Sendable, for type: Any.Type) {
        factories.set(make, for: type)
    }

    /// The engine for `app` made by the factory registered for its type, if any (once per hub,
    /// never per action).
    ///
    /// - Parameters:
    ///   - app: The app.
    ///   - checkDeterminism: Whether the engine checks the reducer's determinism.
    /// - Returns: The engine, or `nil` when `App` was never registered.
    @usableFromInline
    static func engine<App: SyncApp>(for app: App, checkDeterminism: Bool) -> HubEngine? {
        let make = factories.value(for: App.self) as? @Sendable (App, Bool) -> HubEngine
        return make?(app, checkDeterminism)
    }

    /// Registered factories by app type; each is a `@Sendable (App, Bool) -> HubEngine` for its key's `App`.
    private static let factories = TypeKeyed()
}
