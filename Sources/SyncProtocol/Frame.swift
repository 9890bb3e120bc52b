/// Length-prefixed framing: a 4-byte unsigned big-endian payload length N, then N payload bytes.
public enum Frame {
    /// The size of the length header in bytes.
    public static let headerSize = 4
    /// The default largest payload a ``FrameDecoder`` accepts (1 MiB).
    public static let defaultMaxPayloadBytes = 1 << 20

    /// Appends a big-endian 4-byte length header.
    ///
    /// - Precondition: `0 <= length <= UInt32.max`; this is the caller's invariant, not input.
    /// - Parameters:
    ///   - length: The payload length the header announces.
    ///   - buffer: The buffer to append the 4 header bytes to.
    public static func appendHeader(length: Int, to buffer: inout [UInt8]) {
        precondition(length >= 0 && UInt64(length) <= UInt64(UInt32.max), "frame length out of range")
        let value = UInt32(truncatingIfNeeded: length)
        buffer.append(UInt8(truncatingIfNeeded: value >> 24))
        buffer.append(UInt8(truncatingIfNeeded: value >> 16))
        buffer.append(UInt8(truncatingIfNeeded: value >> 8))
        buffer.append(UInt8(truncatingIfNeeded: value))
    }

    /// Appends one frame (header and payload) to `buffer`.
    ///
    /// - Precondition: `payload.count <= UInt32.max`.
    /// - Parameters:
    ///   - payload: The payload bytes.
    ///   - buffer: The buffer to append the frame to.
    public static func append(payload: UnsafeRawBufferPointer, to buffer: inout [UInt8]) {
        buffer.reserveCapacity(buffer.count + headerSize + payload.count)
        appendHeader(length: payload.count, to: &buffer)
        buffer.append(contentsOf: payload)
    }

    /// Appends one frame (header and payload) to `buffer`.
    ///
    /// - Precondition: `payload.count <= UInt32.max`.
    /// - Parameters:
    ///   - payload: The payload bytes.
    ///   - buffer: The buffer to append the frame to.
    public static func append(payload: [UInt8], to buffer: inout [UInt8]) {
        buffer.reserveCapacity(buffer.count + headerSize + payload.count)
        appendHeader(length: payload.count, to: &buffer)
        buffer.append(contentsOf: payload)
    }

    /// Encodes a JSON value as one frame whose payload is its RFC 8785 canonical bytes.
    /// - Parameter json: The value to send.
    /// - Returns: The header followed by ``JSON/canonicalBytes``.
    public static func encode(_ json: JSON) -> [UInt8] {
        var buffer: [UInt8] = [0, 0, 0, 0]
        buffer.reserveCapacity(64)
        json.writeCanonical(into: &buffer)
        var header: [UInt8] = []
        header.reserveCapacity(headerSize)
        appendHeader(length: buffer.count - headerSize, to: &header)
        buffer.replaceSubrange(0..<headerSize, with: header)
        return buffer
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
        let length = storage.withUnsafeBufferPointer { bytes in
            Int(bytes[readOffset]) << 24 | Int(bytes[readOffset + 1]) << 16
                | Int(bytes[readOffset + 2]) << 8 | Int(bytes[readOffset + 3])
        }
        guard length > 0 else { throw .emptyFrame }
        guard length <= maxPayloadBytes else { throw .tooLarge(length: length, limit: maxPayloadBytes) }
        guard available - Frame.headerSize >= length else { return nil }
        let start = readOffset + Frame.headerSize
        return start..<(start + length)
    }

    private mutating func consume(upTo offset: Int) {
        readOffset = offset
        if readOffset == storage.count {
            storage.removeAll(keepingCapacity: true)
            readOffset = 0
        }
    }

    /// Drops the consumed prefix when that moves no more bytes than were consumed since the
    /// last compaction, which keeps the total copying linear in the stream length.
    private mutating func compact() {
        guard readOffset > 0 else { return }
        if readOffset == storage.count {
            storage.removeAll(keepingCapacity: true)
            readOffset = 0
        } else if readOffset >= 4096 && readOffset >= storage.count - readOffset {
            storage.removeSubrange(0..<readOffset)
            readOffset = 0
        }
    }
}
