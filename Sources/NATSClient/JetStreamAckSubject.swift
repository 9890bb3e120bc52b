/// The metadata JetStream puts in the reply subject of a message a consumer delivers.
///
/// Two forms exist, and a current server may send either:
/// - v1, 9 tokens: `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>`;
/// - v2, 11 or 12 tokens: `$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>[.<token>]`
///   (`_` as the domain when there is none; nats-server 2.15 sends it for `js_ack_fc_v2`).
///
/// Anything else, or a number that is not a plain decimal, is not an acknowledgement subject:
/// ``init(_:)`` then gives `nil`, and the caller treats the delivery as malformed.
public struct JetStreamAckSubject: Sendable, Equatable {
    /// The stream's name.
    public let stream: String
    /// The consumer's name.
    public let consumer: String
    /// How many times this message was delivered.
    public let delivered: UInt64
    /// The message's sequence in the stream.
    public let streamSequence: UInt64
    /// The message's sequence in the consumer.
    public let consumerSequence: UInt64
    /// When the message was stored, in nanoseconds since 1970.
    public let timestamp: UInt64
    /// How many messages of the consumer's filter follow this one in the stream.
    public let pending: UInt64

    /// Reads a reply subject.
    ///
    /// - Parameter reply: The reply subject of a delivered message.
    /// - Returns: Its metadata, or `nil` when it is not a JetStream acknowledgement subject of
    ///   either form.
    public init?(_ reply: String) {
        let tokens = reply.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard tokens.count == 9 || tokens.count == 11 || tokens.count == 12,
              tokens[0].elementsEqual("$JS".utf8), tokens[1].elementsEqual("ACK".utf8) else { return nil }
        // The tokens after the domain and account hash (v2) have the same order as v1's.
        let base = tokens.count == 9 ? 2 : 4
        guard let delivered = Self.number(tokens[base + 2]), let streamSequence = Self.number(tokens[base + 3]),
              let consumerSequence = Self.number(tokens[base + 4]), let timestamp = Self.number(tokens[base + 5]),
              let pending = Self.number(tokens[base + 6]), !tokens[base].isEmpty, !tokens[base + 1].isEmpty else { return nil }
        stream = String(decoding: tokens[base], as: UTF8.self)
        consumer = String(decoding: tokens[base + 1], as: UTF8.self)
        self.delivered = delivered
        self.streamSequence = streamSequence
        self.consumerSequence = consumerSequence
        self.timestamp = timestamp
        self.pending = pending
    }

    /// A token as a decimal number: 1 to 20 digits, no sign, no overflow.
    private static func number(_ token: Substring.UTF8View) -> UInt64? {
        guard !token.isEmpty, token.count <= 20 else { return nil }
        var value: UInt64 = 0
        for byte in token {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            let (times, overflowA) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflowB) = times.addingReportingOverflow(UInt64(byte &- UInt8(ascii: "0")))
            guard !overflowA, !overflowB else { return nil }
            value = sum
        }
        return value
    }
}
