import SyncCore

/// How a journal segment frames what it holds.
///
/// A segment is a sequence of items, each `MAGIC` (4 bytes), a 4-byte big-endian body
/// length N, a 4-byte big-endian CRC-32C of the length bytes and the body, then N body bytes
/// of canonical JSON:
///
/// - `SSJH`, the segment header (format 2 on), first in every segment:
///   `{"first":SEQ,"format":2,"history":ID}`;
/// - `SSJR`, a record: ``LogRecord``'s body;
/// - `SSJU`, an upgrade record (a `storesync.json` of format 3 on): ``LogRecord``'s body for
///   an upgrade. A reader that predates upgrades finds no magic it knows there, with complete
///   commits after it: it refuses the directory as corrupt (and `--repair` cuts nothing), so
///   it never skips the record nor applies what follows under the old reducer;
/// - `SSJC`, a commit mark (format 2 on), closing each group commit. Its 16-byte body is
///   binary, big-endian: N (8 bytes), the seq of the group's last record; L (4 bytes), the
///   group's length (its records are the L bytes right before the mark); C (4 bytes), their
///   CRC-32C. A mark whose group does not match its L and C does not count: the group never
///   reached the disk whole.
///
/// Recovery keeps what the last complete commit mark covers; anything after it was never
/// acknowledged. Segments written before marks existed (format 1) have no header and no marks.
enum JournalFormat {
    static let recordMagic: [UInt8] = Array("SSJR".utf8)
    static let commitMagic: [UInt8] = Array("SSJC".utf8)
    static let headerMagic: [UInt8] = Array("SSJH".utf8)
    static let upgradeMagic: [UInt8] = Array("SSJU".utf8)
    /// The `storesync.json` format of a directory whose history was upgraded (its journal may
    /// hold `SSJU` items): readers of format 2 refuse it.
    static let upgradedFormat = 3
    /// Magic, length and checksum.
    static let itemHeaderSize = 12
    /// The segment format written by this version.
    static let currentFormat = 2

    /// A commit mark.
    struct Commit: Equatable {
        /// The seq of the last record of the group.
        var seq: UInt64
        /// The group's length in bytes (the records right before the mark).
        var bytes: Int
        /// The group's CRC-32C.
        var crc: UInt32
    }

    /// A segment header.
    struct SegmentHeader: Equatable {
        var first: UInt64
        var format: Int
        var history: String
    }

    /// One decoded item.
    enum Item: Equatable {
        case record(LogRecord)
        case commit(Commit)
        case header(SegmentHeader)
    }

    /// Appends one item with the given magic and body.
    static func appendItem(magic: [UInt8], body: [UInt8], to buffer: inout [UInt8]) {
        buffer.append(contentsOf: magic)
        let length = UInt32(truncatingIfNeeded: body.count)
        let lengthBytes: [UInt8] = [UInt8(truncatingIfNeeded: length >> 24), UInt8(truncatingIfNeeded: length >> 16),
                                    UInt8(truncatingIfNeeded: length >> 8), UInt8(truncatingIfNeeded: length)]
        buffer.append(contentsOf: lengthBytes)
        appendUInt32(CRC32C.checksum(body, seed: CRC32C.checksum(lengthBytes)), to: &buffer)
        buffer.append(contentsOf: body)
    }

    /// Appends a record item.
    static func appendRecord(_ record: LogRecord, to buffer: inout [UInt8]) {
        appendItem(magic: record.upgrade == nil ? recordMagic : upgradeMagic, body: record.body, to: &buffer)
    }

    /// The length of a commit mark's body.
    static let commitBodySize = 16

