import SyncCore

/// Where a shared log's records and snapshots go: the subjects of the stream.
///
/// A stream starts in ``actions``: records on `storesync.STREAM.actions`, shared snapshots on
/// `…meta.head` and `…meta.chunks`, as every hub release wrote them. Hubs that predate upgrade
/// records read and write only those subjects, and would skip an upgrade record like any
/// message that is not a record, then write records of their own on the old history: a fork.
///
/// So before the first upgrade record is written, the hub that writes it moves the stream to
/// ``records`` (a `STREAM.UPDATE` of its subjects): records go on `storesync.STREAM.records`,
/// and the stream no longer captures `…actions`. From then on a hub that predates upgrades
/// reads every new record as "not on the actions subject" and skips it, so it applies nothing
/// after the last record it knew, and every record it proposes is refused by NATS (no stream
/// takes the subject): it never writes on the upgraded history. Snapshots of the new layout go
/// on `…meta.state.head` and `…meta.state.chunks`, which older hubs never read, so none of them
/// restarts from a migrated state it would read under its old reducer.
///
/// The move is one-way, and every hub learns it from the stream's configuration
/// (`STREAM.INFO`), so a hub that moved the stream and died before its upgrade record landed
/// leaves no hub writing where the others no longer read.
package enum StreamLayout: String, Sendable, Equatable {
    /// Records on `…actions`, snapshots on `…meta.head` and `…meta.chunks` (format 2).
    case actions
    /// Records on `…records`, snapshots on `…meta.state.head` and `…meta.state.chunks`.
    case records

    /// The layout a stream's configuration says: ``records`` once its subjects take
    /// `…records` and no longer `…actions`.
    ///
    /// - Parameters:
    ///   - info: A `STREAM.INFO` answer (or a `STREAM.UPDATE` one).
    ///   - names: The stream's names.
    /// - Returns: The layout, or `nil` when the answer names no subjects.
    static func of(_ info: JSON, names: JetStreamLog.Names) -> StreamLayout? {
        guard let subjects = info["config"]?["subjects"]?.arrayValue?.compactMap(\.stringValue) else { return nil }
        return subjects.contains(names.records) && !subjects.contains(names.actions) ? .records : .actions
    }

    /// The stream configuration that moves a stream to ``records``: its current configuration
    /// with `…actions` replaced by `…records` in its subjects (everything else as it is).
    ///
    /// - Parameters:
    ///   - info: A fresh `STREAM.INFO` answer.
    ///   - names: The stream's names.
    /// - Returns: The body of the `STREAM.UPDATE`, or `nil` when the answer has no configuration.
    static func movedConfiguration(_ info: JSON, names: JetStreamLog.Names) -> JSON? {
        guard case .object(var config)? = info["config"], let subjects = config["subjects"]?.arrayValue else { return nil }
        var moved = subjects.filter { $0.stringValue != names.actions && $0.stringValue != names.records }
        moved.append(.string(names.records))
        config["subjects"] = .array(moved)
        return .object(config)
    }

    /// The subject records are written on.
    func recordSubject(_ names: JetStreamLog.Names) -> String {
        self == .actions ? names.actions : names.records
    }

    /// The subject of shared snapshot heads.
    func headSubject(_ names: JetStreamLog.Names) -> String {
        self == .actions ? names.head : names.stateHead
    }

    /// The subject of shared snapshot chunks.
    func chunkSubject(_ names: JetStreamLog.Names) -> String {
        self == .actions ? names.chunks : names.stateChunks
    }
}

/// A hub reading a shared log, as the stream's consumers show it.
///
/// Every hub reads the stream with a consumer, and a hub that reads upgrade records says so in
/// its consumer's metadata (``metadata(label:versions:)``): its name and the app versions it
/// carries. A consumer shaped like a hub's (pushed, unacknowledged, flow-controlled, no filter)
/// that says nothing is a hub that predates upgrades. Other consumers (an operator's tools) are
/// not hubs.
package struct LogPeer: Sendable, Equatable {
    /// How the hub names itself (`host pid N`), or the consumer's name for one that says nothing.
    package var name: String
    /// The app versions it carries, oldest first; `nil` for a hub that predates upgrade records.
    package var versions: [String]?

    package init(name: String, versions: [String]?) {
        self.name = name
        self.versions = versions
    }

    /// Whether it reads upgrade records.
    package var readsUpgrades: Bool { versions != nil }

    /// The metadata key naming the hub.
    static let hubKey = "storesync-hub"
    /// The metadata key listing its versions (a JSON array of fingerprints).
    static let versionsKey = "storesync-versions"
    /// The most bytes of versions published (a longer chain is cut, oldest versions first).
    static let maxVersionsBytes = 4_096

    /// What a hub's consumer says about it.
    ///
    /// - Parameters:
    ///   - label: How the hub names itself.
    ///   - versions: The versions it carries, oldest first.
    /// - Returns: The consumer's `metadata`.
    package static func metadata(label: String, versions: [String]) -> JSON {
        var kept = versions
        while kept.count > 1, JSON.array(kept.map { .string($0) }).canonicalBytes.count > maxVersionsBytes { kept.removeFirst() }
        return .object([JSONKey(hubKey): .string(String(label.prefix(256))),
                        JSONKey(versionsKey): .string(String(decoding: JSON.array(kept.map { .string($0) }).canonicalBytes, as: UTF8.self))])
    }

    /// The hubs a `CONSUMER.LIST` answer shows.
    ///
    /// - Parameter answer: The answer (`{"consumers":[{"name":…,"config":{…}},…]}`).
    /// - Returns: One peer per hub (hubs that name themselves once each) and per hub-shaped
    ///   consumer that says nothing, in the answer's order.
    package static func peers(in answer: JSON) -> [LogPeer] {
        var peers: [LogPeer] = []
        var seen: Set<String> = []
        for consumer in answer["consumers"]?.arrayValue ?? [] {
            guard let config = consumer["config"] else { continue }
            let name = consumer["name"]?.stringValue ?? "?"
            if let label = config["metadata"]?[hubKey]?.stringValue {
                let listed = config["metadata"]?[versionsKey]?.stringValue
                    .flatMap { try? JSON(parsing: Array($0.utf8)) }?.arrayValue?.compactMap(\.stringValue) ?? []
                // A hub's consumers (one replaced by the next after a stall) are one hub.
                guard seen.insert(String(label.prefix(256))).inserted else { continue }
                peers.append(LogPeer(name: String(label.prefix(256)), versions: listed))
            } else if isHubShaped(config) {
                peers.append(LogPeer(name: "consumer " + String(name.prefix(64)), versions: nil))
            }
        }
        return peers
    }

    /// Whether a consumer's configuration is the one every hub release creates to read the
    /// stream: delivered to a subject, no acknowledgements, flow control, no durable name and
    /// no subject filter.
    static func isHubShaped(_ config: JSON) -> Bool {
        config["deliver_subject"]?.stringValue != nil && config["ack_policy"]?.stringValue == "none"
            && config["flow_control"]?.boolValue == true && config["durable_name"]?.stringValue == nil
            && (config["filter_subject"]?.stringValue ?? "").isEmpty
            && (config["filter_subjects"]?.arrayValue ?? []).isEmpty
    }
}
