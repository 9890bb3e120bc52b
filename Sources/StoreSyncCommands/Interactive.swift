#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import StoreReplica
import SyncCore
import SyncPOSIX
import SyncLocks
import Synchronization

/// `replica-cli attach`: read lines, dispatch, print what the hub sequences.
struct Interactive<App: SyncApp> {
    let replica: Replica<App>
    /// Machine-readable output: every line one JSON object.
    let json: Bool
    /// Says on stderr when the hub holds this replica until the history is upgraded to its version.
    var waiting: WaitingReporter?
    /// Every version of the app this program carries, for what to run once the history moves past this one.
    var carried: AppVersionChain?

    func run() async {
        let me = replica.replicaID
        let app = replica.app
        let json = self.json
        if json {
            Console.out(JSON.object(["type": "attached", "hub": .string(replica.hubID), "replica": JSON(me),
                                     "app": .string(App.name), "fingerprint": .string(App.fingerprint),
                                     "seq": JSON(replica.welcomeSeq),
                                     "digest": .string(app.digest(of: replica.store.state))]).canonicalString)
        } else {
            Console.out("attached to hub \(replica.hubID) as replica \(me) — app \(App.fingerprint), seq \(replica.welcomeSeq), digest \(app.digest(of: replica.store.state)); type :help")
        }
        // Actions replayed while the link comes back (a resume) are printed after its "link
        // back" line, which the library reports once the replay is over.
        let held = HeldLines()
        // For :history and :diff (the state before the first action recorded: this one, since
        // nothing is applied before reading starts).
        let seen = SeenActions(app: app, start: replica.store.state)
        let token = replica.observeEvents { event in
            switch event {
            case .action(let seq, let origin, let id, let decoded, let action, let stamp):
                let sequenced = SequencedAction(seq: seq, origin: origin, id: id, action: action, stamp: stamp)
                // Own: any replica id this replica held in this history (they change on reconnect).
                let own = replica.isOwn(origin: origin)
                seen.record(.init(sequenced: sequenced, action: decoded, own: own))
                let line = json ? sequenced.json().canonicalString : sequenced.text(own: own)
                if case .reconnecting = replica.linkState {
                    held.hold(line)
                } else {
                    Console.out(line)
                }
            case .rejected(let id, let error):
                if json {
                    Console.out(JSON.object(["type": "rejected", "id": id.json, "error": error.json]).canonicalString)
                } else {
                    Console.out("rejected \(id): \(error.rawCode): \(error.message)")
                }
            case .connection(let change):
                if case .waiting(let notice) = change { waiting?.report(notice) }
                if json {
                    if let line = linkJSON(change, replica: replica.replicaID) { Console.out(line.canonicalString) }
                } else if let line = linkLine(change) {
                    Console.out(line)
                }
                switch change {
                case .resumed:
                    waiting?.reset()
                    for line in held.take() { Console.out(line) }
                case .rehydrated:
                    waiting?.reset()
                    // The state was replaced, not changed by actions: diffs start again from it.
                    seen.restart(at: replica.store.state)
                    for line in held.take() { Console.out(line) }
                default: break
                }
            case .hubLog(let available, let reason):
                if json {
                    var line: [JSONKey: JSON] = ["type": "hub-log", "available": .bool(available)]
                    if let reason { line["reason"] = .string(reason) }
                    Console.out(JSON.object(line).canonicalString)
                } else {
                    Console.out(hubLogLine(available: available, reason: reason))
                }
            case .disconnected(let reason):
                for line in held.take() { Console.out(line) }
                ended(reason)
            }
        }
        defer { token.cancel() }
        // On a terminal (and not --json), lines are edited in place, with history and Tab
        // completion; otherwise read as they come.
        let editor = json ? nil : LineEditor.start(prompt: "> ", historyPath: LineEditor.defaultHistoryPath(name: "attach-history"),
                                                   completions: [":state", ":digest", ":status", ":history", ":diff", ":help", ":quit"] + Self.shorthandWords)
        defer { editor?.close() }
        replica.startReading()
        while let line = editor.map({ $0.readLine() }) ?? readLine(strippingNewline: true) {
            let trimmed = line.trimmingSpaces
            if trimmed.isEmpty { continue }
            if trimmed.hasPrefix(":"), let problem = Self.colonCommandProblem(trimmed) {
                if json {
                    Console.out(JSON.object(["type": "error", "error": ["code": "bad-command", "message": .string(problem)]]).canonicalString)
                } else {
                    Console.out("error: \(problem)")
                }
                continue
            }
            if trimmed.hasPrefix(":history") || trimmed.hasPrefix(":diff") {
                showSeen(trimmed, seen: seen)
                continue
            }
            switch trimmed {
            case ":quit", ":q":
                return
            case ":help":
                Console.out(Self.helpText)
            case ":state":
                Console.out(app.encodeState(replica.store.state).prettyString)
            case ":digest":
                // Settle first: everything sequenced before the hub answers is applied here.
                // Not settled (the link is down): the error says so, and no digest follows,
                // since it would be of a state the hub has not confirmed.
                do { try await replica.sync() } catch {
                    await settleFailed(error)
                    continue
                }
                // The hub's digest at the same seq, when nothing was sequenced in between.
                let hub = try? await replica.status()
                let seq = replica.seq
                let digest = app.digest(of: replica.store.state)
                let hubDigest = hub.flatMap { $0.seq == seq ? $0.digest : nil }
                if json {
                    var line: [JSONKey: JSON] = ["type": "digest", "seq": JSON(seq), "digest": .string(digest)]
                    if let hubDigest { line["hub_digest"] = .string(hubDigest) }
                    Console.out(JSON.object(line).canonicalString)
                } else {
                    Console.out("seq \(seq) digest \(digest)")
                    if let hubDigest, hubDigest != digest {
                        Console.out("the hub's digest at seq \(seq) is \(hubDigest): this replica has diverged (its reducer differs from the hub's; give a changed reducer a new app version)")
                    }
                }
            case ":status":
                do {
                    let status = try await replica.status()
                    Console.out("hub seq \(status.seq) digest \(status.digest), replicas \(status.replicas.map { "\($0.replica)" }.joined(separator: ","))")
                } catch {
                    Console.out("error: \(error.description)")
                }
            default:
                dispatch(trimmed)
                if case .reconnecting = replica.linkState {
                    // Queued: it goes with the re-sends when the link is back (exactly once).
                    if json {
                        Console.out(JSON.object(["type": "queued", "message": .string(Self.queuedText)]).canonicalString)
                    } else {
                        Console.out("queued: \(Self.queuedText)")
                    }
                    continue
                }
                // Read-your-writes: the next line (a thunk, say) sees this one's effect.
                do { try await replica.sync() } catch { await settleFailed(error) }
            }
        }
    }

