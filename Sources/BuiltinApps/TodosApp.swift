import Foundation
import SyncCore

/// A TodoMVC store: add, toggle, edit, remove, clear completed, filter, and a due date per
/// todo. Version 2 (`todos@2`); it upgrades from ``TodosV1App`` (`todos@1`).
///
/// Ids and timestamps are chosen by the dispatcher and carried in the action, so the
/// reducer stays deterministic. Wire actions, every one of version 1 unchanged in form and
/// meaning:
/// `{"type":"add","id":"t1","title":"Buy milk","createdAt":1700000000000}`,
/// `{"type":"toggle","id":"t1"}`, `{"type":"edit","id":"t1","title":"Buy oat milk"}`,
/// `{"type":"remove","id":"t1"}`, `{"type":"clearCompleted"}`,
/// `{"type":"setFilter","filter":"all"|"active"|"completed"}`, and new in version 2
/// `{"type":"setDue","id":"t1","due":1767225600000}` (milliseconds since 1970, chosen by the
/// dispatcher), which `{"type":"setDue","id":"t1"}` or `"due":null` clears.
///
/// In the state, a todo's `"due"` member is there only when it has a due date, so a state
/// without due dates has exactly the JSON it had in version 1. ``migrate(_:)`` carries every
/// todo and the filter over, with no due dates.
public struct TodosApp: UpgradingApp {
    /// One todo.
    public struct Todo: Sendable, Equatable {
        /// The dispatcher-chosen id, unique in the list.
        public var id: String
        /// The text; never empty.
        public var title: String
        /// Whether it is done.
        public var completed: Bool
        /// Milliseconds since 1970, chosen by the dispatcher.
        public var createdAt: Double
        /// When it is due, in milliseconds since 1970 (finite), chosen by the dispatcher; `nil`
        /// for none.
        public var due: Double?

        /// Creates a todo.
        ///
        /// - Parameters:
        ///   - id: The id.
        ///   - title: The text.
        ///   - completed: Whether it is done.
        ///   - createdAt: Milliseconds since 1970.
        ///   - due: When it is due, in milliseconds since 1970, or `nil` for none.
        public init(id: String, title: String, completed: Bool = false, createdAt: Double, due: Double? = nil) {
            self.id = id
            self.title = title
            self.completed = completed
            self.createdAt = createdAt
            self.due = due
        }

        /// Equal when every field is, comparing strings by Unicode scalars as JSON does (so two
        /// todos are equal exactly when their wire forms are).
        public static func == (lhs: Todo, rhs: Todo) -> Bool {
            JSONKey(lhs.id) == JSONKey(rhs.id) && JSONKey(lhs.title) == JSONKey(rhs.title)
                && lhs.completed == rhs.completed && lhs.createdAt == rhs.createdAt && lhs.due == rhs.due
        }
    }

    /// Which todos a view shows.
    public enum Filter: String, Sendable, Equatable, CaseIterable {
        /// Every todo.
        case all
        /// Todos not completed.
        case active
        /// Completed todos.
        case completed
    }

    /// The list and the filter.
    public struct State: Sendable, Equatable {
        /// The todos, in the order they were added.
        public var todos: [Todo] = []
        /// The current filter.
        public var filter: Filter = .all

        /// Creates a state.
        ///
        /// - Parameters:
        ///   - todos: The list.
        ///   - filter: The filter.
        public init(todos: [Todo] = [], filter: Filter = .all) {
            self.todos = todos
            self.filter = filter
        }

        /// The todos the filter lets through.
        public var visible: [Todo] {
            switch filter {
            case .all: todos
            case .active: todos.filter { !$0.completed }
            case .completed: todos.filter(\.completed)
            }
        }
    }

    /// The actions.
    public enum Action: Sendable, Equatable {
        /// Adds a todo with a dispatcher-chosen id and time.
        case add(id: String, title: String, createdAt: Double)
        /// Flips one todo's completed flag.
        case toggle(id: String)
        /// Changes one todo's title.
        case edit(id: String, title: String)
        /// Removes one todo.
        case remove(id: String)
        /// Removes every completed todo.
        case clearCompleted
        /// Sets the filter.
        case setFilter(Filter)
        /// Sets one todo's due date (milliseconds since 1970, finite), or clears it (`nil`).
        case setDue(id: String, due: Double?)
    }

