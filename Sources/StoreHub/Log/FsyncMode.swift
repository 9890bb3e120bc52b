/// When the journal's records reach the disk, relative to their broadcast.
public enum FsyncMode: String, Sendable, CaseIterable {
    /// Each record is written and fsynced on its own before its action is broadcast: an
    /// acknowledged action survives a crash or a power loss. The slowest mode.
    case always
    /// Group commit: the actions sequenced in one pass of the event loop are written and
    /// share one fsync, before any of them is broadcast. Same promise as `always` (nothing
    /// acknowledged is lost, even on power loss), at a fraction of the fsyncs. The default.
    case batch
    /// Records are written (to the OS) before broadcast but never fsynced: a crash of the hub
    /// loses nothing, a power loss or kernel crash can lose the last seconds the OS had not
    /// flushed; recovery then yields a consistent prefix.
    case never
}
