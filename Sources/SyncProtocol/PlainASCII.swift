/// Skips, eight bytes at a time, the bytes a JSON string holds as they are in the canonical
/// subset: printable ASCII (0x20–0x7E) other than `"` and `\`.
///
/// - Parameters:
///   - bytes: The bytes.
///   - start: Where to start.
/// - Returns: The index of the first eight-byte word at or after `start` that holds another
///   byte, or of the last word's end when fewer than eight bytes are left: the caller goes on
///   byte by byte from there. Every byte before it is one of those bytes.
@inline(__always)
func skipPlainASCIIWords(_ bytes: UnsafeRawBufferPointer, from start: Int) -> Int {
    let ones: UInt64 = 0x0101_0101_0101_0101
    let highs: UInt64 = 0x8080_8080_8080_8080
    var index = start
    while index &+ 8 <= bytes.count {
        let word = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self))
        // Each test is exact for "some byte of the word" (a borrow or carry can only flag a
        // byte above one that is already flagged).
        let below20 = (word &- ones &* 0x20) & ~word & highs
        let above7E = ((word &+ ones) | word) & highs
        let quote = word ^ (ones &* 0x22)
        let backslash = word ^ (ones &* 0x5C)
        let quoteOrBackslash = ((quote &- ones) & ~quote | (backslash &- ones) & ~backslash) & highs
        if below20 | above7E | quoteOrBackslash != 0 { break }
        index &+= 8
    }
    return index
}
