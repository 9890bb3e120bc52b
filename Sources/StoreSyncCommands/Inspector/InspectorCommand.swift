#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import StoreHub
import StoreReplica
import SyncCore
import SyncLocks
import SyncPOSIX

/// `replica-cli inspect --http [HOST:]PORT`: the inspector, a replica of its own that serves a
/// page showing the hub's actions, states, diffs, replicas and health in a browser.
///
/// It is a client like any other: the hub's event loop knows nothing of HTTP or pages (see
/// docs/ARCHITECTURE.md, "The inspector"). It attaches (and rides through hub restarts), keeps
/// what ``InspectorModel`` keeps, asks the hub's `status` once a second, and serves
/// ``InspectorServer`` on loopback with a token printed at start.
enum InspectorCommand {
    /// The default number of actions kept.
    static let defaultKeep = 10_000

    /// What the command line says.
    struct Arguments: Equatable {
        var host = "127.0.0.1"
        var port = 0
        var dataDirectory: String?
        var keep = InspectorCommand.defaultKeep
    }

    /// Reads `--http [HOST:]PORT`, `--data-dir DIR` and `--keep N`.
    ///
    /// - Parameter arguments: The command's arguments.
    /// - Returns: What they say.
    /// - Throws: ``UsageError``: a missing or bad value, an unknown argument, or a host that
    ///   is not loopback.
    static func parse(_ arguments: [String]) throws(UsageError) -> Arguments {
        var result = Arguments()
        var sawHTTP = false
        var rest = arguments[...]
        while let argument = rest.popFirst() {
            guard let value = rest.popFirst() else { throw UsageError("inspect \(argument) needs a value") }
            switch argument {
            case "--http":
                sawHTTP = true
                var host = "127.0.0.1", portText = value
                if let colon = value.lastIndex(of: ":") {
                    host = String(value[..<colon])
                    portText = String(value[value.index(after: colon)...])
                }
                if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
                guard ["127.0.0.1", "localhost", "::1"].contains(host) else {
                    throw UsageError("the inspector listens on loopback only (127.0.0.1, localhost or ::1), not \"\(shown(host))\": to reach it from another machine, forward the port over SSH (ssh -L PORT:127.0.0.1:PORT HOST; docs/DEBUGGING.md)")
                }
                guard let port = Int(portText), (0...65_535).contains(port) else {
                    throw UsageError("inspect --http needs [HOST:]PORT with a port from 0 to 65535 (0: any free port), got \"\(shown(value))\"")
                }
                result.host = host
                result.port = port
            case "--data-dir":
                result.dataDirectory = value
            case "--keep":
                guard let keep = Int(value), keep > 0, keep <= 1_000_000 else {
                    throw UsageError("inspect --keep needs a number of actions from 1 to 1000000, got \"\(shown(value))\"")
                }
                result.keep = keep
            default:
                throw UsageError("inspect takes --http [HOST:]PORT, --data-dir DIR and --keep N, not \"\(shown(argument))\"")
            }
        }
        guard sawHTTP else { throw UsageError("inspect needs --http [HOST:]PORT (e.g. --http 127.0.0.1:8765, or --http 0 for any free port)") }
        return result
    }

