/// Length-prefixed framing: a 4-byte unsigned big-endian payload length N, then N payload bytes.
public enum Frame {
    /// The size of the length header in bytes.
    public static let headerSize = 4
    /// The default largest payload a ``FrameDecoder`` accepts (1 MiB).
    public static let defaultMaxPayloadBytes = 1 << 20
    /// The largest payload the 32-bit length header can announce: 4 GiB − 1.
    public static let maxPayloadBytes = Int(UInt32.max)

    /// Appends a big-endian 4-byte length header.
    ///
    /// - Parameters:
    ///   - length: The payload length the header announces.
    ///   - buffer: The buffer to append the 4 header bytes to.
    /// - Throws: ``FrameError/tooLarge(length:limit:)`` when `length` exceeds ``maxPayloadBytes``
    ///   (nothing is appended), ``FrameError/emptyFrame`` when it is 0.
    public static func appendHeader(length: Int, to buffer: inout [UInt8]) throws(FrameError) {
        guard length > 0 else { throw .emptyFrame }
        guard length <= maxPayloadBytes else { throw .tooLarge(length: length, limit: maxPayloadBytes) }
        let value = UInt32(truncatingIfNeeded: length)
        buffer.append(UInt8(truncatingIfNeeded: value >> 24))
        buffer.append(UInt8(truncatingIfNeeded: value >> 16))
        buffer.append(UInt8(truncatingIfNeeded: value >> 8))
        buffer.append(UInt8(truncatingIfNeeded: value))
    }

    /// Appends one frame (header and payload) to `buffer`.
    ///
    /// - Parameters:
    ///   - payload: The payload bytes.
    ///   - buffer: The buffer to append the frame to.
    /// - Throws: ``FrameError`` when the payload is empty or longer than ``maxPayloadBytes``
    ///   (nothing is appended).
    public static func append(payload: UnsafeRawBufferPointer, to buffer: inout [UInt8]) throws(FrameError) {
        try appendHeader(length: payload.count, to: &buffer)
        buffer.append(contentsOf: payload)
    }

    /// Appends one frame (header and payload) to `buffer`.
    ///
    /// - Parameters:
    ///   - payload: The payload bytes.
    ///   - buffer: The buffer to append the frame to.
    /// - Throws: ``FrameError`` when the payload is empty or longer than ``maxPayloadBytes``
    ///   (nothing is appended).
    public static func append(payload: [UInt8], to buffer: inout [UInt8]) throws(FrameError) {
        try appendHeader(length: payload.count, to: &buffer)
        buffer.append(contentsOf: payload)
    }

    /// Encodes a JSON value as one frame whose payload is its RFC 8785 canonical bytes.
    ///
    /// - Parameter json: The value to send.
    /// - Returns: The header followed by ``JSON/canonicalBytes``.
    /// - Throws: ``FrameError/tooLarge(length:limit:)`` when the canonical form is longer than
    ///   ``maxPayloadBytes``.
    public static func encode(_ json: JSON) throws(FrameError) -> [UInt8] {
        var buffer: [UInt8] = [0, 0, 0, 0]
        buffer.reserveCapacity(64)
        json.writeCanonical(into: &buffer)
        try patchHeader(of: &buffer, at: 0)
        return buffer
    }

    /// The payload length announced by the header at `offset` (its 4 bytes must be there); no
    /// limit is checked.
    ///
    /// - Parameters:
    ///   - bytes: Holds a header at `offset`.
    ///   - offset: Where the header starts.
    /// - Returns: The announced length.
    @inline(__always)
    package static func announcedLength(in bytes: UnsafeBufferPointer<UInt8>, at offset: Int) -> Int {
        Int(bytes[offset]) << 24 | Int(bytes[offset + 1]) << 16 | Int(bytes[offset + 2]) << 8 | Int(bytes[offset + 3])
    }

    /// Writes the length header of the frame that starts at `start` and runs to the end of `buffer`.
    ///
    /// - Parameters:
    ///   - buffer: Holds a 4-byte placeholder at `start`, then the payload.
    ///   - start: Where the frame starts.
    /// - Throws: ``FrameError/tooLarge(length:limit:)`` when the payload does not fit the header;
    ///   the frame is then removed from `buffer`.
    static func patchHeader(of buffer: inout [UInt8], at start: Int) throws(FrameError) {
        let length = buffer.count - start - headerSize
        guard length <= maxPayloadBytes else {
            buffer.removeSubrange(start...)
            throw .tooLarge(length: length, limit: maxPayloadBytes)
        }
        let value = UInt32(truncatingIfNeeded: length)
        buffer[start] = UInt8(truncatingIfNeeded: value >> 24)
        buffer[start + 1] = UInt8(truncatingIfNeeded: value >> 16)
        buffer[start + 2] = UInt8(truncatingIfNeeded: value >> 8)
        buffer[start + 3] = UInt8(truncatingIfNeeded: value)
    }
}

/// Why a byte stream is not a valid sequence of frames. Either error leaves the stream unusable.
public enum FrameError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A header announced a zero-length payload, which the protocol never sends.
    case emptyFrame
    /// A header announced a payload longer than the decoder's limit.
    case tooLarge(length: Int, limit: Int)

    /// A one-line explanation of the error.
    public var description: String {
        switch self {
        case .emptyFrame:
            "invalid frame: zero-length payload"
        case .tooLarge(let length, let limit):
            "invalid frame: payload of \(length) bytes exceeds the limit of \(limit) bytes"
        }
    }
}

