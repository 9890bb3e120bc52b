/// An app that replaces an earlier version of itself, and says how a state moves from it.
///
/// A new version of a reducer (a field added, a case renamed, an action split) has a new
/// fingerprint. Conform the new version to `UpgradingApp`, name the version it replaces as
/// ``Previous``, and write ``migrate(_:)``: the state of the previous version in, the state of
/// this one out. Chains compose: version 3 names version 2 as its previous, which names
/// version 1, and a binary carries the whole chain (``SyncApp/versions``).
///
///     struct TodosV2: UpgradingApp {
///         var previous: TodosV1 { TodosV1() }
///         func migrate(_ old: TodosV1.State) throws(MigrationError) -> State {
///             State(todos: old.todos.map { Todo(id: $0.id, title: $0.title, due: nil) })
///         }
///         …
///     }
///
/// A migration is pure and deterministic, under the same rule as a reducer: no clock, no
/// randomness, no I/O. Every process that migrates a state gets the same state, and the
/// digests prove it. It works on typed states: a ``CodableSyncApp`` never sees JSON.
/// `StoreSyncTesting`'s `MigrationCheck` asserts a migration: the exact state before and
/// after, and the digest.
public protocol UpgradingApp: SyncApp {
    /// The version this one replaces (itself an `UpgradingApp` when the chain is longer).
    associatedtype Previous: SyncApp

    /// The previous version, as this binary carries it.
    var previous: Previous { get }

    /// Moves a state of the previous version to this version.
    ///
    /// - Parameter old: A state of ``Previous``.
    /// - Returns: The same state, in this version's shape.
    /// - Throws: ``MigrationError`` when the state cannot be carried over; the upgrade is then
    ///   refused with its message and nothing changes.
    func migrate(_ old: Previous.State) throws(MigrationError) -> State
}

extension UpgradingApp {
    /// The previous version's chain, then this version.
    public var versions: AppVersionChain { previous.versions.appending(self) }
}

/// Why a state could not be migrated to a newer version of its app.
public struct MigrationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What was wrong, and where possible what to do.
    public let message: String

    /// Creates an error.
    ///
    /// - Parameter message: What was wrong, and where possible what to do.
    public init(_ message: String) { self.message = message }

    /// The message.
    public var description: String { message }
}

/// The versions of an app a binary carries, oldest first, and how a state, in its JSON form,
/// moves from any of them to any later one.
///
/// What a hub uses to recover a history of an older version, and to upgrade it: it holds
/// states as JSON, whichever version they are of, so the chain's steps decode, migrate and
/// encode. Built by ``SyncApp/versions``.
public struct AppVersionChain: Sendable {
    /// One version: its fingerprint, and the step from the version before it.
    private struct Version: Sendable {
        let fingerprint: String
        /// The version itself, as this binary carries it.
        let app: any SyncApp
        /// Decodes a state of the version before, migrates it, and encodes it in this one
        /// (`nil` for the first version).
        let step: (@Sendable (JSON) throws(MigrationError) -> JSON)?
        /// Checks that a JSON value is a state of this version.
        let check: @Sendable (JSON) throws(AppCodingError) -> Void
    }

    private var chain: [Version]

    /// A chain of one version.
    ///
    /// - Parameter app: The app.
    public init<App: SyncApp>(_ app: App) {
        chain = [Version(fingerprint: App.fingerprint, app: app, step: nil,
                         check: { json throws(AppCodingError) in _ = try app.decodeState(json) })]
    }

    /// This chain, then `app`, which replaces its newest version.
    ///
    /// - Parameter app: The newer version.
    /// - Returns: The longer chain.
    func appending<App: UpgradingApp>(_ app: App) -> AppVersionChain {
        var longer = self
        let previous = app.previous
        let from = App.Previous.fingerprint, to = App.fingerprint
        longer.chain.append(Version(
            fingerprint: to, app: app,
            step: { json throws(MigrationError) in
                let old: App.Previous.State
                do throws(AppCodingError) {
                    old = try previous.decodeState(json)
                } catch {
                    throw MigrationError("the state is not a state of \(from): \(error.message)")
                }
                let new: App.State
                do throws(MigrationError) {
                    new = try app.migrate(old)
                } catch {
                    throw MigrationError("the migration from \(from) to \(to) failed: \(error.message)")
                }
                return app.encodeState(new)
            },
            check: { json throws(AppCodingError) in _ = try app.decodeState(json) }))
        return longer
    }

    /// The fingerprints, oldest first; the last is the newest version.
    public var fingerprints: [String] { chain.map(\.fingerprint) }

    /// The newest version's fingerprint.
    public var newest: String { chain[chain.count - 1].fingerprint }

    /// The version of this fingerprint, as this binary carries it (a hub runs it on a history
    /// of that version, until the history is upgraded).
    ///
    /// - Parameter fingerprint: `name@version`.
    /// - Returns: The app, or `nil` when the chain has no such version.
    public func app(_ fingerprint: String) -> (any SyncApp)? {
        chain.first { $0.fingerprint == fingerprint }?.app
    }

    /// Whether the chain has a version of this fingerprint.
    ///
    /// - Parameter fingerprint: `name@version`.
    /// - Returns: `true` when it does.
    public func contains(_ fingerprint: String) -> Bool { chain.contains { $0.fingerprint == fingerprint } }

    /// The fingerprint of the version that `fingerprint` replaces, if the chain has both.
    ///
    /// - Parameter fingerprint: `name@version`.
    /// - Returns: The previous version's fingerprint, or `nil` for the oldest or an unknown one.
    public func previous(of fingerprint: String) -> String? {
        guard let index = chain.firstIndex(where: { $0.fingerprint == fingerprint }), index > 0 else { return nil }
        return chain[index - 1].fingerprint
    }

    /// Moves a state along the chain, one version at a time.
    ///
    /// - Parameters:
    ///   - state: A state of version `from`, in its JSON form.
    ///   - from: Its version's fingerprint.
    ///   - to: The version wanted (default: the newest).
    /// - Returns: The state of version `to`, in its JSON form (the same value when `from` is `to`).
    /// - Throws: ``MigrationError`` when either version is not in the chain, `to` is older than
    ///   `from` (a migration goes forward only), the state is not of `from`, or a step failed.
    public func migrate(_ state: JSON, from: String, to: String? = nil) throws(MigrationError) -> JSON {
        let target = to ?? newest
        guard let start = chain.firstIndex(where: { $0.fingerprint == from }) else {
            throw MigrationError("\(from) is not a version this binary carries (\(fingerprints.joined(separator: ", "))): no path from it")
        }
        guard let end = chain.firstIndex(where: { $0.fingerprint == target }) else {
            throw MigrationError("\(target) is not a version this binary carries (\(fingerprints.joined(separator: ", ")))")
        }
        guard start <= end else {
            throw MigrationError("\(target) is older than \(from): a migration only goes forward; to go back, restore a backup taken before the upgrade")
        }
        if start == end {
            do throws(AppCodingError) {
                try chain[start].check(state)
            } catch {
                throw MigrationError("the state is not a state of \(from): \(error.message)")
            }
            return state
        }
        var json = state
        for version in chain[(start + 1)...end] {
            guard let step = version.step else { continue }
            json = try step(json)
        }
        return json
    }
}
