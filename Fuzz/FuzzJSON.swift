// libFuzzer target: the strict JSON parser and the RFC 8785 canonical writer.
//
// Input: arbitrary bytes, parsed as one JSON text. A rejection must be a thrown
// `JSONParseError` whose offset lies inside the input. When the bytes parse:
//   1. the input was valid UTF-8 (the parser validates every string);
//   2. the three `JSON(parsing:)` overloads (raw buffer, [UInt8], String) agree;
//   3. the canonical bytes parse again, and canonical form is idempotent:
//      canonical(parse(canonical(x))) == canonical(x);
//   4. every number and string survives canonical form on its own: a number comes back as the
//      same Double (RFC 8785 writes -0 as 0, so the zeros count as one), a string as the same
//      Unicode scalars; and a number's text is laid out as ECMAScript's Number::toString does
//      (RFC 8785 §3.2.2.3) with no shorter digit string that reads back as the same Double;
//   5. the canonical bytes equal those of a simple reference writer kept here: members sorted
//      by the UTF-16 code units of their names, no whitespace, strings escaping only `"`, `\`
//      and U+0000...U+001F (short forms `\b \t \n \f \r`, else lowercase `\u00xx`). Numbers
//      in the reference are the library's own, checked on their own by item 4;
//   6. the depth limit is exact: the canonical text of depth d parses with maxDepth d and is
//      refused with maxDepth d - 1;
//   8. `JSON.isCanonical` answers `true` only for bytes that parse and are their own canonical
//      form (on the input and on the canonical bytes of what parsed);
//   7. the json app's byte-level decoder `JSONEdit(canonical:)` agrees with `JSONEdit(action:)`
//      on the parsed value whenever it answers, on the input and on its canonical bytes (and
//      whatever it accepts parses).
//   9. `CanonicalObjectReader.forEachMember` (behind the Codable apps' byte-level decoder):
//      when it reads a whole object and every member's value parses, the input parses as an
//      object with exactly those members and values (on the input and on its canonical bytes).
// Values are compared by canonical bytes, never by `==` on `JSON`.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = UnsafeRawBufferPointer(start: data, count: size)
    let inputBytes = Array(input)
    checkCanonicalEdit(input)
    checkIsCanonical(input)
    checkObjectReader(input)
    if let parsed = try? JSON(parsing: input) {
        parsed.canonicalBytes.withUnsafeBytes {
            checkCanonicalEdit($0)
            checkIsCanonical($0)
            checkObjectReader($0)
        }
    }
    let value: JSON
    do {
        value = try JSON(parsing: input)
    } catch {
        guard error.offset >= 0 && error.offset <= size else {
            fuzzFail("parse error offset \(error.offset) outside the input of \(size) bytes (\(error))",
                     [("input", inputBytes)])
        }
        return 0
    }

    // 1. Accepted input is valid UTF-8: decoding it (with repair) must not change a byte.
    let text = String(decoding: inputBytes, as: UTF8.self)
    guard Array(text.utf8) == inputBytes else {
        fuzzFail("the parser accepted invalid UTF-8", [("input", inputBytes)])
    }

    let canonical = value.canonicalBytes

    // 2. The overloads agree.
    do {
        let fromArray = try JSON(parsing: inputBytes).canonicalBytes
        let fromString = try JSON(parsing: text).canonicalBytes
        guard fromArray == canonical, fromString == canonical else {
            fuzzFail("JSON(parsing:) overloads disagree",
                     [("input", inputBytes), ("raw", canonical), ("array", fromArray), ("string", fromString)])
        }
    } catch {
        fuzzFail("an overload of JSON(parsing:) refused what another accepted: \(error)", [("input", inputBytes)])
    }

    // 3. Canonical bytes re-parse, and canonical form is idempotent.
    let reparsed: JSON
    do {
        reparsed = try JSON(parsing: canonical)
    } catch {
        fuzzFail("canonical bytes do not parse: \(error)", [("input", inputBytes), ("canonical", canonical)])
    }
    let again = reparsed.canonicalBytes
    guard again == canonical else {
        fuzzFail("canonical form is not idempotent",
                 [("input", inputBytes), ("canonical", canonical), ("canonical again", again)])
    }

    // 4. Leaves survive canonical form exactly.
    checkLeaves(of: value, input: inputBytes)

    // 5. An independent writer gives the same bytes.
    var expected: [UInt8] = []
    referenceCanonical(value, into: &expected)
    guard expected == canonical else {
        fuzzFail("canonical bytes differ from the reference writer's",
                 [("input", inputBytes), ("canonical", canonical), ("reference", expected)])
    }

    // 6. The depth limit matches the nesting of the canonical text.
    let depth = canonicalDepth(canonical)
    do {
        _ = try JSON(parsing: canonical, maxDepth: depth)
    } catch {
        fuzzFail("canonical text of depth \(depth) refused with maxDepth \(depth): \(error)",
                 [("input", inputBytes), ("canonical", canonical)])
    }
    if depth > 0 {
        if (try? JSON(parsing: canonical, maxDepth: depth - 1)) != nil {
            fuzzFail("canonical text of depth \(depth) accepted with maxDepth \(depth - 1)",
                     [("input", inputBytes), ("canonical", canonical)])
        }
    }
    return 0
}

