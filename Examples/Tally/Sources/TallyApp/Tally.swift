import Foundation
import SyncCore

/// A shared tally: named counters that every process sees alike.
///
/// The whole app: a Codable state, a tagged action enum and a pure reducer. The wire codec
/// comes from `CodableSyncApp`; actions travel as `{"type":"add","name":"coffee","amount":2}`.
public struct Tally: CodableSyncApp {
    /// The counters by name, and when the tally was last reset (a time chosen by the
    /// dispatching process and carried in the action, never read by the reducer).
    public struct State: Codable, Equatable, Sendable {
        /// The counters.
        public var counts: [String: Int] = [:]
        /// Seconds since 1970 of the last reset, as the resetting process saw its clock.
        public var resetAt: Double?

        /// An empty tally.
        public init() {}
    }

    /// What can happen to a tally.
    public enum Action: TaggedEnumCodable, Equatable, Sendable {
        /// Adds `amount` (may be negative) to a counter, creating it at 0.
        case add(name: String, amount: Int)
        /// Removes every counter; `at` is the dispatcher's clock.
        case reset(at: Double)
    }

    /// Why an action is refused.
    public enum Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// A counter name must not be empty.
        case emptyName

        /// What to do.
        public var description: String { "a counter needs a name: add NAME [AMOUNT]" }
    }

    /// Creates the app.
    public init() {}

    /// `tally`.
    public static let name = "tally"
    /// `1`.
    public static let version = "1"
    /// One line for listings.
    public static let summary = "named counters shared by every process"
    /// The CLI shorthand.
    public static let commandHelp = """
        add NAME [AMOUNT]            add AMOUNT (default 1) to counter NAME
        reset                        remove every counter (this process's clock goes in the action)
        {"type":…}                   any wire action as JSON
        """

    /// No counters.
    public var initialState: State { State() }

    /// Applies an action; refuses an empty counter name before changing anything.
    ///
    /// - Parameters:
    ///   - state: The state.
    ///   - action: The action.
    /// - Throws: ``Failure/emptyName``.
    public func reduce(into state: inout State, action: Action) throws(Failure) {
        switch action {
        case .add(let name, let amount):
            guard !name.isEmpty else { throw .emptyName }
            state.counts[name, default: 0] += amount
        case .reset(let at):
            state.counts = [:]
            state.resetAt = at
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
