// Helpers shared by the libFuzzer targets in Fuzz/. Compiled into every target, together with
// the SyncProtocol sources, by Scripts/fuzz (one module per target, so no `import SyncProtocol`).

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes `text` to standard error without going through C's (non-Sendable) `stderr` global.
func fuzzPrint(_ text: String) {
    var line = text
    line.append("\n")
    line.withUTF8 { bytes in
        var offset = 0
        while offset < bytes.count {
            let written = write(2, bytes.baseAddress! + offset, bytes.count - offset)
            if written <= 0 { return }
            offset += written
        }
    }
}

/// Lowercase hex of at most `limit` bytes, with a note when cut.
func fuzzHex(_ bytes: some Collection<UInt8>, limit: Int = 256) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out: [UInt8] = []
    for byte in bytes.prefix(limit) {
        out.append(digits[Int(byte >> 4)])
        out.append(digits[Int(byte & 0x0F)])
    }
    var text = String(decoding: out, as: UTF8.self)
    if bytes.count > limit { text += "… (\(bytes.count) bytes)" }
    return text
}

/// The bytes as text for a report: printable ASCII as is, everything else as \xNN.
func fuzzText(_ bytes: some Collection<UInt8>, limit: Int = 256) -> String {
    var text = ""
    for byte in bytes.prefix(limit) {
        if byte >= 0x20 && byte < 0x7F && byte != UInt8(ascii: "\\") {
            text.unicodeScalars.append(Unicode.Scalar(byte))
        } else {
            text += "\\x" + fuzzHex([byte])
        }
    }
    if bytes.count > limit { text += "… (\(bytes.count) bytes)" }
    return text
}

/// Reports a broken invariant and aborts, so that libFuzzer saves the input as a crash.
func fuzzFail(_ what: String, _ details: [(String, [UInt8])] = []) -> Never {
    fuzzPrint("==FUZZ== INVARIANT FAILURE: \(what)")
    for (label, bytes) in details {
        fuzzPrint("==FUZZ==   \(label) hex:  \(fuzzHex(bytes))")
        fuzzPrint("==FUZZ==   \(label) text: \(fuzzText(bytes))")
    }
    abort()
}
