import SyncPOSIX

/// Who may use the hub, decided from the peer credentials of each connection.
///
/// The socket file's mode is the first gate (the kernel's); this is the second, which a
/// mode widened by mistake, a shared directory, or a socket passed by a service manager
/// cannot open: by default only the hub's own user and root pass; the operator adds users
/// (`--allow-uid`) and a group (`--socket-group`, whose members pass).
struct AccessPolicy {
    /// The hub's effective user id.
    let hubUID: UInt32
    /// Users admitted besides the hub's and root.
    let allowedUIDs: Set<UInt32>
    /// A group whose members are admitted.
    let group: UInt32?
    /// Group membership answers, per uid, re-asked after a minute (the look-up may be slow).
    private var membership: [UInt32: (member: Bool, at: ContinuousClock.Instant)] = [:]

    init(hubUID: UInt32, allowedUIDs: Set<UInt32>, group: UInt32?) {
        self.hubUID = hubUID
        self.allowedUIDs = allowedUIDs
        self.group = group
    }

    /// Whether a peer may use the hub.
    ///
    /// Group membership is the peer's own at connect time when the kernel says
    /// (`SO_PEERGROUPS`: its effective and supplementary groups, including groups it gained
    /// with `newgrp` or `sg`); otherwise it comes from the group database.
    ///
    /// - Parameters:
    ///   - peer: Its credentials.
    ///   - groups: The peer's supplementary groups, asked only when a group decides (`nil`:
    ///     the system cannot tell).
    ///   - now: The time (for the membership cache).
    /// - Returns: `true` when admitted.
    mutating func admits(_ peer: PeerCredentials, groups: () -> [UInt32]? = { nil },
                         now: ContinuousClock.Instant = .now) -> Bool {
        if peer.uid == hubUID || peer.uid == 0 || allowedUIDs.contains(peer.uid) { return true }
        guard let group else { return false }
        if peer.gid == group { return true }
        if let kernel = groups() { return kernel.contains(group) }
        if let known = membership[peer.uid], now - known.at < .seconds(60) { return known.member }
        let member = Accounts.isMember(uid: peer.uid, primary: peer.gid, of: group)
        if membership.count > 1024 { membership.removeAll() }
        membership[peer.uid] = (member, now)
        return member
    }

    /// Who is admitted, for the refusal and the start-up line.
    var description: String {
        var parts = ["uid \(hubUID) (\(Accounts.userName(hubUID)), the hub's user)", "root"]
        for uid in allowedUIDs.sorted() { parts.append("uid \(uid) (\(Accounts.userName(uid)))") }
        if let group { parts.append("members of group \(group)") }
        return parts.joined(separator: ", ")
    }
}
