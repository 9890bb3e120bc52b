@testable import StoreHub
@testable import StoreReplica
import SyncCore
import Testing

/// `DriftApp` is registered here and nowhere else (its salt is the instance's, not the type's,
/// so the other suites that use it behave the same either way).
@Suite("Specialization: an app's per-action paths registered where its type is written")
struct SpecializationTests {
    /// A hub and a replica made inside a generic function, as the command-line tools make them.
    private func roundTrip<App: SyncApp>(_ app: App, actions: [App.Action]) async throws -> JSON {
        let hub = try InProcessHub(app)
        defer { Task { try? await hub.stop() } }
        let replica = try Replica.attach(app: app, socketPath: hub.fixture.socket, reconnect: .never)
        defer { replica.close() }
        for action in actions { _ = try await replica.dispatch(action) }
        return app.encodeState(replica.store.state)
    }

    @Test("an app registered with both registries is found by its type; hubs and replicas made from generic code work the same")
    func registered() async throws {
        #expect(ReplicaSpecialization.handler(for: DriftApp.self) == nil)
        #expect(HubSpecialization.engine(for: DriftApp(salt: 0), checkDeterminism: false) == nil)
        let before = try await roundTrip(DriftApp(salt: 0), actions: [1, 2, 39])
        ReplicaSpecialization.register(DriftApp.self)
        HubSpecialization.register(DriftApp.self)
        #expect(ReplicaSpecialization.handler(for: DriftApp.self) != nil)
        let engine = try #require(HubSpecialization.engine(for: DriftApp(salt: 0), checkDeterminism: false))
        #expect(engine.appName == "drift")
        // Another app's type finds nothing under this one's registration.
        #expect(ReplicaSpecialization.handler(for: RandomPickApp.self) == nil)
        let after = try await roundTrip(DriftApp(salt: 0), actions: [1, 2, 39])
        #expect(before == 42 && after == 42)
    }
}
