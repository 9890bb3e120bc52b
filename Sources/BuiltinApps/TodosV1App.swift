import Foundation
import SyncCore

/// Version 1 of the built-in todos app (`todos@1`), frozen: a TodoMVC store with add, toggle,
/// edit, remove, clear completed and filter, and no due dates.
///
/// Kept so that a binary can recover a history written by `todos@1` and upgrade it to
/// ``TodosApp`` (version 2, whose ``TodosApp/previous`` this is), and so that `--app todos@1`
/// runs it exactly. Its wire actions, its state JSON and its behaviour are those of `todos@1`
/// byte for byte; never change them (a change is a new version of ``TodosApp``).
///
/// Ids and timestamps are chosen by the dispatcher and carried in the action, so the
/// reducer stays deterministic. Wire actions:
/// `{"type":"add","id":"t1","title":"Buy milk","createdAt":1700000000000}`,
/// `{"type":"toggle","id":"t1"}`, `{"type":"edit","id":"t1","title":"Buy oat milk"}`,
/// `{"type":"remove","id":"t1"}`, `{"type":"clearCompleted"}`,
/// `{"type":"setFilter","filter":"all"|"active"|"completed"}`.
public struct TodosV1App: SyncApp {
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

        /// Creates a todo.
        ///
        /// - Parameters:
        ///   - id: The id.
        ///   - title: The text.
        ///   - completed: Whether it is done.
        ///   - createdAt: Milliseconds since 1970.
        public init(id: String, title: String, completed: Bool = false, createdAt: Double) {
            self.id = id
            self.title = title
            self.completed = completed
            self.createdAt = createdAt
        }

        /// Equal when every field is, comparing strings by Unicode scalars as JSON does (so two
        /// todos are equal exactly when their wire forms are).
        public static func == (lhs: Todo, rhs: Todo) -> Bool {
            JSONKey(lhs.id) == JSONKey(rhs.id) && JSONKey(lhs.title) == JSONKey(rhs.title)
                && lhs.completed == rhs.completed && lhs.createdAt == rhs.createdAt
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
    }

    /// Why an action was refused.
    public enum Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// `add` with an id already in the list.
        case duplicateID(String)
        /// An id not in the list.
        case unknownID(String)
        /// A title that is empty or only spaces.
        case emptyTitle

        /// What was wrong.
        public var description: String {
            switch self {
            case .duplicateID(let id): "a todo with id \"\(id)\" already exists; choose a new id"
            case .unknownID(let id): "no todo has id \"\(id)\""
            case .emptyTitle: "a todo's title must not be empty"
            }
        }
    }

    /// Creates the app.
    public init() {}

    /// `todos`.
    public static let name = "todos"
    /// The reducer and codec version.
    public static let version = "1"
    /// One line for `--list-apps`.
    public static let summary = "TodoMVC: add, toggle, edit, remove, clear completed, filter"
    /// The shorthand.
    public static let commandHelp = """
        add TITLE…                   add a todo (this replica picks the id and the time)
        toggle ID | remove ID        flip done / delete one todo
        edit ID TITLE…               retitle a todo
        clear                        remove completed todos
        filter all|active|completed  set the filter
        {"type":…}                   any wire action as JSON
        """

    /// An empty list showing all.
    public var initialState: State { State() }

    /// Applies an action, validating before any write.
    ///
    /// - Parameters:
    ///   - state: The state; unchanged when this throws.
    ///   - action: The action.
    /// - Throws: ``Failure`` for a duplicate or unknown id or an empty title.
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
        case let other:
            throw AppCodingError("unknown todos action \"\(other)\"; expected add, toggle, edit, remove, clearCompleted or setFilter")
        }
    }

    /// Encodes an action.
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
        }
    }

    /// Encodes a state: `{"filter":"all","todos":[{"completed":false,"createdAt":…,"id":…,"title":…}]}`.
    ///
    /// - Parameter state: The state.
    /// - Returns: Its JSON.
    public func encodeState(_ state: State) -> JSON {
        [
            "todos": .array(state.todos.map { todo in
                ["id": .string(todo.id), "title": .string(todo.title), "completed": .bool(todo.completed),
                 "createdAt": .number(todo.createdAt)]
            }),
            "filter": .string(state.filter.rawValue),
        ]
    }

    /// Decodes a state.
    ///
    /// - Parameter json: The JSON.
    /// - Returns: The state.
    /// - Throws: ``AppCodingError`` when a member is missing or ill-typed.
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
            guard ids.insert(JSONKey(id)).inserted else { throw AppCodingError("two todos have id \"\(id)\"; ids are unique") }
            todos.append(Todo(id: id, title: title, completed: completed, createdAt: createdAt))
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
