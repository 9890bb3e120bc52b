// BEGIN docs/YOUR-APP.md tally cases example
import SyncCore

extension Tally.Action {
    /// The cases with their constructors: decoding builds each action straight from its
    /// members, without `Decoder` containers (each entry is checked against Codable once).
    public static let taggedCases = TaggedCases<Tally.Action>(
        .case("add", Tally.Action.add, "name", "amount"),
        .case("reset", Tally.Action.reset, "at")
    )
}
// END docs/YOUR-APP.md tally cases example
