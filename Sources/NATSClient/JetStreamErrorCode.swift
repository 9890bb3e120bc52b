/// The JetStream API's error codes (`err_code`) that a client must tell apart, by name.
///
/// The numbers are nats-server's (`server/errors.json`); each name says what the server means.
public enum JetStreamErrorCode {
    /// 10005: "no suitable peers for placement": a cluster that does not yet know enough
    /// servers for the replicas asked (a cluster still starting). It passes.
    public static let noSuitablePeers = 10005
    /// 10008: "JetStream system temporarily unavailable" (an election, a catch-up).
    public static let temporarilyUnavailable = 10008
    /// 10037: "no message found".
    public static let noMessageFound = 10037
    /// 10058: "stream name already in use with a different configuration".
    public static let streamNameInUse = 10058
    /// 10059: "stream not found".
    public static let streamNotFound = 10059
    /// 10065: "subjects overlap with an existing stream".
    public static let subjectsOverlap = 10065
    /// 10070: "wrong last msg ID" (`Nats-Expected-Last-Msg-Id` did not match).
    public static let wrongLastMessageID = 10070
    /// 10071: "wrong last sequence: N" (`Nats-Expected-Last-Sequence` did not match; N is the
    /// stream's last sequence).
    public static let wrongLastSequence = 10071
    /// 10074: "JetStream not currently available" (a server still recovering its streams).
    public static let notCurrentlyAvailable = 10074
    /// 10158: "duplicate message id is in process" (nats-server 2.11+): a copy with the same
    /// `Nats-Msg-Id` is being stored right now. Whether it will be is not known yet.
    public static let duplicateInProcess = 10158
    /// 10167: the stream's ingest limits were reached (nats-server 2.11+): nothing was stored
    /// now; sending again later may store it.
    public static let ingestLimitReached = 10167
}
