// BEGIN docs/YOUR-APP.md tally commands example
import Foundation
import SyncCore

extension Tally {
    /// One line saying what the app is, for `tally-hub --list-apps`.
    public static let summary = "named counters shared by every process"

    /// The shorthand `command(_:)` reads, for `tally-cli --help` and `:help` in `tally-cli attach`.
    public static let commandHelp = """
        add NAME [AMOUNT]            add AMOUNT (default 1) to counter NAME
        reset                        remove every counter (this process's clock goes in the action)
        {"type":…}                   any wire action as JSON
        """

    /// Why the reducer refused an action: the message the dispatching process gets.
    ///
    /// - Parameter failure: What the reducer threw.
    /// - Returns: One sentence saying what was wrong and what to do.
    public func describe(_ failure: Failure) -> String {
        switch failure {
        case .emptyName: "a counter needs a name: add NAME [AMOUNT]"
        case .outOfRange: "a count must stay within ±(2^53 − 1), which JSON carries exactly"
        }
    }

    /// `add NAME [AMOUNT]`, `reset`, or a JSON action.
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
        case "reset"?:
            // Time is chosen here, in the dispatching process, and carried in the action.
            return .action(encodeAction(.reset(at: Double(Int(Date.now.timeIntervalSince1970)))))
        default:
            return .action(try AppCommandParsing.jsonObject(line))
        }
    }
}
// END docs/YOUR-APP.md tally commands example
