/// An upgrade of the history's app version, as every attached replica hears of it:
/// `{"type":"upgraded","seq":N,"from":"todos@1","to":"todos@2","digest":"…"}`.
///
/// Sent in order in the action stream, right after every action before the upgrade and
/// once the upgrade is durable. The state at `seq` is the state at `seq - 1` migrated from
/// `from` to `to`, and `digest` is its digest. The hub then detaches the connection: a
/// replica of `to` attaches again (and gets a full welcome), one of `from` is outdated.
public struct UpgradeNotice: Sendable, Equatable {
    /// The upgrade's seq (it takes one, as an action does).
    public var seq: UInt64
    /// The fingerprint the history ran before.
    public var from: String
    /// The fingerprint it runs from `seq` on.
    public var to: String
    /// The digest of the migrated state.
    public var digest: String

    /// Creates a notice.
    ///
    /// - Parameters:
    ///   - seq: The upgrade's seq.
    ///   - from: The fingerprint before.
    ///   - to: The fingerprint after.
    ///   - digest: The migrated state's digest.
    public init(seq: UInt64, from: String, to: String, digest: String) {
        self.seq = seq
        self.from = from
        self.to = to
        self.digest = digest
    }
}

/// The answer to an `upgrade` request: what the upgrade did, or (with `dry_run`) would do.
///
/// `{"type":"upgrade","id":…,"dry_run":false,"changed":true,"seq":N,"from":"todos@1",
/// "to":"todos@2","digest":"…","state_bytes":B,"detaches":[{"replica":3,"name":"a","fingerprint":"todos@1"}]}`.
/// A request for the version the history already runs is answered with `changed` false.
public struct UpgradeReport: Sendable, Equatable {
    /// The request's id.
    public var id: DispatchID
    /// Whether nothing was changed on purpose (`--dry-run`).
    public var dryRun: Bool
    /// Whether the history moved to a new version (false: it already ran `to`, or a dry run).
    public var changed: Bool
    /// The upgrade's seq; for a dry run or no change, the seq the state was taken at.
    public var seq: UInt64
    /// The fingerprint before.
    public var from: String
    /// The fingerprint after.
    public var to: String
    /// The digest of the migrated state (of the current state when nothing changed).
    public var digest: String
    /// The size of the migrated state's canonical JSON, in bytes.
    public var stateBytes: Int
    /// The attached replicas the upgrade detaches (all of them: each must attach again).
    public var detaches: [Detached]
    /// On a shared log: the hubs reading it that lack the target version (`hubs_lacking`,
    /// present only when there are some). Those that carry an older version of the chain stop
    /// at the upgrade record; those that predate upgrade records (`versions` `nil`) refuse the
    /// upgrade until they are replaced.
    public var hubsLacking: [Hub] = []

    /// A hub of a shared log that lacks the target version.
    public struct Hub: Sendable, Equatable {
        /// How it names itself (`host pid N`).
        public var name: String
        /// The versions it carries; `nil` when it predates upgrade records.
        public var versions: [String]?

        /// Creates an entry.
        ///
        /// - Parameters:
        ///   - name: How it names itself.
        ///   - versions: The versions it carries, or `nil`.
        public init(name: String, versions: [String]?) {
            self.name = name
            self.versions = versions
        }
    }

    /// One replica the upgrade detaches.
    public struct Detached: Sendable, Equatable {
        /// Its replica id.
        public var replica: Int
        /// Its name (`""`: none).
        public var name: String
        /// The fingerprint its `hello` named (`nil`: a generic client that named none).
        public var fingerprint: String?

        /// Creates an entry.
        ///
        /// - Parameters:
        ///   - replica: The replica id.
        ///   - name: Its name.
        ///   - fingerprint: The fingerprint its `hello` named.
        public init(replica: Int, name: String, fingerprint: String?) {
            self.replica = replica
            self.name = name
            self.fingerprint = fingerprint
        }
    }

    /// Creates a report.
    ///
    /// - Parameters:
    ///   - id: The request's id.
    ///   - dryRun: Whether it was a dry run.
    ///   - changed: Whether the history moved to a new version.
    ///   - seq: The upgrade's seq.
    ///   - from: The fingerprint before.
    ///   - to: The fingerprint after.
    ///   - digest: The migrated state's digest.
    ///   - stateBytes: The migrated state's size.
    ///   - detaches: The replicas it detaches.
    public init(id: DispatchID, dryRun: Bool, changed: Bool, seq: UInt64, from: String, to: String, digest: String,
                stateBytes: Int, detaches: [Detached] = []) {
        self.id = id
        self.dryRun = dryRun
        self.changed = changed
        self.seq = seq
        self.from = from
        self.to = to
        self.digest = digest
        self.stateBytes = stateBytes
        self.detaches = detaches
    }
}

/// What a `hello` waits for: the hub holds it, keeps the connection, and welcomes it once
/// the history reaches the replica's version.
///
/// `{"type":"waiting","for":"upgrade","fingerprint":"todos@2","seq":N,"message":"…"}`:
/// the replica runs `fingerprint`, the history still runs an older version of the same
/// app at `seq`, and the hub carries the newer one, so an upgrade will attach it.
public struct WaitingNotice: Sendable, Equatable {
    /// What it waits for (`"upgrade"`; a client treats another value as a reason to wait too).
    public var reason: String
    /// The fingerprint it waits for.
    public var fingerprint: String
    /// The hub's applied seq when it started waiting.
    public var seq: UInt64
    /// For a person: what it waits for and what would end it.
    public var message: String

    /// Creates a notice.
    ///
    /// - Parameters:
    ///   - reason: What it waits for.
    ///   - fingerprint: The fingerprint it waits for.
    ///   - seq: The hub's applied seq.
    ///   - message: For a person.
    public init(reason: String, fingerprint: String, seq: UInt64, message: String) {
        self.reason = reason
        self.fingerprint = fingerprint
        self.seq = seq
        self.message = message
    }
}

extension UpgradeNotice {
    /// The wire form.
    public var json: JSON {
        ["type": "upgraded", "seq": JSON(seq), "from": .string(from), "to": .string(to), "digest": .string(digest)]
    }
}

extension UpgradeReport {
    private var baseJSON: JSON {
        ["type": "upgrade", "id": id.json, "dry_run": .bool(dryRun), "changed": .bool(changed), "seq": JSON(seq),
         "from": .string(from), "to": .string(to), "digest": .string(digest), "state_bytes": JSON(stateBytes),
         "detaches": .array(detaches.map { entry in
             ["replica": JSON(entry.replica), "name": .string(entry.name),
              "fingerprint": entry.fingerprint.map { .string($0) } ?? .null]
         })]
    }

    /// The wire form (`hubs_lacking` only when some hub lacks the target).
    public var json: JSON {
        guard case .object(var members) = baseJSON else { return baseJSON }
        if !hubsLacking.isEmpty {
            members["hubs_lacking"] = .array(hubsLacking.map { hub in
                ["hub": .string(hub.name), "versions": hub.versions.map { .array($0.map { .string($0) }) } ?? .null]
            })
        }
        return .object(members)
    }
}

extension WaitingNotice {
    /// The wire form.
    public var json: JSON {
        ["type": "waiting", "for": .string(reason), "fingerprint": .string(fingerprint), "seq": JSON(seq),
         "message": .string(message)]
    }
}