    /// `attach`'s own commands (and their short forms).
    static var colonCommands: [String] { [":state", ":digest", ":status", ":history", ":diff", ":help", ":quit", ":q"] }

    /// What `:help` prints.
    static var helpText: String {
        """
        commands: :state  :digest  :status  :history [N]  :diff [SEQ]  :help  :quit
          :history [N]   the last N actions seen here (default 20, at most 1000), with when
                         the hub sequenced them and who dispatched them
          :diff [SEQ]    the JSON Patch action SEQ made to the state (default: the newest),
                         for any of the last 1000 actions seen here
        actions (JSON or shorthand):
        \(App.commandHelp)
        """
    }

    /// `:history [N]` and `:diff [SEQ]` (their arguments were checked).
    private func showSeen(_ line: String, seen: SeenActions<App>) {
        let words = line.split(separator: " ", omittingEmptySubsequences: true)
        let argument = words.count > 1 ? UInt64(words[1]) : nil
        if words.first == ":history" {
            let entries = seen.newest(Int(min(argument ?? 20, UInt64(seen.capacity))))
            if json {
                Console.out(JSON.object(["type": "history", "actions": .array(entries.map { $0.sequenced.json() })]).canonicalString)
            } else if entries.isEmpty {
                Console.out("no action has been sequenced since this replica attached (or re-hydrated)")
            } else {
                for entry in entries { Console.out(entry.sequenced.text(own: entry.own, time: true)) }
            }
            return
        }
        switch seen.diff(argument) {
        case .patch(let entry, let patch):
            if json {
                Console.out(JSON.object(["type": "diff", "seq": JSON(entry.sequenced.seq), "patch": .array(patch)]).canonicalString)
            } else {
                Console.out(entry.sequenced.text(own: entry.own, time: true))
                Console.out("patch: \(JSON.array(patch).canonicalString)")
            }
        case .unavailable(let reason):
            if json {
                Console.out(JSON.object(["type": "error", "error": ["code": "bad-command", "message": .string(reason)]]).canonicalString)
            } else {
                Console.out("error: \(reason)")
            }
        }
    }

