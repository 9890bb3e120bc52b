import SyncCore

/// The versions of its app a hub carries, and an engine for each: what lets it recover a
/// history of an older version, serve that version, and move the history to a newer one.
///
/// Built once per hub, never per action. The engine of the app the hub was created with is
/// the one compiled for it (``Hub/init(app:configuration:)``); the other versions get the
/// engine their type registered (``HubSpecialization``), or generic code.
@usableFromInline
struct HubVersions: Sendable {
    /// Every version, oldest first.
    @usableFromInline let chain: AppVersionChain
    /// The engine of the app the hub was created with.
    @usableFromInline let primary: HubEngine
    /// Whether engines check determinism (`--check-determinism`).
    @usableFromInline let checkDeterminism: Bool

    @usableFromInline
    init(chain: AppVersionChain, primary: HubEngine, checkDeterminism: Bool) {
        self.chain = chain
        self.primary = primary
        self.checkDeterminism = checkDeterminism
    }

    /// The fingerprints, oldest first.
    var fingerprints: [String] {
        chain.fingerprints.contains(primary.fingerprint) ? chain.fingerprints : [primary.fingerprint]
    }

    /// The newest version the hub carries.
    var newest: String { chain.fingerprints.contains(primary.fingerprint) ? chain.newest : primary.fingerprint }

    /// The engine for a version (its state is whatever it was last restored to: the caller
    /// restores the state it starts from).
    ///
    /// - Parameter fingerprint: The version.
    /// - Returns: The engine, or `nil` when the hub does not carry that version.
    func engine(for fingerprint: String) -> HubEngine? {
        if JSONKey(fingerprint) == JSONKey(primary.fingerprint) { return primary }
        guard let app = chain.app(fingerprint) else { return nil }
        return Self.make(app, checkDeterminism: checkDeterminism)
    }

    private static func make<A: SyncApp>(_ app: A, checkDeterminism: Bool) -> HubEngine {
        HubSpecialization.engine(for: app, checkDeterminism: checkDeterminism)
            ?? HubEngine(app: app, checkDeterminism: checkDeterminism)
    }

    /// Whether `newer` is a later version than `older` in the chain.
    func isNewer(_ newer: String, than older: String) -> Bool {
        let all = fingerprints
        guard let a = all.firstIndex(of: newer), let b = all.firstIndex(of: older) else { return false }
        return a > b
    }
}