/// Checks that every number and string in `value` round-trips through canonical form alone.
/// Walks without recursion; only uses the object's values, never its key type.
private func checkLeaves(of value: JSON, input: [UInt8]) {
    var pending: [JSON] = [value]
    while let next = pending.popLast() {
        switch next {
        case .number(let number):
            let written = JSON.number(number).canonicalBytes
            let back = try? JSON(parsing: written)
            guard let backNumber = back?.numberValue,
                  backNumber == number || (backNumber == 0 && number == 0) else {
                fuzzFail("number \(number) (bits 0x\(String(number.bitPattern, radix: 16))) does not round-trip "
                         + "through its canonical form (read back \(String(describing: back?.numberValue)))",
                         [("input", input), ("canonical number", written)])
            }
            if let problem = ecmaScriptProblem(number, written) {
                fuzzFail("number \(number) (bits 0x\(String(number.bitPattern, radix: 16))) is not written as "
                         + "ECMAScript would: \(problem)", [("input", input), ("canonical number", written)])
            }
        case .string(let string):
            let written = JSON.string(string).canonicalBytes
            let back = try? JSON(parsing: written)
            guard let backString = back?.stringValue, Array(backString.utf8) == Array(string.utf8) else {
                fuzzFail("string does not round-trip through its canonical form",
                         [("input", input), ("string utf8", Array(string.utf8)), ("canonical string", written)])
            }
        case .array(let elements):
            pending.append(contentsOf: elements)
        case .object(let members):
            pending.append(contentsOf: members.values)
        case .null, .bool:
            break
        }
    }
}