    /// What is wrong with a line that starts with `:`, if anything: an unknown command (with
    /// the nearest one), or words after a command that takes none.
    ///
    /// - Parameter line: The trimmed line.
    /// - Returns: One line to print, or `nil` for a well-formed command.
    static func colonCommandProblem(_ line: String) -> String? {
        let words = line.split(separator: " ", omittingEmptySubsequences: true)
        guard let first = words.first.map(String.init) else { return nil }
        guard colonCommands.contains(first) else {
            let near = nearestWord(first, among: colonCommands)
            return "unknown command \"\(ControlCharacters.escaped(first))\"\(near.map { "; did you mean \($0)?" } ?? ""); :help lists the commands"
        }
        if first == ":history" || first == ":diff" {
            let what = first == ":history" ? "a count" : "a seq"
            guard words.count <= 2 else { return "\(first) takes at most one argument, \(what)" }
            if words.count == 2, UInt64(words[1]).map({ $0 >= 1 }) != true {
                return "\(first) takes \(what) (a whole number from 1), not \"\(ControlCharacters.escaped(String(words[1])))\""
            }
            return nil
        }
        guard words.count == 1 else { return "\(first) takes no arguments (got \"\(ControlCharacters.escaped(words.dropFirst().joined(separator: " ")))\")" }
        return nil
    }

    /// The word of `words` nearest to `typed` (case ignored, at most two edits), if any.
    ///
    /// - Parameters:
    ///   - typed: What was typed.
    ///   - words: The words it may have meant.
    /// - Returns: The nearest word.
    static func nearestWord(_ typed: String, among words: [String]) -> String? {
        let lowered = typed.lowercased()
        let scored = words.map { ($0, editDistance(lowered, $0.lowercased())) }.min { $0.1 < $1.1 }
        guard let (word, distance) = scored, distance <= 2, distance < max(2, typed.count) else { return nil }
        return word
    }

    /// The first words of the app's shorthand, from its help (`word ARGS   text` lines, with
    /// alternatives as `a | b`), for Tab completion. A continuation line of a description
    /// (indented, with no two-space gap after a usage) names no command.
    static var shorthandWords: [String] {
        var words: [String] = []
        for line in App.commandHelp.split(separator: "\n") {
            let trimmed = line.drop { $0 == " " }
            guard trimmed.contains("  ") else { continue }
            guard let usage = trimmed.components(separatedBy: "  ").first else { continue }
            for alternative in usage.components(separatedBy: " | ") {
                guard let word = alternative.split(separator: " ").first,
                      word.allSatisfy({ $0.isLetter || $0 == "-" }) else { continue }
                words.append(String(word))
            }
        }
        return Array(Set(words)).sorted()
    }

    /// What `attach` says about a line typed while the hub cannot be reached.
    static var queuedText: String {
        "the hub cannot be reached now; this action is kept and sent once the link is back (it is applied once: do not type it again)"
    }

