import SyncCore
import SyncPOSIX
import SyncProtocol
import StoreReplica

/// `replica-cli` for a hub whose app this executable was not built with: `state`, `watch` and
/// `dispatch` speak the wire protocol directly, as raw canonical JSON, without the app's
/// reducer (the hub validates every dispatch). Only `attach` needs the app compiled in.
///
/// Without the reducer there is no local state to keep: `state` prints the welcome's state,
/// `watch` prints each sequenced action (and ends when the hub goes, as it cannot resume a
/// state it does not keep), and `dispatch` sends raw JSON actions and prints their seqs.
enum GenericClient {
    /// Runs `command` against the hub on `connection`, which serves `app`.
    ///
    /// - Parameters:
    ///   - app: The hub's app name (from its `status`).
    ///   - connection: A connection that has sent nothing yet.
    ///   - command: `state`, `watch` or `dispatch`.
    ///   - options: The command line.
    static func run(app: String, over connection: HubConnection, command: String, options: Options) throws(ReplicaError) {
        // Bad arguments first: a usage error never half-runs.
        let actions: [JSON] = options.arguments.map { text in
            do throws(AppCodingError) {
                return try AppCommandParsing.jsonObject(text)
            } catch {
                fail("\(text): \(error.message) (the hub's app \"\(app)\" is not built into \(ReplicaCommand.program): actions are JSON objects)", status: 2)
            }
        }
        if options.diff {
            fail("watch --diff runs the app's reducer, and the hub's app \"\(app)\" is not built into \(ReplicaCommand.program); use your app's own CLI", status: 2)
        }
        if command == "watch" { ReplicaCommand.exitOnTerminationSignal() }
        try connection.send(.hello(protocolVersion: 1, app: app, fingerprint: nil, name: options.name ?? ReplicaCommand.program))
        let welcome: Welcome
        switch try connection.receive() {
        case .welcome(let value): welcome = value
        case .error(let error): throw .hub(error)
        default: throw .protocolViolation("the hub's first answer to hello was not a welcome")
        }
        switch command {
        case "state":
            printState(welcome, options: options)
        case "dispatch":
            for (index, action) in actions.enumerated() {
                let id = DispatchID.number(index + 1)
                try connection.send(.dispatch(id: id, action: action))
                while true {
                    switch try connection.receive(timeoutMilliseconds: 60_000) {
                    case .action(let seq, let origin, let got, _) where got == id && origin == welcome.replica:
                        Console.out("\(seq)")
                    case .duplicate(let got, let seq) where got == id:
                        Console.out("\(seq)")
                    case .reject(let got, let error) where got == id:
                        fail("\(error.rawCode): \(error.message)")
                    case .error(let error):
                        throw .hub(error)
                    default:
                        continue
                    }
                    break
                }
            }
        default:  // watch
            while true {
                switch try connection.receive(timeoutMilliseconds: -1) {
                case .action(let seq, let origin, let id, let action):
                    Console.out(JSON.object(["seq": JSON(seq), "origin": JSON(origin), "id": id.json, "action": action]).canonicalString)
                case .error(let error):
                    throw .hub(error)
                default:
                    continue
                }
            }
        }
    }

    private static func printState(_ welcome: Welcome, options: Options) {
        let whole = welcome.state ?? .null
        var shown = whole
        if let pointerText = options.pointer {
            let pointer: JSONPointer
            do { pointer = try JSONPointer(pointerText) } catch { fail(error.description, status: 2) }
            guard let value = whole.value(at: pointer) else { fail("no value at \(pointerText) in the state") }
            shown = value
        }
        if options.json {
            Console.out(JSON.object(["seq": JSON(welcome.seq), "digest": .string(welcome.digest ?? Digest.of(whole)), "state": shown]).canonicalString)
        } else {
            Console.out(shown.canonicalString)
        }
    }
}