/// Splits a byte stream, received in chunks of any size, back into frame payloads.
///
/// Bytes are buffered with a read offset; consumed bytes are discarded lazily (when the buffer is
/// drained, or when the consumed prefix is at least as large as what remains), so the cost is
/// amortised O(1) per byte however the stream is split.
public struct FrameDecoder: Sendable {
    /// The largest payload accepted; a longer announced length throws ``FrameError/tooLarge(length:limit:)``.
    public let maxPayloadBytes: Int
    private var storage: [UInt8] = []
    private var readOffset = 0

    /// Creates an empty decoder.
    /// - Parameter maxPayloadBytes: The largest payload accepted.
    public init(maxPayloadBytes: Int = Frame.defaultMaxPayloadBytes) {
        self.maxPayloadBytes = maxPayloadBytes
    }

    /// The number of received bytes not yet returned as frames.
    public var bufferedByteCount: Int { storage.count - readOffset }

    /// Buffers received bytes.
    /// - Parameter bytes: The next bytes of the stream.
    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard !bytes.isEmpty else { return }
        compact()
        storage.append(contentsOf: bytes)
    }

    /// Buffers received bytes.
    /// - Parameter bytes: The next bytes of the stream.
    public mutating func append(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        compact()
        storage.append(contentsOf: bytes)
    }

    /// Removes the next complete frame and returns a copy of its payload.
    ///
    /// A bad header is reported as soon as its 4 bytes have arrived, without waiting for the
    /// body. The bad header is not consumed, so later calls throw the same error; close the stream.
    /// - Returns: The payload, or `nil` when more bytes are needed.
    /// - Throws: ``FrameError/emptyFrame`` or ``FrameError/tooLarge(length:limit:)``.
    public mutating func nextFrame() throws(FrameError) -> [UInt8]? {
        guard let range = try nextPayloadRange() else { return nil }
        let payload = Array(storage[range])
        consume(upTo: range.upperBound)
        return payload
    }

    /// Removes the next complete frame and lends its payload to `body` without copying.
    ///
    /// The frame is consumed even when `body` throws. The buffer passed to `body` is valid only
    /// during the call.
    /// - Parameter body: A closure reading the payload.
    /// - Returns: What `body` returned, or `nil` when more bytes are needed.
    /// - Throws: A ``FrameError`` for a bad header (which is not consumed), or what `body` throws.
    public mutating func withNextFrame<R>(_ body: (UnsafeRawBufferPointer) throws -> R) throws -> R? {
        guard let range = try nextPayloadRange() else { return nil }
        defer { consume(upTo: range.upperBound) }
        return try storage.withUnsafeBytes { raw in
            try body(UnsafeRawBufferPointer(rebasing: raw[range]))
        }
    }

    /// Removes the next complete frame and lends its payload to `body` without copying.
    ///
    /// The hot-path form of ``nextFrame()``: no allocation per frame. The buffer passed to
    /// `body` is valid only during the call.
    /// - Parameter body: Reads the payload.
    /// - Returns: What `body` returned, or `nil` when more bytes are needed.
    /// - Throws: ``FrameError`` for a bad header (which is not consumed).
    public mutating func decodeNext<R>(_ body: (UnsafeRawBufferPointer) -> R) throws(FrameError) -> R? {
        guard let range = try nextPayloadRange() else { return nil }
        defer { consume(upTo: range.upperBound) }
        return storage.withUnsafeBytes { raw in body(UnsafeRawBufferPointer(rebasing: raw[range])) }
    }

    /// The storage range of the next payload, `nil` if incomplete; validates the header.
    private func nextPayloadRange() throws(FrameError) -> Range<Int>? {
        let available = storage.count - readOffset
        guard available >= Frame.headerSize else { return nil }
        let length = storage.withUnsafeBufferPointer { Frame.announcedLength(in: $0, at: readOffset) }
        guard length > 0 else { throw .emptyFrame }
        guard length <= maxPayloadBytes else { throw .tooLarge(length: length, limit: maxPayloadBytes) }
        guard available - Frame.headerSize >= length else { return nil }
        let start = readOffset + Frame.headerSize
        return start..<(start + length)
    }

    /// The capacity a drained buffer keeps; a larger one (left by a large frame) is released,
    /// so one big frame does not pin its size in memory for the rest of the connection.
    public static let retainedCapacity = 256 << 10

    private mutating func consume(upTo offset: Int) {
        readOffset = offset
        if readOffset == storage.count {
            storage.removeAll(keepingCapacity: storage.capacity <= Self.retainedCapacity)
            readOffset = 0
        }
    }

    /// The bytes of memory the buffer holds (its capacity), for tests and diagnostics.
    public var reservedByteCount: Int { storage.capacity }

    /// Drops the consumed prefix when that moves no more bytes than were consumed since the
    /// last compaction, which keeps the total copying linear in the stream length.
    private mutating func compact() {
        guard readOffset > 0 else { return }
        if readOffset == storage.count {
            storage.removeAll(keepingCapacity: storage.capacity <= Self.retainedCapacity)
            readOffset = 0
        } else if readOffset >= 4096 && readOffset >= storage.count - readOffset {
            storage.removeSubrange(0..<readOffset)
            readOffset = 0
        }
    }
}