    /// A barrier failed: while the link is being re-established, say so and go on; once it
    /// has ended for good, report it and exit.
    private func settleFailed(_ error: ReplicaError) async {
        if case .disconnected(let reason) = replica.linkState { ended(reason) }
        if json {
            Console.out(JSON.object(["type": "error", "error": ["code": "unavailable", "message": .string(error.description)]]).canonicalString)
        } else {
            Console.out("error: \(error.description)")
        }
    }

    /// The link ended for good: an outdated replica is told what to run (with `--json`, the
    /// hub's `upgraded` notice first, on stdout); then it exits 1.
    private func ended(_ reason: ReplicaError) -> Never {
        guard case .appOutdated(let outdated) = reason else { exitDisconnected(reason) }
        if exiting.exchange(true, ordering: .sequentiallyConsistent) {
            while true { pause() }
        }
        if json, let notice = outdated.notice { Console.out(notice.json.canonicalString) }
        ReplicaCommand.exitOutdated(outdated, command: "attach", path: replica.socketPath, carried: carried ?? replica.app.versions)
    }

    private func dispatch(_ line: String) {
        let command: AppCommand<App.State, App.Action>
        do {
            command = try replica.app.command(line)
        } catch {
            var message = AppCodingError.message(of: error)
            if message.hasPrefix("unknown command"), let typed = line.split(separator: " ").first.map(String.init),
               let near = Self.nearestWord(typed, among: Self.shorthandWords) {
                message += " (did you mean \(near)?)"
            }
            if json {
                Console.out(JSON.object(["type": "error", "error": WireError(.badAction, message).json]).canonicalString)
            } else {
                Console.out("error: \(message)")
            }
            return
        }
        switch command {
        case .action(let wire):
            do {
                let action = try replica.app.decodeAction(wire)
                replica.store.dispatch(action)
            } catch {
                if json {
                    Console.out(JSON.object(["type": "error", "error": WireError(.badAction, error.message).json]).canonicalString)
                } else {
                    Console.out("bad-action: \(error.message)")
                }
            }
        case .local(let thunk):
            guard case .sync(let body) = thunk.body else {
                replica.store.dispatch(thunk)
                return
            }
            // Counted, so that a command that decides to send nothing says so.
            let sent = Locked(0)
            replica.store.dispatch(Thunk<App.State, App.Action> { context in
                body(StoreContext(getState: context.getState, dispatch: { item in
                    sent.withLock { $0 += 1 }
                    context.dispatch(item)
                }))
            })
            if sent.withLock({ $0 }) == 0 {
                let text = replica.app.nothingSent(by: line, state: replica.store.state)
                if json {
                    Console.out(JSON.object(["type": "nothing-sent", "message": .string(text)]).canonicalString)
                } else {
                    Console.out(text)
                }
            }
        }
    }
}

/// Set by the first thread that reports the end of the connection.
private let exiting = Atomic<Bool>(false)

/// Reports why the connection ended and exits 1, exactly once: the reader's observer and the
/// input loop may both learn of it; the second caller waits for the first to end the process.
func exitDisconnected(_ reason: ReplicaError) -> Never {
    if exiting.exchange(true, ordering: .sequentiallyConsistent) {
        while true { pause() }
    }
    Console.error("\(ReplicaCommand.program): \(reason.description)")
    exit(1)
}

extension String {
    var trimmingSpaces: String {
        var text = Substring(self)
        while let first = text.first, first == " " || first == "\t" || first == "\r" { text.removeFirst() }
        while let last = text.last, last == " " || last == "\t" || last == "\r" { text.removeLast() }
        return String(text)
    }
}

/// Lines `attach` holds back until the link-back line (the actions a resume replays).
final class HeldLines: Sendable {
    private let lines = Locked<[String]>([])

    /// Keeps a line for later.
    func hold(_ line: String) { lines.withLock { $0.append(line) } }

    /// The lines held so far, oldest first; none are kept.
    func take() -> [String] { lines.withLock { lines in defer { lines = [] }; return lines } }
}
