import SyncCore

/// A log shared by hubs on several hosts, on a NATS JetStream stream (work in progress).
package final class JetStreamLog: HubLog {
    private let configuration: SharedLogConfiguration

    package init(configuration: SharedLogConfiguration, fingerprint: String, dataDirectory: String?,
                 note: @escaping @Sendable (String) -> Void) {
        self.configuration = configuration
    }

    package func open() throws(StorageError) -> LogStart {
        throw StorageError("the NATS JetStream log is not available in this build")
    }
    package func propose(_ records: [LogRecord], expectingLast: UInt64) {}
    package func flush() {}
    package func poll(into events: inout [LogEvent]) {}
    package var readiness: LogReadiness? { nil }
    package var nextDeadline: ContinuousClock.Instant? { nil }
    package func reserveReplicaIDs(from next: Int, count: Int) throws(StorageError) -> Range<Int> { next..<(next + count) }
    package func writeSnapshot(_ snapshot: StoredSnapshot) throws(StorageError) {}
    package func probe() -> Bool { false }
    package var status: LogStatus { LogStatus(kind: "nats", location: configuration.redacted) }
    package var isShared: Bool { true }
    package var mayRefuse: Bool { true }
    package func close() {}
}