    /// Why an action was refused.
    public enum Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// `add` with an id already in the list.
        case duplicateID(String)
        /// An id not in the list.
        case unknownID(String)
        /// A title that is empty or only spaces.
        case emptyTitle
        /// `setDue` with a due date that is not a finite number (JSON has no form for it).
        case invalidDue

        /// What was wrong.
        public var description: String {
            switch self {
            case .duplicateID(let id): "a todo with id \"\(id)\" already exists; choose a new id"
            case .unknownID(let id): "no todo has id \"\(id)\""
            case .emptyTitle: "a todo's title must not be empty"
            case .invalidDue: "a due date must be a finite number of milliseconds since 1970"
            }
        }
    }

    /// Creates the app.
    public init() {}

    /// `todos`.
    public static let name = "todos"
    /// The reducer and codec version: 2 adds due dates (version 1 is ``TodosV1App``).
    public static let version = "2"
    /// One line for `--list-apps`.
    public static let summary = "TodoMVC: add, toggle, edit, remove, clear completed, filter, due dates"
    /// The shorthand.
    public static let commandHelp = """
        add TITLE…                   add a todo (this replica picks the id and the time)
        toggle ID | remove ID        flip done / delete one todo
        edit ID TITLE…               retitle a todo
        due ID [MS]                  set a todo's due date, in ms since 1970 (no MS: clear it)
        clear                        remove completed todos
        filter all|active|completed  set the filter
        {"type":…}                   any wire action as JSON
        """

    /// An empty list showing all.
    public var initialState: State { State() }

    /// Version 1, which this version replaces.
    public var previous: TodosV1App { TodosV1App() }

    /// Moves a `todos@1` state to this version: every todo, in order, with its id, title,
    /// completed flag and creation time, and no due date; the same filter. Pure: it never fails.
    ///
    /// - Parameter old: A state of ``TodosV1App``.
    /// - Returns: The same list and filter, whose JSON is exactly the old state's.
    /// - Throws: Never; the signature is ``UpgradingApp``'s.
    public func migrate(_ old: TodosV1App.State) throws(MigrationError) -> State {
        let filter: Filter = switch old.filter {
        case .all: .all
        case .active: .active
        case .completed: .completed
        }
        return State(todos: old.todos.map { todo in
            Todo(id: todo.id, title: todo.title, completed: todo.completed, createdAt: todo.createdAt, due: nil)
        }, filter: filter)
    }

    /// Applies an action, validating before any write.
    ///
    /// - Parameters:
    ///   - state: The state; unchanged when this throws.
    ///   - action: The action.
    /// - Throws: ``Failure`` for a duplicate or unknown id, an empty title or a due date that is
    ///   not finite.
    public func reduce(into state: inout State, action: Action) throws(Failure) {
        switch action {
        case .add(let id, let title, let createdAt):
            guard !Self.isBlank(title) else { throw .emptyTitle }
            guard Self.index(of: id, in: state.todos) == nil else { throw .duplicateID(id) }
            state.todos.append(Todo(id: id, title: title, createdAt: createdAt))
        case .toggle(let id):
            guard let index = Self.index(of: id, in: state.todos) else { throw .unknownID(id) }
            state.todos[index].completed.toggle()
        case .edit(let id, let title):
            guard !Self.isBlank(title) else { throw .emptyTitle }
            guard let index = Self.index(of: id, in: state.todos) else { throw .unknownID(id) }
            state.todos[index].title = title
        case .remove(let id):
            guard let index = Self.index(of: id, in: state.todos) else { throw .unknownID(id) }
            state.todos.remove(at: index)
        case .clearCompleted:
            state.todos.removeAll(where: \.completed)
        case .setFilter(let filter):
            state.filter = filter
        case .setDue(let id, let due):
            guard due?.isFinite ?? true else { throw .invalidDue }
            guard let index = Self.index(of: id, in: state.todos) else { throw .unknownID(id) }
            state.todos[index].due = due
        }
    }

    /// The position of the todo with this id. Ids compare by Unicode scalars, as JSON strings
    /// do: `"é"` and `"e\u{301}"` are two ids, in every language a replica is written in.
    private static func index(of id: String, in todos: [Todo]) -> Int? {
        let key = JSONKey(id)
        return todos.firstIndex { JSONKey($0.id) == key }
    }

    private static func isBlank(_ title: String) -> Bool {
        title.unicodeScalars.allSatisfy { $0.properties.isWhitespace }
    }

    /// Decodes a wire action.
    ///
    /// - Parameter json: The action JSON.
    /// - Returns: The action.
    /// - Throws: ``AppCodingError`` for an unknown type or ill-typed member.
    public func decodeAction(_ json: JSON) throws(AppCodingError) -> Action {
        typealias P = AppCommandParsing
        switch try P.type(json) {
        case "add":
            guard let createdAt = json["createdAt"]?.numberValue else {
                throw AppCodingError("action \"add\" needs a number member \"createdAt\" (milliseconds since 1970, chosen by the dispatcher)")
            }
            return .add(id: try P.string(json, "id"), title: try P.string(json, "title"), createdAt: createdAt)
        case "toggle": return .toggle(id: try P.string(json, "id"))
        case "edit": return .edit(id: try P.string(json, "id"), title: try P.string(json, "title"))
        case "remove": return .remove(id: try P.string(json, "id"))
        case "clearCompleted": return .clearCompleted
        case "setFilter":
            let name = try P.string(json, "filter")
            guard let filter = Filter(rawValue: name) else {
                throw AppCodingError("filter \"\(name)\" is not one of all, active, completed")
            }
            return .setFilter(filter)
        case "setDue":
            let id = try P.string(json, "id")
            switch json["due"] {
            case nil, .null?:
                return .setDue(id: id, due: nil)
            case .number(let due)? where due.isFinite:
                return .setDue(id: id, due: due)
            default:
                throw AppCodingError("action \"setDue\" needs a number member \"due\" (milliseconds since 1970, chosen by the dispatcher), or none or null to clear it")
            }
        case let other:
            throw AppCodingError("unknown todos action \"\(other)\"; expected add, toggle, edit, remove, clearCompleted, setFilter or setDue")
        }
    }

    /// Encodes an action.
    ///
    /// `setDue` without a due date has no `"due"` member. One whose due date has no JSON form
    /// (not finite) becomes `{"unencodable":"<why>"}`, which the hub refuses with `bad-action`,
    /// as ``CodableSyncApp`` does: it is never sent as a different action.
    ///
    /// - Parameter action: The action.
    /// - Returns: Its wire JSON.
    public func encodeAction(_ action: Action) -> JSON {
        switch action {
        case .add(let id, let title, let createdAt):
            ["type": "add", "id": .string(id), "title": .string(title), "createdAt": .number(createdAt)]
        case .toggle(let id): ["type": "toggle", "id": .string(id)]
        case .edit(let id, let title): ["type": "edit", "id": .string(id), "title": .string(title)]
        case .remove(let id): ["type": "remove", "id": .string(id)]
        case .clearCompleted: ["type": "clearCompleted"]
        case .setFilter(let filter): ["type": "setFilter", "filter": .string(filter.rawValue)]
        case .setDue(let id, nil): ["type": "setDue", "id": .string(id)]
        case .setDue(let id, let due?):
            due.isFinite
                ? ["type": "setDue", "id": .string(id), "due": .number(due)]
                : ["unencodable": .string("action \"setDue\": due \(due) has no JSON form; use a finite number of milliseconds since 1970")]
        }
    }

    /// Encodes a state: `{"filter":"all","todos":[{"completed":false,"createdAt":…,"due":…,"id":…,"title":…}]}`,
    /// where a todo has `"due"` only when it has a due date (so a state without due dates is
    /// written exactly as version 1 wrote it).
    ///
    /// - Parameter state: The state.
    /// - Returns: Its JSON.
    public func encodeState(_ state: State) -> JSON {
        [
            "todos": .array(state.todos.map { todo in
                var members: [JSONKey: JSON] = [
                    "id": .string(todo.id), "title": .string(todo.title), "completed": .bool(todo.completed),
                    "createdAt": .number(todo.createdAt),
                ]
                if let due = todo.due { members["due"] = .number(due) }
                return .object(members)
            }),
            "filter": .string(state.filter.rawValue),
        ]
    }

    /// Decodes a state.
    ///
    /// - Parameter json: The JSON.
    /// - Returns: The state.
    /// - Throws: ``AppCodingError`` when a member is missing or ill-typed (a `"due"` that is
    ///   there must be a finite number), or two todos share an id.
    public func decodeState(_ json: JSON) throws(AppCodingError) -> State {
        guard let items = json["todos"]?.arrayValue, let filterName = json["filter"]?.stringValue,
              let filter = Filter(rawValue: filterName) else {
            throw AppCodingError("a todos state is {\"todos\":[…],\"filter\":\"all|active|completed\"}")
        }
        var todos: [Todo] = []
        var ids: Set<JSONKey> = []
        todos.reserveCapacity(items.count)
        for item in items {
            guard let id = item["id"]?.stringValue, let title = item["title"]?.stringValue,
                  let completed = item["completed"]?.boolValue, let createdAt = item["createdAt"]?.numberValue else {
                throw AppCodingError("a todo is {\"id\":string,\"title\":string,\"completed\":bool,\"createdAt\":number}")
            }
            var due: Double?
            if let member = item["due"] {
                guard let number = member.numberValue, number.isFinite else {
                    throw AppCodingError("a todo's \"due\" is a number (milliseconds since 1970), or absent for none")
                }
                due = number
            }
            guard ids.insert(JSONKey(id)).inserted else { throw AppCodingError("two todos have id \"\(id)\"; ids are unique") }
            todos.append(Todo(id: id, title: title, completed: completed, createdAt: createdAt, due: due))
        }
        return State(todos: todos, filter: filter)
    }

    /// Parses the todos shorthand (see ``commandHelp``) or a JSON action.
    ///
    /// `add` picks a random id and the current time here, in the dispatching process.
    ///
    /// - Parameter line: The typed line.
    /// - Returns: The command.
    /// - Throws: ``AppCodingError`` for an unknown command or a missing argument.
    public func command(_ line: String) throws(AppCodingError) -> AppCommand<State, Action> {
        let (word, rest) = AppCommandParsing.splitWord(line[...])
        func needArgument(_ usage: String) throws(AppCodingError) {
            if rest.isEmpty { throw AppCodingError("usage: \(usage)") }
        }
        switch word {
        case "add":
            try needArgument("add TITLE")
            let id = String(UInt64.random(in: 0...UInt64.max) & 0xffff_ffff_ffff, radix: 16)
            let now = (Date().timeIntervalSince1970 * 1000).rounded()
            return .action(encodeAction(.add(id: id, title: String(rest), createdAt: now)))
        case "toggle":
            try needArgument("toggle ID")
            return .action(encodeAction(.toggle(id: String(rest))))
        case "remove":
            try needArgument("remove ID")
            return .action(encodeAction(.remove(id: String(rest))))
        case "edit":
            let (id, title) = AppCommandParsing.splitWord(rest)
            guard !id.isEmpty, !title.isEmpty else { throw AppCodingError("usage: edit ID TITLE") }
            return .action(encodeAction(.edit(id: String(id), title: String(title))))
        case "due":
            let (id, ms) = AppCommandParsing.splitWord(rest)
            guard !id.isEmpty else { throw AppCodingError("usage: due ID [MS]") }
            if ms.isEmpty { return .action(encodeAction(.setDue(id: String(id), due: nil))) }
            guard let due = (try? JSON(parsing: String(ms)))?.numberValue, due.isFinite else {
                throw AppCodingError("usage: due ID [MS], MS a number of milliseconds since 1970")
            }
            return .action(encodeAction(.setDue(id: String(id), due: due)))
        case "clear":
            return .action(encodeAction(.clearCompleted))
        case "filter":
            guard let filter = Filter(rawValue: String(rest)) else { throw AppCodingError("usage: filter all|active|completed") }
            return .action(encodeAction(.setFilter(filter)))
        default:
            return .action(try AppCommandParsing.jsonObject(line))
        }
    }
}