    /// A new token: 32 random bytes, in hex.
    static func newToken() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in
            let byte = UInt8.random(in: 0...255, using: &generator)
            return String(byte, radix: 16).count == 1 ? "0" + String(byte, radix: 16) : String(byte, radix: 16)
        }.joined()
    }

    /// An event for the page's stream.
    static func event(_ name: String, _ data: [UInt8]) -> [UInt8] {
        var bytes: [UInt8] = []
        appendEvent(name, data, to: &bytes)
        return bytes
    }

    /// Appends an event for the page's stream to `bytes` (no array of its own per event).
    static func appendEvent(_ name: String, _ data: [UInt8], to bytes: inout [UInt8]) {
        bytes += "event: ".utf8
        bytes += name.utf8
        bytes += "\ndata: ".utf8
        bytes += data
        bytes += "\n\n".utf8
    }

    /// Runs the inspector until SIGINT, SIGTERM, or the hub goes for good. When the history is
    /// upgraded to a version this binary carries (`carried`), it attaches again as that version,
    /// on the same address and token: an open page reconnects and goes on.
    ///
    /// - Parameters:
    ///   - app: The app version it attaches as.
    ///   - connection: The hub.
    ///   - options: The command line.
    ///   - carried: The versions this binary carries (default: `app`'s chain).
    static func run<App: SyncApp>(_ app: App, over connection: HubConnection, options: ReplicaOptions,
                                  carried: AppVersionChain? = nil) async throws(ReplicaError) {
        let arguments: Arguments
        do throws(UsageError) {
            arguments = try parse(options.arguments)
        } catch {
            fail(error.message, status: 2)
        }
        let listening: (fd: Int32, port: Int)
        do throws(SystemError) {
            listening = try TCPSocket.listenOnLoopback(host: arguments.host, port: arguments.port)
        } catch {
            fail("inspect: \(error.message)")
        }
        ReplicaCommand.exitOnTerminationSignal()
        try await serve(app, over: connection, options: options, arguments: arguments, listening: listening, token: newToken(),
                        carried: carried ?? app.versions)
    }

    /// Attaches as `app` and serves the page until the replica ends; then attaches again as the
    /// version the history was upgraded to, when `carried` has it, or exits.
    private static func serve<App: SyncApp>(_ app: App, over connection: HubConnection, options: ReplicaOptions,
                                            arguments: Arguments, listening: (fd: Int32, port: Int), token: String,
                                            carried: AppVersionChain, announced: Bool = false) async throws(ReplicaError) {
        let replica = try Replica.attach(app: app, over: connection, name: options.name ?? "inspector", startReading: false,
                                         reconnect: .automatic)
        let socketPath = connection.path
        // `unobservedState` throughout: the inspector's store is never observed, so its batches
        // announce nothing to Observation.
        let model = preloaded(app, upTo: replica.seq, state: replica.store.unobservedState, keep: arguments.keep,
                              dataDirectory: arguments.dataDirectory, socketPath: socketPath)
        let server: InspectorServer
        do throws(SystemError) {
            // Each server closes its own copy of the listener as it stops: the socket stays
            // open for the next one (after an upgrade).
            let listener = dup(listening.fd)
            guard listener >= 0 else { throw SystemError("dup: \(String(cString: strerror(errno)))") }
            server = try InspectorServer(listener: listener, port: listening.port,
                                         access: InspectorAccess(token: token, port: listening.port)) { request in
                route(request, model: model, socketPath: socketPath)
            }
        } catch {
            fail("inspect: \(error.message)")
        }
        // Each action as it is applied; nothing is computed from the state per action (a
        // patch is computed when the page asks for it). Observers run on the replica's reader
        // after a read's actions are all applied, and before it applies more: the action whose
        // seq is the replica's is the read's last, and the store's state is the one right
        // after it. The read's events go to the pages together, then (one wake of the server
        // per read, not per action).
        let pending = Locked<[UInt8]>([])
        let observer = replica.observeEvents { replicaEvent in
            switch replicaEvent {
            case .action(let seq, let origin, let id, _, let json, let stamp):
                let last = seq == replica.seq
                let line = model.append(SequencedAction(seq: seq, origin: origin, id: id, action: json, stamp: stamp)) {
                    last ? Optional(replica.store.unobservedState) : .none
                }
                let events = pending.withLock { pending -> [UInt8] in
                    Self.appendEvent("action", line, to: &pending)
                    guard last else { return [] }
                    defer { pending.removeAll(keepingCapacity: true) }
                    return pending
                }
                if !events.isEmpty { server.broadcast(events) }
            case .connection(.rehydrated(let seq)):
                let events = pending.withLock { pending -> [UInt8] in
                    defer { pending.removeAll(keepingCapacity: true) }
                    return pending
                }
                if !events.isEmpty { server.broadcast(events) }
                model.restart(state: replica.store.unobservedState, seq: seq)
                server.broadcast(Self.event("reset", JSON(seq).canonicalBytes))
            default:
                break
            }
        }
        replica.startReading()
        Thread.detachNewThread { server.run() }
        // The address it listens on, never the name `localhost`: a browser may try ::1 first for
        // that name, where another local user could listen and be sent the token.
        let shown = arguments.host == "::1" ? "[::1]" : "127.0.0.1"
        if !announced {
            Console.out("inspector: http://\(shown):\(listening.port)/?token=\(token)")
            Console.out("inspector: open it in a browser on this machine; from another, forward the port first: ssh -L \(listening.port):127.0.0.1:\(listening.port) THIS-HOST")
        }
        // The hub's status once a second: replicas, lag, storage and the log's health.
        let poller = Task {
            while !Task.isCancelled {
                if let status = try? await replica.status() {
                    model.setStatus(HubMessage.status(status).json)
                    // The page reads the same shape from every `status` event: the hub's status
                    // with what the inspector keeps (as at the stream's start).
                    server.broadcast(event("status", model.statusJSON().canonicalBytes))
                }
                try? await Task.sleep(for: .seconds(1))
            }
        }
        let reason = await replica.waitUntilDisconnected()
        poller.cancel()
        server.stop()
        observer.cancel()
        replica.close()
        if case .appOutdated(let outdated) = reason, let notice = outdated.notice, let next = carried.app(notice.to),
           let again = try? HubConnection(path: socketPath) {
            Console.error("inspect: the history was upgraded from \(ControlCharacters.escaped(notice.from)) to \(ControlCharacters.escaped(notice.to)) at seq \(notice.seq); inspecting it as \(ControlCharacters.escaped(notice.to)) (open pages reconnect)")
            try await serve(next, over: again, options: options, arguments: arguments, listening: listening, token: token,
                            carried: carried, announced: true)
            return
        }
        fail(reason.description)
    }

    /// A model holding, from the start, the last actions before the replica's welcome (the
    /// hub's resume window): the page shows history at once, not only what happens next. When the state before them cannot be rebuilt (the window no longer
    /// reaches seq 1 and no data directory is given), the model starts empty at the welcome.
    ///
    /// - Parameters:
    ///   - app: The app.
    ///   - seq: The welcome's seq.
    ///   - state: The welcome's state.
    ///   - keep: The most actions kept.
    ///   - dataDirectory: The hub's data directory, if given.
    ///   - socketPath: The hub's socket.
    /// - Returns: The model.
    static func preloaded<App: SyncApp>(_ app: App, upTo seq: UInt64, state: App.State, keep: Int, dataDirectory: String?,
                                        socketPath: String) -> InspectorModel<App> {
        let first = seq >= UInt64(keep) ? seq - UInt64(keep) + 1 : 1
        let empty = InspectorModel(app: app, state: state, seq: seq, keep: keep, dataDirectory: dataDirectory)
        guard seq >= 1 else { return empty }
        // The state right before the first preloaded action.
        var base: App.State
        if first == 1 {
            base = app.initialState
        } else if let dataDirectory, let json = try? DataDirectory.state(dataDirectory, app: app, at: first - 1),
                  let decoded = try? app.decodeState(json) {
            base = decoded
        } else if let actions = hubActions(socketPath: socketPath, through: first - 1) {
            base = app.initialState
            for action in actions { ReplicaCommand.apply(app, action.action, seq: action.seq, to: &base) }
        } else {
            return empty
        }
        guard let connection = try? HubConnection(path: socketPath) else { return empty }
        defer { connection.close() }
        var actions: [SequencedAction] = []
        var next = first
        while next <= seq {
            guard let page = try? connection.history(from: next, to: seq), page.to >= next else { return empty }
            actions += page.actions.compactMap(SequencedAction.init)
            next = page.to + 1
        }
        guard actions.count == Int(seq - first + 1) else { return empty }
        let model = InspectorModel(app: app, state: base, seq: first - 1, keep: keep, dataDirectory: dataDirectory)
        // Applied once here, so the model keeps states among the preloaded actions too.
        var state = base
        for action in actions {
            ReplicaCommand.apply(app, action.action, seq: action.seq, to: &state)
            model.append(action) { state }
        }
        return model
    }

    /// The most bytes of action lines a live stream starts with.
    static var streamStartBytes: Int { 256 << 10 }
    /// The most bytes of action lines one `/api/actions` page holds (at least one line).
    static var pageBytes: Int { 1 << 20 }

    /// Answers one allowed request.
    static func route<App: SyncApp>(_ request: HTTPRequest, model: InspectorModel<App>, socketPath: String) -> InspectorServer.Reply {
        func json(_ value: JSON, status: Int = 200, headers: [(String, String)] = []) -> InspectorServer.Reply {
            .response(status: status, contentType: "application/json", body: value.canonicalBytes, headers: headers)
        }
        func seq(_ name: String) -> UInt64? { request.query[name].flatMap { UInt64($0) } }
        switch request.path {
        case "/", "/index.html":
            return .response(status: 200, contentType: "text/html; charset=utf-8", body: InspectorPage.html)
        case "/api/events":
            // The stream starts with the status and the newest actions after `after` (default:
            // the last 500) within ``streamStartBytes``; when older ones were left out, a `more`
            // event names the range and the page reads it from /api/actions in pages. So a
            // stream never starts with more than it may leave unread.
            let newest = model.window.newest
            let after = seq("after") ?? (newest > 500 ? newest - 500 : 0)
            var initial = event("status", model.statusJSON().canonicalBytes)
            let (lines, more, first) = model.lines(after: after, limit: 2_000, maxBytes: streamStartBytes)
            if more, let first {
                appendEvent("more", JSON.object(["after": JSON(after), "before": JSON(first)]).canonicalBytes, to: &initial)
            }
            for line in lines { appendEvent("action", line, to: &initial) }
            return .stream(initial: initial)
        case "/api/actions":
            // Oldest first, a page at a time: at most 2,000 lines and ``pageBytes`` (at least one line).
            let (lines, _, _) = model.lines(after: seq("after") ?? 0, before: seq("before"), limit: 2_000, maxBytes: pageBytes,
                                         newest: false)
            var body: [UInt8] = [UInt8(ascii: "[")]
            for (index, line) in lines.enumerated() {
                if index > 0 { body.append(UInt8(ascii: ",")) }
                body += line
            }
            body.append(UInt8(ascii: "]"))
            return .response(status: 200, contentType: "application/json", body: body)
        case "/api/action":
            // One action whole, however large (its line in a list says only its size).
            guard let at = seq("seq") else { return json(["error": "action needs ?seq=N"], status: 400) }
            guard let line = model.wholeLine(at: at) else {
                return json(["error": .string("seq \(at) is not among the actions the inspector keeps"), "seq": JSON(at)], status: 404)
            }
            return .response(status: 200, contentType: "application/json", body: line)
        case "/api/state":
            guard let at = seq("seq") else { return json(["error": "state needs ?seq=N"], status: 400) }
            switch model.stateAndPatch(at: at, hubWindow: { hubActions(socketPath: socketPath, through: $0) }) {
            case .success(let (state, patch, source)):
                return json(["seq": JSON(at), "state": state, "patch": .array(patch), "source": .string(source)])
            case .failure(let error):
                return json(["error": .string(error.message), "seq": JSON(at)], status: 404)
            }
        case "/api/status":
            return json(model.statusJSON())
        case "/api/devtools":
            switch model.devTools() {
            case .success(let lifted):
                return json(lifted, headers: [("Content-Disposition", "attachment; filename=\"storesync-devtools.json\"")])
            case .failure(let error):
                return json(["error": .string(error.message)], status: 413)
            }
        default:
            return json(["error": "no such page"], status: 404)
        }
    }

    /// The hub's actions 1…`seq` from its resume window, when it still starts at seq 1 (`nil`
    /// otherwise, or when the hub cannot be asked).
    static func hubActions(socketPath: String, through seq: UInt64) -> [SequencedAction]? {
        guard seq > 0 else { return [] }
        guard let connection = try? HubConnection(path: socketPath) else { return nil }
        defer { connection.close() }
        var actions: [SequencedAction] = []
        var next: UInt64 = 1
        while next <= seq {
            guard let page = try? connection.history(from: next, to: seq) else { return nil }
            actions += page.actions.compactMap(SequencedAction.init)
            guard page.to >= next else { return nil }
            next = page.to + 1
        }
        return actions.count == Int(seq) ? actions : nil
    }
}
