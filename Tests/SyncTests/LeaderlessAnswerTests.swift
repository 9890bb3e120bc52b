@testable import StoreHub
import SyncProtocol
import Testing

/// `STREAM.INFO` answers a hub takes as the stream's word, and the ones it does not: while a
/// replicated stream has no leader, nats-server 2.9 lets each of its servers answer from its
/// own copy (the several-hosts test caught a hub stopping on a cut-off server's shorter copy).
@Suite("Shared log: a leaderless stream's STREAM.INFO is no verdict")
struct LeaderlessAnswerTests {
    @Test("an R3 answer that names its leader counts")
    func leaderAnswers() throws {
        let info = try JSON(parsing: Array(#"{"config":{"name":"S","num_replicas":3},"state":{"last_seq":7},"cluster":{"name":"c","leader":"n1","replicas":[{"name":"n2","current":true}]}}"#.utf8))
        #expect(!JetStreamLog.isLeaderlessAnswer(info))
    }

    @Test("an R3 answer without a leader is one member's copy", arguments: [
        #"{"config":{"name":"S","num_replicas":3},"state":{"last_seq":4},"cluster":{"name":"c","replicas":[{"name":"n1"}]}}"#,
        #"{"config":{"name":"S","num_replicas":3},"state":{"last_seq":4},"cluster":{"name":"c","leader":""}}"#,
        #"{"config":{"name":"S","num_replicas":3},"state":{"last_seq":4}}"#,
    ])
    func memberAnswers(text: String) throws {
        #expect(JetStreamLog.isLeaderlessAnswer(try JSON(parsing: Array(text.utf8))))
    }

    @Test("a single-replica stream has no election: its answer counts with or without a cluster")
    func singleReplica() throws {
        for text in [#"{"config":{"name":"S","num_replicas":1},"state":{"last_seq":4}}"#,
                     #"{"config":{"name":"S"},"state":{"last_seq":4},"cluster":{"leader":"solo"}}"#] {
            #expect(!JetStreamLog.isLeaderlessAnswer(try JSON(parsing: Array(text.utf8))))
        }
    }
}
