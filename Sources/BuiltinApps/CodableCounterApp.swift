import SyncCore

/// Seed 000's counter with its wire codec from `Codable` (``CodableSyncApp``): the same
/// actions, wire forms and digests as the hand-written ``CounterApp``, without its thunk or
/// shorthand commands.
///
/// It is not registered with `hubd` (it answers to the same name, `counter`); it shows what a
/// Codable app looks like and lets the tests and the benchmark compare both codecs.
public struct CodableCounterApp: CodableSyncApp {
    /// The counter's state: `{"count":…,"isIncrementing":…,"limitText":…}` on the wire.
    public struct State: Codable, Equatable, Sendable {
        /// The count.
        public var count: Int
        /// Whether `increment` counts up.
        public var isIncrementing: Bool
        /// The limit text field.
        public var limitText: String

        /// Creates a state.
        ///
        /// - Parameters:
        ///   - count: The count.
        ///   - isIncrementing: Whether `increment` counts up.
        ///   - limitText: The limit text.
        public init(count: Int = 0, isIncrementing: Bool = true, limitText: String = "") {
            self.count = count
            self.isIncrementing = isIncrementing
            self.limitText = limitText
        }
    }

    /// The counter's actions, as `{"type":"increment"}`, `{"type":"setLimitText","text":"5"}`….
    public enum Action: TaggedEnumCodable, Equatable, Sendable {
        /// Count one up.
        case increment
        /// Count one down.
        case decrement
        /// Set the direction (`value`).
        case setIncrementing(Bool)
        /// Set the limit text (`text`).
        case setLimitText(String)

        /// The cases with their constructors, for fast decoding; `value` and `text` are the
        /// members' names on the wire, as ``CounterApp`` writes them.
        public static let taggedCases = TaggedCases<Action>(
            .case("increment", .increment),
            .case("decrement", .decrement),
            .case("setIncrementing", Action.setIncrementing, "value"),
            .case("setLimitText", Action.setLimitText, "text")
        )
    }

    /// Creates the app.
    public init() {}

    /// `counter`, as ``CounterApp``.
    public static let name = "counter"
    /// `1`, as ``CounterApp``.
    public static let version = "1"
    /// One line for listings.
    public static let summary = "seed 000's counter with a Codable codec (not served by hubd)"

    /// `count 0`, counting up, no limit text.
    public var initialState: State { State() }

    /// Applies an action.
    ///
    /// - Parameters:
    ///   - state: The state.
    ///   - action: The action.
    public func reduce(into state: inout State, action: Action) {
        // Exactly CounterApp's reducer: the two must stay interchangeable on the wire.
        switch action {
        case .increment: state.count += 1
        case .decrement: state.count -= 1
        case .setIncrementing(let value):
            state.isIncrementing = value
            state.limitText = ""
        case .setLimitText(let text): state.limitText = text
        }
    }
}
