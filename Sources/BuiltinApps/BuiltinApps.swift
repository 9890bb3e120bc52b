import SyncCore

/// The apps `hubd` and `replica-cli` know by name (`--app NAME`).
public enum BuiltinApps {
    /// Every built-in app, in `--list-apps` order.
    public static let all: [any SyncApp.Type] = [CounterApp.self, TodosApp.self, JSONApp.self]

    /// The app called `name`, or `nil`.
    ///
    /// - Parameter name: An app name such as `counter`.
    /// - Returns: An instance of the app.
    public static func app(named name: String) -> (any SyncApp)? {
        switch name {
        case CounterApp.name: CounterApp()
        case TodosApp.name: TodosApp()
        case JSONApp.name: JSONApp()
        default: nil
        }
    }

    /// The names of every built-in app, comma-separated, for error messages.
    public static var names: String { all.map { $0.name }.joined(separator: ", ") }
}
