import SyncCore

/// Asserts a migration from one version of an app to the next, as a test would.
///
/// ``check(_:from:expect:digest:)`` runs the app's `migrate` on a state of the previous version
/// and compares the result with the state the test expects, exactly, and with the digest
/// every process will compare, when given. It also checks what a hub relies on: the migration
/// gives the same state twice (it is deterministic), the state survives the wire (encoded and
/// decoded, its digest is the same), and the app's ``AppVersionChain`` (the JSON path a hub
/// takes) gives the same state as the typed migration.
///
///     #expect(MigrationCheck.check(TodosV2(), from: old, expect: new, digest: "5f0c…") == nil)
public enum MigrationCheck {
    /// What was wrong with a migration.
    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// One sentence: what differed, with both sides.
        public let message: String

        /// One line for a test failure.
        public var description: String { message }
    }

    /// Migrates `old` with `app` and checks the result.
    ///
    /// - Parameters:
    ///   - app: The newer version.
    ///   - old: A state of the version it replaces.
    ///   - expected: The exact state the migration must give.
    ///   - digest: The digest the migrated state must have (as `status` and checkpoints show
    ///     it), or `nil` not to check it.
    /// - Returns: The first thing wrong, or `nil` when the migration gave exactly `expected`.
    public static func check<App: UpgradingApp>(_ app: App, from old: App.Previous.State, expect expected: App.State,
                                                digest: String? = nil) -> Failure? where App.State: Equatable {
        let migrated: App.State
        do throws(MigrationError) {
            migrated = try app.migrate(old)
        } catch {
            return Failure(message: "the migration from \(App.Previous.fingerprint) to \(App.fingerprint) threw: \(error.message)")
        }
        let shown = app.encodeState(migrated).canonicalString
        guard migrated == expected else {
            return Failure(message: "the migration gave \(shown), not \(app.encodeState(expected).canonicalString)")
        }
        if let digest, app.digest(of: migrated) != digest {
            return Failure(message: "the migrated state's digest is \(app.digest(of: migrated)), not \(digest): \(shown)")
        }
        do throws(MigrationError) {
            let again = try app.migrate(old)
            guard app.digest(of: again) == app.digest(of: migrated) else {
                return Failure(message: "the migration is not deterministic: it gave \(shown), then \(app.encodeState(again).canonicalString) for the same state (a clock, randomness or I/O in it?)")
            }
        } catch {
            return Failure(message: "the migration threw the second time, not the first: \(error.message) (a clock, randomness or I/O in it?)")
        }
        do throws(AppCodingError) {
            let received = try app.decodeState(app.encodeState(migrated))
            guard app.digest(of: received) == app.digest(of: migrated) else {
                return Failure(message: "the migrated state changes when encoded and decoded: \(shown) vs \(app.encodeState(received).canonicalString)")
            }
        } catch {
            return Failure(message: "the migrated state does not decode from its own encoding: \(error.message)")
        }
        do throws(MigrationError) {
            let viaChain = try app.versions.migrate(app.previous.encodeState(old), from: App.Previous.fingerprint, to: App.fingerprint)
            guard Digest.of(viaChain) == app.digest(of: migrated) else {
                return Failure(message: "the version chain (the JSON path a hub takes) gave \(viaChain.canonicalString), not \(shown)")
            }
        } catch {
            return Failure(message: "the version chain (the JSON path a hub takes) failed: \(error.message)")
        }
        return nil
    }
}
