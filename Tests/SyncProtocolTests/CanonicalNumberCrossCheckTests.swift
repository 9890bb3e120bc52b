import Foundation
import Testing
@testable import SyncProtocol

/// The canonical writer's numbers must be ECMAScript's `Number::toString` (RFC 8785
/// §3.2.2.3) for every double, not merely whatever `Double.description` happens to print.
/// This checks them against an independent oracle: the C library's correctly rounded
/// `%.*e` finds the shortest digit string that reads back as the same double (the digits
/// ECMAScript requires), and the layout rules are applied here from the specification.
@Suite("Canonical numbers: randomized cross-check against an independent oracle")
struct CanonicalNumberCrossCheckTests {
    /// ECMAScript Number::toString for a finite double, from shortest round-trip digits.
    static func oracle(_ value: Double) -> String {
        if value == 0 { return "0" }
        let sign = value < 0 ? "-" : ""
        var digits = ""
        var exponent = 0
        for precision in 1...17 {
            let text = String(format: "%.*e", precision - 1, value.magnitude)
            guard let back = Double(text), back == value.magnitude else { continue }
            let parts = text.split(separator: "e")
            digits = parts[0].replacingOccurrences(of: ".", with: "")
            exponent = Int(parts[1]) ?? 0
            break
        }
        while digits.count > 1 && digits.hasSuffix("0") { digits.removeLast() }
        let k = digits.count
        let n = exponent + 1
        if k <= n && n <= 21 { return sign + digits + String(repeating: "0", count: n - k) }
        if 0 < n && n <= 21 {
            return sign + digits.prefix(n) + "." + digits.dropFirst(n)
        }
        if -6 < n && n <= 0 { return sign + "0." + String(repeating: "0", count: -n) + digits }
        let mantissa = k == 1 ? digits : digits.prefix(1) + "." + digits.dropFirst()
        return sign + mantissa + "e" + (n - 1 >= 0 ? "+" : "-") + String(abs(n - 1))
    }

    static func canonical(_ value: Double) -> String { JSON.number(value).canonicalString }

    @Test("the oracle itself reproduces RFC 8785's published vectors")
    func oracleMatchesRFC() {
        let vectors: [(UInt64, String)] = [
            (0x0000_0000_0000_0001, "5e-324"), (0x7fef_ffff_ffff_ffff, "1.7976931348623157e+308"),
            (0x4430_0000_0000_0000, "295147905179352830000"), (0x44b5_2d02_c7e1_4af6, "1e+23"),
            (0x444b_1ae4_d6e2_ef4e, "999999999999999700000"), (0x3eb0_c6f7_a0b5_ed8c, "9.999999999999997e-7"),
            (0x3eb0_c6f7_a0b5_ed8d, "0.000001"), (0x41b3_de43_5555_5554, "333333333.33333325"),
            (0xbecb_f647_612f_3696, "-0.0000033333333333333333"), (0x4314_3ff3_c1cb_0959, "1424953923781206.2"),
        ]
        for (bits, expected) in vectors {
            #expect(Self.oracle(Double(bitPattern: bits)) == expected)
        }
    }

    @Test("100,000 random doubles (every exponent, integers, decimals) match the oracle")
    func randomized() {
        var generator = SplitMix64(seed: 0x5EED_2026_1123)
        var mismatches: [String] = []
        var checked = 0
        func check(_ value: Double) {
            guard value.isFinite else { return }
            checked += 1
            let got = Self.canonical(value)
            let want = Self.oracle(value)
            if got != want, mismatches.count < 10 {
                mismatches.append("0x\(String(value.bitPattern, radix: 16)): wrote \(got), expected \(want)")
            }
        }
        for _ in 0..<60_000 { check(Double(bitPattern: generator.next())) }               // every exponent
        for _ in 0..<20_000 { check(Double(Int64(bitPattern: generator.next()) >> Int64(generator.next() % 64))) }
        for _ in 0..<20_000 {                                                               // short decimals
            let digits = Double(generator.next() % 1_000_000)
            let scale = Double(sign: .plus, exponent: 0, significand: 1) * pow(10, Double(Int(generator.next() % 40) - 20))
            check(digits * scale)
        }
        #expect(checked > 99_000)
        #expect(mismatches.isEmpty, "\(mismatches)")
    }
}

/// A small, fast, seedable generator (SplitMix64) so failures can be replayed.
struct SplitMix64 {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