/// Why `text` is not ECMAScript's Number::toString of `number`, or nil when it is: the sign, the
/// layout of its significant digits for their decimal exponent, and no shorter digit string
/// (the digits cut, or cut and rounded up) reading back as the same Double. (Among equally short
/// digit strings ECMAScript takes the closest; that tie rule is not checked here.)
private func ecmaScriptProblem(_ number: Double, _ text: [UInt8]) -> String? {
    if number == 0 { return text == Array("0".utf8) ? nil : "zero must be written 0" }
    var rest = text[...]
    let negative = rest.first == UInt8(ascii: "-")
    if negative { rest = rest.dropFirst() }
    guard negative == (number < 0) else { return "wrong sign" }
    // Split into mantissa digits (with the point's position) and an exponent.
    var digits: [UInt8] = []
    var pointAt: Int?
    var exponent = 0
    var position = rest.startIndex
    while position < rest.endIndex, rest[position] != UInt8(ascii: "e") {
        if rest[position] == UInt8(ascii: ".") { pointAt = digits.count } else { digits.append(rest[position]) }
        position += 1
    }
    if position < rest.endIndex {
        guard let value = Int(String(decoding: rest[(position + 1)...], as: UTF8.self)) else { return "bad exponent" }
        exponent = value
    }
    // value = 0.D × 10^n, with D the significant digits (no leading or trailing zeros).
    var n = (pointAt ?? digits.count) + exponent
    while digits.first == UInt8(ascii: "0") {
        digits.removeFirst()
        n -= 1
    }
    while digits.last == UInt8(ascii: "0") { digits.removeLast() }
    let k = digits.count
    guard k > 0 else { return "no significant digit" }

    // The layout ECMAScript gives these digits.
    var expected: [UInt8] = negative ? [UInt8(ascii: "-")] : []
    if k <= n && n <= 21 {
        expected += digits + Array(repeating: UInt8(ascii: "0"), count: n - k)
    } else if 0 < n && n <= 21 {
        expected += digits[..<n] + [UInt8(ascii: ".")] + digits[n...]
    } else if -6 < n && n <= 0 {
        expected += Array("0.".utf8) + Array(repeating: UInt8(ascii: "0"), count: -n) + digits
    } else {
        expected += [digits[0]]
        if k > 1 { expected += [UInt8(ascii: ".")] + digits[1...] }
        expected += Array("e\(n - 1 < 0 ? "-" : "+")\(abs(n - 1))".utf8)
    }
    guard expected == text else { return "layout should be \(String(decoding: expected, as: UTF8.self))" }

    // Shortest: k - 1 digits, cut or rounded up, must not read back as the same value.
    if k > 1 {
        let cut = Array(digits[..<(k - 1)])
        var up = cut
        var carry = true
        var index = up.count - 1
        while carry && index >= 0 {
            if up[index] == UInt8(ascii: "9") { up[index] = UInt8(ascii: "0"); index -= 1 } else { up[index] += 1; carry = false }
        }
        let upExponent = carry ? n + 1 : n
        if carry { up.insert(UInt8(ascii: "1"), at: 0) }
        for (candidate, candidateExponent) in [(cut, n), (up, upExponent)] {
            let literal = "0." + String(decoding: candidate, as: UTF8.self) + "e\(candidateExponent)"
            if let value = Double(literal), value == number.magnitude {
                return "\(literal) is shorter and reads back as the same Double"
            }
        }
    }
    return nil
}

/// RFC 8785 by the book, written for clarity rather than speed. Member names are read with
/// `String(describing:)` so that this compiles whatever the key type of `.object` is.
private func referenceCanonical(_ value: JSON, into out: inout [UInt8]) {
    switch value {
    case .null:
        out.append(contentsOf: "null".utf8)
    case .bool(let flag):
        out.append(contentsOf: (flag ? "true" : "false").utf8)
    case .number(let number):
        out.append(contentsOf: JSON.number(number).canonicalBytes)
    case .string(let string):
        referenceString(string, into: &out)
    case .array(let elements):
        out.append(UInt8(ascii: "["))
        for (position, element) in elements.enumerated() {
            if position > 0 { out.append(UInt8(ascii: ",")) }
            referenceCanonical(element, into: &out)
        }
        out.append(UInt8(ascii: "]"))
    case .object(let members):
        let entries = members.map { (name: String(describing: $0.key), value: $0.value) }
            .sorted { $0.name.utf16.lexicographicallyPrecedes($1.name.utf16) }
        out.append(UInt8(ascii: "{"))
        for (position, entry) in entries.enumerated() {
            if position > 0 { out.append(UInt8(ascii: ",")) }
            referenceString(entry.name, into: &out)
            out.append(UInt8(ascii: ":"))
            referenceCanonical(entry.value, into: &out)
        }
        out.append(UInt8(ascii: "}"))
    }
}

