import SyncProtocol

/// One parsed line of `replica-cli attach --json` / `watch` output.
struct EventLine {
    let json: JSON
    var type: String? { json["type"]?.stringValue }
    var seq: Int? { json["seq"]?.intValue }
    var origin: Int? { json["origin"]?.intValue }
    var id: Int? { json["id"]?.intValue }
    var isAction: Bool { type == nil && seq != nil }

    init?(_ line: String) {
        guard let json = try? JSON(parsing: line) else { return nil }
        self.json = json
    }
}

extension ChildProcess {
    /// Output lines parsed as JSON (lines that are not JSON are skipped).
    var events: [EventLine] { lines.compactMap(EventLine.init) }

    /// The `{"type":"attached",…}` line, once printed.
    func attachedLine() async throws -> EventLine {
        let line = try await waitForLine("the attached line") { $0.hasPrefix("{") && $0.contains(#""type":"attached""#) }
        guard let event = EventLine(line) else { throw HarnessError("unparsable attached line \(line)") }
        return event
    }

    /// Writes a whole script to stdin from a thread of its own (the pipe may fill up).
    func feed(_ script: String) {
        let data = script
        Thread.detachNewThread { [self] in write(data) }
    }
}

import Foundation
