import SyncCore

/// Seed 000's counter app: a count, an increment/decrement toggle, a limit typed as text,
/// and a thunk that steps the count only within the limit.
///
/// Wire actions: `{"type":"increment"}`, `{"type":"decrement"}`,
/// `{"type":"setIncrementing","value":true}` (also clears the limit, as in the seed) and
/// `{"type":"setLimitText","text":"5"}`. State: `{"count":0,"isIncrementing":true,"limitText":""}`.
public struct CounterApp: SyncApp {
    /// The counter's state: plain values, no store inside, no `deepcopy`.
    public struct State: Sendable, Equatable {
        /// The count shown on screen.
        public var count: Int
        /// Whether "update counter" increments (`true`) or decrements.
        public var isIncrementing: Bool
        /// The limit as typed; not a number means "no limit".
        public var limitText: String

        /// Creates a state.
        ///
        /// - Parameters:
        ///   - count: The count.
        ///   - isIncrementing: The toggle.
        ///   - limitText: The limit text.
        public init(count: Int = 0, isIncrementing: Bool = true, limitText: String = "") {
            self.count = count
            self.isIncrementing = isIncrementing
            self.limitText = limitText
        }

        /// Equal when every field is, comparing `limitText` by Unicode scalars as JSON does.
        public static func == (lhs: State, rhs: State) -> Bool {
            lhs.count == rhs.count && lhs.isIncrementing == rhs.isIncrementing
                && JSONKey(lhs.limitText) == JSONKey(rhs.limitText)
        }
    }

    /// The counter's actions.
    public enum Action: Sendable, Equatable {
        /// Adds one.
        case increment
        /// Subtracts one.
        case decrement
        /// Sets the toggle (bound two-way to a switch) and clears the limit.
        case setIncrementing(Bool)
        /// Sets the limit text (bound two-way to a text field).
        case setLimitText(String)
    }

    /// Creates the app.
    public init() {}

    /// `counter`.
    public static let name = "counter"
    /// The reducer and codec version.
    public static let version = "1"
    /// One line for `--list-apps`.
    public static let summary = "seed 000's counter: count, increment/decrement toggle, limit text, step toward the limit"
    /// The shorthand.
    public static let commandHelp = """
        increment | decrement        step the count by one
        up | down                    set the toggle to increment / decrement (clears the limit)
        limit TEXT                   set the limit text ("limit" alone clears it)
        step                         one increment (or decrement) toward the limit, decided here
                                     from this replica's state; nothing once the limit is reached
        {"type":…}                   any wire action as JSON
        """

    /// `count 0`, incrementing, no limit.
    public var initialState: State { State() }

    /// Applies a counter action; never refuses.
    ///
    /// - Parameters:
    ///   - state: The state.
    ///   - action: The action.
    public func reduce(into state: inout State, action: Action) {
        switch action {
        case .increment: state.count += 1
        case .decrement: state.count -= 1
        case .setIncrementing(let value):
            state.isIncrementing = value
            state.limitText = ""
        case .setLimitText(let text): state.limitText = text
        }
    }

    /// Seed 000's `updateCounter` thunk: steps toward the limit, never past it.
    ///
    /// With a numeric limit, it increments only while `count < limit` (or decrements only
    /// while `count > limit`); with no numeric limit it always steps. It runs in the
    /// dispatching replica; only the resulting `increment`/`decrement` goes to the hub.
    public static let step = Thunk<State, Action> { context in
        let state = context.getState()
        var shouldChange = true
        if let limit = Int(state.limitText) {
            shouldChange = state.isIncrementing ? state.count < limit : state.count > limit
        }
        if shouldChange { context.send(state.isIncrementing ? .increment : .decrement) }
    }

    /// `limit reached: nothing sent` for `step` at the limit.
    ///
    /// - Parameters:
    ///   - line: The command typed.
    ///   - state: The state `step` looked at.
    /// - Returns: One line.
    public func nothingSent(by line: String, state: State) -> String {
        if let limit = Int(state.limitText) {
            return "limit reached: nothing sent (the count is \(state.count), the limit \(limit))"
        }
        return "nothing sent"
    }

    /// Decodes a wire action.
    ///
    /// - Parameter json: The action JSON.
    /// - Returns: The action.
    /// - Throws: ``AppCodingError`` for an unknown type or ill-typed member.
    public func decodeAction(_ json: JSON) throws(AppCodingError) -> Action {
        switch try AppCommandParsing.type(json) {
        case "increment": return .increment
        case "decrement": return .decrement
        case "setIncrementing": return .setIncrementing(try AppCommandParsing.bool(json, "value"))
        case "setLimitText": return .setLimitText(try AppCommandParsing.string(json, "text"))
        case let other:
            throw AppCodingError("unknown counter action \"\(other)\"; expected increment, decrement, setIncrementing or setLimitText")
        }
    }

    /// Encodes an action.
    ///
    /// - Parameter action: The action.
    /// - Returns: Its wire JSON.
    public func encodeAction(_ action: Action) -> JSON {
        switch action {
        case .increment: ["type": "increment"]
        case .decrement: ["type": "decrement"]
        case .setIncrementing(let value): ["type": "setIncrementing", "value": .bool(value)]
        case .setLimitText(let text): ["type": "setLimitText", "text": .string(text)]
        }
    }

    /// Encodes a state.
    ///
    /// - Parameter state: The state.
    /// - Returns: `{"count":…,"isIncrementing":…,"limitText":…}`.
    public func encodeState(_ state: State) -> JSON {
        ["count": JSON(state.count), "isIncrementing": .bool(state.isIncrementing), "limitText": .string(state.limitText)]
    }

    /// Decodes a state.
    ///
    /// - Parameter json: The JSON.
    /// - Returns: The state.
    /// - Throws: ``AppCodingError`` when a member is missing or ill-typed.
    public func decodeState(_ json: JSON) throws(AppCodingError) -> State {
        guard let count = json["count"]?.intValue, let up = json["isIncrementing"]?.boolValue,
              let limit = json["limitText"]?.stringValue else {
            throw AppCodingError("a counter state is {\"count\":int,\"isIncrementing\":bool,\"limitText\":string}")
        }
        return State(count: count, isIncrementing: up, limitText: limit)
    }

    /// Parses the counter shorthand (see ``commandHelp``) or a JSON action.
    ///
    /// - Parameter line: The typed line.
    /// - Returns: The command.
    /// - Throws: ``AppCodingError`` for an unknown command.
    public func command(_ line: String) throws(AppCodingError) -> AppCommand<State, Action> {
        let (word, rest) = AppCommandParsing.splitWord(line[...])
        if ["increment", "inc", "+", "decrement", "dec", "-", "up", "down", "step", "update"].contains(word), !rest.isEmpty {
            // `increment 5` is not five increments: say so rather than send one.
            throw AppCodingError("\(word) takes no argument (got \"\(ControlCharacters.escaped(String(rest)))\"); type it once per step")
        }
        switch word {
        case "increment", "inc", "+": return .action(encodeAction(.increment))
        case "decrement", "dec", "-": return .action(encodeAction(.decrement))
        case "up": return .action(encodeAction(.setIncrementing(true)))
        case "down": return .action(encodeAction(.setIncrementing(false)))
        case "limit": return .action(encodeAction(.setLimitText(String(rest))))
        case "step", "update": return .local(Self.step)
        default: return .action(try AppCommandParsing.jsonObject(line))
        }
    }
}
