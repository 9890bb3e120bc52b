import SyncCore

/// The state's canonical bytes and digest at one seq: made at most once per seq, and shared
/// by every `welcome` and `status` at that seq (one reference-counted buffer, never copied per
/// connection).
///
/// Not a snapshot: a ``StoredSnapshot`` is what a log keeps (the state's JSON with the
/// sessions and the replica-id lease, at a seq); this is only what is sent.
struct EncodedState {
    /// The seq it is the state at.
    let seq: UInt64
    /// Its canonical JSON bytes.
    let bytes: SharedBytes
    /// Their digest (FNV-1a 64, hex), as `welcome`, `status` and `checkpoint` carry it.
    let digest: String

    /// Encodes the state at a seq once.
    ///
    /// - Parameters:
    ///   - seq: The seq.
    ///   - bytes: The state's canonical JSON bytes.
    init(seq: UInt64, bytes: [UInt8]) {
        self.seq = seq
        self.bytes = SharedBytes(bytes)
        self.digest = Digest.hex(Digest.fnv1a64(bytes))
    }
}
