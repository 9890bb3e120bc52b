import SyncCore

/// One sequenced action as the journal keeps it.
///
/// On disk a record is `"SSJR"`, a 4-byte big-endian body length N, a 4-byte big-endian
/// CRC-32C of the length bytes and the body, then N body bytes: the canonical JSON
/// `{"action":…,"id":…,"origin":…,"seq":…}` (with `"session"` when the dispatch named one,
/// and `"checkpoint"`, the state's digest after the action, when a checkpoint followed it).
struct JournalRecord: Sendable, Equatable {
    /// The sequence number.
    var seq: UInt64
    /// The replica that dispatched it.
    var origin: Int
    /// The dispatcher's id.
    var id: DispatchID
    /// The dispatcher's session, if any.
    var session: String?
    /// The action's JSON, as sequenced.
    var action: JSON
    /// The state's digest right after this action, when a checkpoint followed it.
    var checkpoint: String? = nil

    /// The record's magic bytes, which also let a scan find the next record after damage.
    static let magic: [UInt8] = Array("SSJR".utf8)
    /// Magic, length and checksum.
    static let headerSize = 12

    /// The body's JSON.
    var json: JSON {
        var members: [JSONKey: JSON] = ["seq": JSON(seq), "origin": JSON(origin), "id": id.json, "action": action]
        if let session { members["session"] = .string(session) }
        if let checkpoint { members["checkpoint"] = .string(checkpoint) }
        return .object(members)
    }

    /// Appends the record's on-disk form to `buffer`.
    ///
    /// - Parameter buffer: Where the bytes go.
    func encode(into buffer: inout [UInt8]) {
        let body = json.canonicalBytes
        buffer.append(contentsOf: Self.magic)
        var lengthBytes: [UInt8] = []
        Self.appendUInt32(UInt32(truncatingIfNeeded: body.count), to: &lengthBytes)
        buffer.append(contentsOf: lengthBytes)
        let crc = CRC32C.checksum(body, seed: CRC32C.checksum(lengthBytes))
        Self.appendUInt32(crc, to: &buffer)
        buffer.append(contentsOf: body)
    }

    static func appendUInt32(_ value: UInt32, to buffer: inout [UInt8]) {
        buffer.append(UInt8(truncatingIfNeeded: value >> 24))
        buffer.append(UInt8(truncatingIfNeeded: value >> 16))
        buffer.append(UInt8(truncatingIfNeeded: value >> 8))
        buffer.append(UInt8(truncatingIfNeeded: value))
    }

    static func readUInt32(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> UInt32 {
        UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16 | UInt32(bytes[offset + 2]) << 8 | UInt32(bytes[offset + 3])
    }

    /// Why the bytes at an offset are not a whole, valid record.
    enum DecodeFailure: Error, Equatable {
        /// Fewer bytes than the header or the announced body (a write cut short).
        case incomplete
        /// Zero bytes where a record should start (preallocated or never written).
        case zeros
        /// The magic is wrong.
        case badMagic
        /// The checksum does not match.
        case badChecksum
        /// The body is not a record's JSON.
        case badBody(String)

        var description: String {
            switch self {
            case .incomplete: "an incomplete record"
            case .zeros: "zero bytes"
            case .badMagic: "no record header"
            case .badChecksum: "a checksum mismatch"
            case .badBody(let why): "an unreadable record (\(why))"
            }
        }
    }

    /// Decodes the record at `offset`.
    ///
    /// - Parameters:
    ///   - bytes: A segment's bytes.
    ///   - offset: Where a record should start.
    /// - Returns: The record and the offset just past it.
    static func decode(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> Result<(JournalRecord, Int), DecodeFailure> {
        let available = bytes.count - offset
        if available >= 4, bytes[offset] == 0, bytes[offset + 1] == 0, bytes[offset + 2] == 0, bytes[offset + 3] == 0 {
            return .failure(.zeros)
        }
        guard available >= headerSize else { return .failure(.incomplete) }
        guard bytes[offset] == magic[0], bytes[offset + 1] == magic[1], bytes[offset + 2] == magic[2],
              bytes[offset + 3] == magic[3] else { return .failure(.badMagic) }
        let length = Int(readUInt32(bytes, at: offset + 4))
        guard available - headerSize >= length else { return .failure(.incomplete) }
        let stored = readUInt32(bytes, at: offset + 8)
        let lengthBytes = UnsafeRawBufferPointer(rebasing: bytes[(offset + 4)..<(offset + 8)])
        let body = UnsafeRawBufferPointer(rebasing: bytes[(offset + headerSize)..<(offset + headerSize + length)])
        guard CRC32C.checksum(body, seed: CRC32C.checksum(lengthBytes)) == stored else { return .failure(.badChecksum) }
        let json: JSON
        do {
            json = try JSON(parsing: body)
        } catch {
            return .failure(.badBody(error.description))
        }
        guard let seq = json["seq"]?.intValue, seq > 0, let origin = json["origin"]?.intValue,
              let rawID = json["id"], let id = DispatchID(json: rawID), let action = json["action"] else {
            return .failure(.badBody("missing seq, origin, id or action"))
        }
        let session = json["session"]?.stringValue
        let checkpoint = json["checkpoint"]?.stringValue
        return .success((JournalRecord(seq: UInt64(seq), origin: origin, id: id, session: session, action: action,
                                       checkpoint: checkpoint),
                         offset + headerSize + length))
    }

    /// Whether any whole, valid record starts somewhere after `offset` (a resynchronising
    /// scan for the magic bytes): damage followed by good records is corruption in the
    /// middle, never a torn tail.
    static func validRecordExists(in bytes: UnsafeRawBufferPointer, after offset: Int) -> Int? {
        var position = offset + 1
        while position + headerSize <= bytes.count {
            if bytes[position] == magic[0], bytes[position + 1] == magic[1], bytes[position + 2] == magic[2],
               bytes[position + 3] == magic[3], case .success = decode(bytes, at: position) {
                return position
            }
            position += 1
        }
        return nil
    }
}
