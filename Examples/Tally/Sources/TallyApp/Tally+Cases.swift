import SyncCore

// BEGIN README tally cases example
extension Tally.Action {
    /// The cases with their constructors, so decoding builds each action straight from its
    /// members instead of through `Codable` (which checks each entry on its first use).
    public static let taggedCases = TaggedCases<Tally.Action>(
        .case("add", Tally.Action.add, "name", "amount"),
        .case("reset", Tally.Action.reset, "at")
    )
}
// END README tally cases example