    /// Appends a commit mark for the group `buffer[groupStart...]`.
    static func appendCommit(seq: UInt64, groupStart: Int, to buffer: inout [UInt8]) {
        let crc = buffer.withUnsafeBytes { CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[groupStart...])) }
        var body: [UInt8] = []
        body.reserveCapacity(commitBodySize)
        appendUInt32(UInt32(truncatingIfNeeded: seq >> 32), to: &body)
        appendUInt32(UInt32(truncatingIfNeeded: seq), to: &body)
        appendUInt32(UInt32(truncatingIfNeeded: buffer.count - groupStart), to: &body)
        appendUInt32(crc, to: &body)
        appendItem(magic: commitMagic, body: body, to: &buffer)
    }

    /// Appends a segment header.
    static func appendHeader(_ header: SegmentHeader, to buffer: inout [UInt8]) {
        let body: JSON = ["first": JSON(header.first), "format": JSON(header.format), "history": .string(header.history)]
        appendItem(magic: headerMagic, body: body.canonicalBytes, to: &buffer)
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

    /// Why the bytes at an offset are not a whole, valid item.
    enum DecodeFailure: Error, Equatable {
        /// Fewer bytes than the header or the announced body (a write cut short).
        case incomplete
        /// Zero bytes where an item should start (preallocated or never written).
        case zeros
        /// The magic is wrong.
        case badMagic
        /// The checksum does not match.
        case badChecksum
        /// The body is not what its magic says.
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

    private static func magic(_ bytes: UnsafeRawBufferPointer, at offset: Int, is magic: [UInt8]) -> Bool {
        bytes[offset] == magic[0] && bytes[offset + 1] == magic[1] && bytes[offset + 2] == magic[2]
            && bytes[offset + 3] == magic[3]
    }

    /// Decodes the item at `offset`.
    ///
    /// - Parameters:
    ///   - bytes: A segment's bytes.
    ///   - offset: Where an item should start.
    /// - Returns: The item and the offset just past it.
    static func decode(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> Result<(Item, Int), DecodeFailure> {
        let available = bytes.count - offset
        if available >= 4, bytes[offset] == 0, bytes[offset + 1] == 0, bytes[offset + 2] == 0, bytes[offset + 3] == 0 {
            return .failure(.zeros)
        }
        guard available >= itemHeaderSize else { return .failure(.incomplete) }
        let kind: UInt8
        if magic(bytes, at: offset, is: recordMagic) {
            kind = 0
        } else if magic(bytes, at: offset, is: commitMagic) {
            kind = 1
        } else if magic(bytes, at: offset, is: headerMagic) {
            kind = 2
        } else if magic(bytes, at: offset, is: upgradeMagic) {
            kind = 3
        } else {
            return .failure(.badMagic)
        }
        let length = Int(readUInt32(bytes, at: offset + 4))
        guard available - itemHeaderSize >= length else { return .failure(.incomplete) }
        let stored = readUInt32(bytes, at: offset + 8)
        let lengthBytes = UnsafeRawBufferPointer(rebasing: bytes[(offset + 4)..<(offset + 8)])
        let body = UnsafeRawBufferPointer(rebasing: bytes[(offset + itemHeaderSize)..<(offset + itemHeaderSize + length)])
        guard CRC32C.checksum(body, seed: CRC32C.checksum(lengthBytes)) == stored else { return .failure(.badChecksum) }
        let next = offset + itemHeaderSize + length
        if kind == 1 {
            guard length == commitBodySize else { return .failure(.badBody("a commit mark of \(length) bytes")) }
            let seq = UInt64(readUInt32(body, at: 0)) << 32 | UInt64(readUInt32(body, at: 4))
            return .success((.commit(Commit(seq: seq, bytes: Int(readUInt32(body, at: 8)), crc: readUInt32(body, at: 12))), next))
        }
        // A record as this hub writes it is read without a tree; anything else is parsed.
        if kind == 0, let record = LogRecord(canonicalBody: body) { return .success((.record(record), next)) }
        let json: JSON
        do {
            json = try JSON(parsing: body)
        } catch {
            return .failure(.badBody(error.description))
        }
        switch kind {
        case 0:
            guard let record = LogRecord(json: json), record.upgrade == nil else {
                return .failure(.badBody("missing seq, origin, id or action"))
            }
            return .success((.record(record), next))
        case 3:
            guard let record = LogRecord(json: json), record.upgrade != nil else {
                return .failure(.badBody("an upgrade record without seq, origin, id, from, to or digest"))
            }
            return .success((.record(record), next))
        default:
            guard let first = json["first"]?.intValue, first > 0, let format = json["format"]?.intValue,
                  let history = json["history"]?.stringValue else {
                return .failure(.badBody("a segment header without first, format or history"))
            }
            return .success((.header(SegmentHeader(first: UInt64(first), format: format, history: history)), next))
        }
    }

    /// Whether the commit mark decoded at `markOffset` covers a group that reached the disk whole.
    static func groupIsWhole(_ commit: Commit, markOffset: Int, in bytes: UnsafeRawBufferPointer) -> Bool {
        let start = markOffset - commit.bytes
        guard start >= 0 else { return false }
        return CRC32C.checksum(UnsafeRawBufferPointer(rebasing: bytes[start..<markOffset])) == commit.crc
    }

    /// The offset of the first whole commit mark after `offset` whose group is whole too, if any.
    static func completeCommit(in bytes: UnsafeRawBufferPointer, after offset: Int) -> Int? {
        var position = offset + 1
        while position + itemHeaderSize <= bytes.count {
            if magic(bytes, at: position, is: commitMagic), case .success(let (.commit(commit), _)) = decode(bytes, at: position),
               groupIsWhole(commit, markOffset: position, in: bytes) {
                return position
            }
            position += 1
        }
        return nil
    }

    /// The offset of the first whole, valid record after `offset`, if any (format 1 segments:
    /// damage followed by good records is corruption in the middle, never a torn tail).
    static func validRecord(in bytes: UnsafeRawBufferPointer, after offset: Int) -> Int? {
        var position = offset + 1
        while position + itemHeaderSize <= bytes.count {
            if magic(bytes, at: position, is: recordMagic), case .success = decode(bytes, at: position) {
                return position
            }
            position += 1
        }
        return nil
    }
}
