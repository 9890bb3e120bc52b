import SyncCore
import SyncLocks

/// A replica's per-action path compiled for an app where its type is written, kept for the
/// replicas that are attached where the app is only a generic parameter.
///
/// The `attach` functions are `@inlinable`: called with a concrete app, the reader's path
/// (decode, apply, events) is compiled for that app in the caller's module. Code that attaches
/// from inside a generic function of another module (a command-line tool that takes its apps
/// as `any SyncApp`, such as `ReplicaCommand`) gets that path as generic code instead, which
/// looks up type metadata at run time for every action. Registering the app once, where its
/// type is known, makes every later `attach` for it use the compiled path:
///
/// ```swift
/// ReplicaSpecialization.register(TodosApp.self)   // in the executable's main.swift
/// await ReplicaCommand.main(apps: [TodosApp()])
/// ```
///
/// Registering changes no behaviour, only speed; an app never registered works the same.
public enum ReplicaSpecialization {
    /// Compiles the reader's path for `App` here and keeps it for every later `attach` of it.
    ///
    /// - Parameter type: The app's type.
    @inlinable
    public static func register<App: SyncApp>(_ type: App.Type) {
        store(Replica<App>.specializedFrameHandler, for: App.self)
    }

    /// Keeps a frame handler for the app type `type`.
    @usableFromInline
    static func store(_ handler: any Sendable, for type: Any.Type) {
        handlers.set(handler, for: type)
    }

    /// The frame handler registered for `App`, if any (looked up once per attach, never per action).
    ///
    /// - Parameter type: The app's type.
    /// - Returns: The handler, or `nil` when `App` was never registered.
    @usableFromInline
    static func handler<App: SyncApp>(for type: App.Type) -> Replica<App>.FrameHandler? {
        handlers.value(for: App.self) as? Replica<App>.FrameHandler
    }

    /// Registered handlers by app type; each is a `Replica<App>.FrameHandler` for its key's `App`.
    private static let handlers = TypeKeyed()
}
