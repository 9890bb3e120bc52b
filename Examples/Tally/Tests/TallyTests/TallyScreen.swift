import StoreReplica
import TallyApp

/// What a screen of the tally holds: a view reads `model.state` and `model.linkState`, and its
/// button calls `addCoffee()`.
@MainActor
final class TallyScreen {
    /// The replica's state and link, changed on the main actor only. It is `Observable`, so a
    /// SwiftUI view that reads it is redrawn when they change.
    let model: ReplicaModel<Tally>

    /// Shows a replica of the tally.
    ///
    /// - Parameter replica: An attached replica (the screen does not close it).
    init(replica: Replica<Tally>) {
        model = ReplicaModel(replica)
    }

    /// The coffee button: one more coffee, sent to the hub.
    ///
    /// - Returns: The seq the hub gave the action, once it is applied here.
    /// - Throws: ``ReplicaError`` when the hub refuses the action or the link is gone.
    func addCoffee() async throws(ReplicaError) -> UInt64 {
        try await model.dispatch(.add(name: "coffee", amount: 1))
    }
}