private func referenceString(_ string: String, into out: inout [UInt8]) {
    let hex = Array("0123456789abcdef".utf8)
    out.append(UInt8(ascii: "\""))
    for byte in string.utf8 {
        switch byte {
        case UInt8(ascii: "\""): out.append(contentsOf: #"\""#.utf8)
        case UInt8(ascii: "\\"): out.append(contentsOf: #"\\"#.utf8)
        case 0x08: out.append(contentsOf: #"\b"#.utf8)
        case 0x09: out.append(contentsOf: #"\t"#.utf8)
        case 0x0A: out.append(contentsOf: #"\n"#.utf8)
        case 0x0C: out.append(contentsOf: #"\f"#.utf8)
        case 0x0D: out.append(contentsOf: #"\r"#.utf8)
        case 0x00..<0x20:
            out.append(contentsOf: #"\u00"#.utf8)
            out.append(hex[Int(byte >> 4)])
            out.append(hex[Int(byte & 0x0F)])
        default:
            out.append(byte)
        }
    }
    out.append(UInt8(ascii: "\""))
}

/// The deepest nesting of brackets and braces outside strings in a (canonical) JSON text.
private func canonicalDepth(_ bytes: [UInt8]) -> Int {
    var depth = 0
    var deepest = 0
    var inString = false
    var escaped = false
    for byte in bytes {
        if inString {
            if escaped {
                escaped = false
            } else if byte == UInt8(ascii: "\\") {
                escaped = true
            } else if byte == UInt8(ascii: "\"") {
                inString = false
            }
            continue
        }
        switch byte {
        case UInt8(ascii: "\""): inString = true
        case UInt8(ascii: "["), UInt8(ascii: "{"):
            depth += 1
            deepest = max(deepest, depth)
        case UInt8(ascii: "]"), UInt8(ascii: "}"): depth -= 1
        default: break
        }
    }
    return deepest
}

/// Item 7: the fast decoder answers only where the general one gives the same edit.
private func checkCanonicalEdit(_ bytes: UnsafeRawBufferPointer) {
    guard let fast = JSONEdit(canonical: bytes) else { return }
    let general: JSONEdit
    do {
        general = try JSONEdit(action: try JSON(parsing: bytes))
    } catch {
        fuzzFail("JSONEdit(canonical:) accepted what the general path refuses (\(error))", [("input", Array(bytes))])
    }
    guard fast == general else {
        fuzzFail("JSONEdit(canonical:) decoded \(fast), the general path \(general)", [("input", Array(bytes))])
    }
}

/// Item 8: what the canonical check accepts is its own canonical form.
private func checkIsCanonical(_ bytes: UnsafeRawBufferPointer) {
    guard JSON.isCanonical(bytes) else { return }
    guard let parsed = try? JSON(parsing: bytes), parsed.canonicalBytes == Array(bytes) else {
        fuzzFail("JSON.isCanonical accepted bytes that are not their own canonical form", [("input", Array(bytes))])
    }
}

/// Item 9: members the object reader finds, with values that parse, are the object's.
private func checkObjectReader(_ bytes: UnsafeRawBufferPointer) {
    var members: [JSONKey: JSON] = [:]
    var count = 0
    let read = CanonicalObjectReader.forEachMember(in: bytes) { name, value in
        guard let parsed = try? JSON(parsing: value) else { return false }
        members[JSONKey(String(decoding: name, as: UTF8.self))] = parsed
        count += 1
        return true
    }
    guard read else { return }
    guard case .object(let whole)? = try? JSON(parsing: bytes) else {
        fuzzFail("CanonicalObjectReader read an object the parser refuses", [("input", Array(bytes))])
    }
    guard count == members.count, JSON.object(members).canonicalBytes == JSON.object(whole).canonicalBytes else {
        fuzzFail("CanonicalObjectReader found other members than the parser", [("input", Array(bytes))])
    }
}
