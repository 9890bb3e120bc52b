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

/// `replica-cli attach`: read lines, dispatch, print what the hub sequences.
struct Interactive<App: SyncApp> {
    let replica: Replica<App>

    func run() async {
        let me = replica.replicaID
        let app = replica.app
        Console.out("attached to hub \(replica.hubID) as replica \(me) — app \(App.fingerprint), seq \(replica.welcomeSeq), digest \(app.digest(of: replica.store.state)); type :help")
        let token = replica.observeEvents { event in
            switch event {
            case .action(let seq, let origin, _, _, let json):
                Console.out("#\(seq) from replica \(origin)\(origin == me ? " (you)" : ""): \(json.canonicalString)")
            case .rejected(let id, let error):
                Console.out("rejected \(id): \(error.rawCode): \(error.message)")
            case .disconnected(let reason):
                Console.error("replica-cli: \(reason.description)")
                exit(1)
            }
        }
        defer { token.cancel() }
        while let line = readLine(strippingNewline: true) {
            let trimmed = line.trimmingSpaces
            if trimmed.isEmpty { continue }
            switch trimmed {
            case ":quit", ":q":
                return
            case ":help":
                Console.out("commands: :state  :digest  :status  :help  :quit\nactions (JSON or shorthand):\n\(App.commandHelp)")
            case ":state":
                Console.out(app.encodeState(replica.store.state).prettyString)
            case ":digest":
                Console.out("seq \(replica.seq) digest \(app.digest(of: replica.store.state))")
            case ":status":
                do {
                    let status = try await replica.status()
                    Console.out("hub seq \(status.seq) digest \(status.digest), replicas \(status.replicas.map { "\($0.replica)" }.joined(separator: ","))")
                } catch {
                    Console.out("error: \(error.description)")
                }
            default:
                dispatch(trimmed)
                // Read-your-writes: the next line (a thunk, say) sees this one's effect.
                do { try await replica.sync() } catch { Console.error("replica-cli: \(error.description)"); exit(1) }
            }
        }
    }

    private func dispatch(_ line: String) {
        let command: AppCommand<App.State, App.Action>
        do {
            command = try replica.app.command(line)
        } catch {
            Console.out("error: \(error.message) (:help lists the commands)")
            return
        }
        switch command {
        case .action(let json):
            do {
                let action = try replica.app.decodeAction(json)
                replica.store.dispatch(action)
            } catch {
                Console.out("bad-action: \(error.message)")
            }
        case .local(let thunk):
            replica.store.dispatch(thunk)
        }
    }
}

extension String {
    var trimmingSpaces: String {
        var text = Substring(self)
        while let first = text.first, first == " " || first == "\t" || first == "\r" { text.removeFirst() }
        while let last = text.last, last == " " || last == "\t" || last == "\r" { text.removeLast() }
        return String(text)
    }
}
