import Foundation
import SyncCore

extension TallyV2.Action {
    /// The cases with their constructors: decoding builds each action straight from its
    /// members, without `Decoder` containers (each entry is checked against Codable once).
    public static let taggedCases = TaggedCases<TallyV2.Action>(
        .case("add", TallyV2.Action.add, "name", "amount"),
        .case("reset", TallyV2.Action.reset, "at"),
        .case("setGoal", TallyV2.Action.setGoal, "name", "goal")
    )
}

extension TallyV2 {
    /// One line saying what the app is, for `tally-hub --list-apps`.
    public static let summary = "named counters shared by every process, each with an optional goal"

    /// The shorthand `command(_:)` reads, for `tally-cli --help` and `:help` in `tally-cli attach`.
    public static let commandHelp = """
        add NAME [AMOUNT]            add AMOUNT (default 1) to counter NAME
        goal NAME [GOAL]             set counter NAME's goal (no GOAL: clear it)
        reset                        remove every counter (this process's clock goes in the action)
        {"type":…}                   any wire action as JSON
        """

    /// Why the reducer refused an action: the message the dispatching process gets.
    ///
    /// - Parameter failure: What the reducer threw.
    /// - Returns: One sentence saying what was wrong and what to do.
    public func describe(_ failure: Failure) -> String {
        switch failure {
        case .emptyName: "a counter needs a name: add NAME [AMOUNT], goal NAME [GOAL]"
        case .outOfRange: "a count must stay within ±(2^53 − 1), which JSON carries exactly"
        case .badGoal: "a goal is a whole number from 1 to 2^53 − 1"
        }
    }

    /// `add NAME [AMOUNT]`, `goal NAME [GOAL]`, `reset`, or a JSON action.
    ///
    /// - Parameter line: The typed line.
    /// - Returns: The action's wire form.
    /// - Throws: ``AppCodingError`` for anything else.
    public func command(_ line: String) throws(AppCodingError) -> AppCommand<State, Action> {
        let words = line.split(separator: " ").map(String.init)
        switch words.first {
        case "add"?:
            guard words.count == 2 || words.count == 3, let amount = words.count == 3 ? Int(words[2]) : 1 else {
                throw AppCodingError("usage: add NAME [AMOUNT]")
            }
            return .action(encodeAction(.add(name: words[1], amount: amount)))
        case "goal"?:
            guard words.count == 2 || words.count == 3 else { throw AppCodingError("usage: goal NAME [GOAL]") }
            guard words.count == 3 else { return .action(encodeAction(.setGoal(name: words[1], goal: nil))) }
            guard let goal = Int(words[2]) else { throw AppCodingError("usage: goal NAME [GOAL]") }
            return .action(encodeAction(.setGoal(name: words[1], goal: goal)))
        case "reset"?:
            // Time is chosen here, in the dispatching process, and carried in the action.
            return .action(encodeAction(.reset(at: Double(Int(Date.now.timeIntervalSince1970)))))
        default:
            return .action(try AppCommandParsing.jsonObject(line))
        }
    }
}
