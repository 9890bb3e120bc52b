import BuiltinApps
import SyncCore
import SyncProtocol
import Testing

/// A Codable app whose actions are `Figure`s (a table with labeled values, an optional, an
/// array of structs, a nested tagged enum and a case without values).
private struct FigureApp: CodableSyncApp {
    struct State: Codable, Equatable, Sendable { var figures: [Figure] = [] }
    typealias Action = Figure
    static let name = "figures"
    static let version = "1"
    var initialState: State { State() }
    func reduce(into state: inout State, action: Figure) { state.figures.append(action) }
}

/// A Codable app whose table lists only some cases.
private struct PartialApp: CodableSyncApp {
    struct State: Codable, Equatable, Sendable { var n = 0 }
    typealias Action = Partial
    static let name = "partial"
    static let version = "1"
    var initialState: State { State() }
    func reduce(into state: inout State, action: Partial) {}
}

/// `decodeAction(canonical:maxDepth:)` of a Codable app with a `TaggedCases` table, the
/// replicas' and the hub's byte-level path, against `decodeAction(_:)` on the parsed tree:
/// whatever the fast path decodes, the general path decodes to the same action.
@Suite("Tagged cases from canonical bytes")
struct TaggedCasesCanonicalTests {
    private let app = FigureApp()

    /// The fast path's answer for `text`, and the general path's (nil when it refuses). The
    /// general path runs first, so the entry has passed its check.
    private func both(_ text: String, maxDepth: Int = 512) -> (fast: Figure?, general: Figure?) {
        let bytes = Array(text.utf8)
        let general = (try? JSON(parsing: bytes, maxDepth: maxDepth)).flatMap { try? app.decodeAction($0) }
        let fast = bytes.withUnsafeBytes { app.decodeAction(canonical: $0, maxDepth: maxDepth) }
        return (fast, general)
    }

    @Test("every listed case decodes from bytes exactly as from the tree", arguments: [
        #"{"type":"empty"}"#,
        #"{"radius":2.5,"type":"circle"}"#,
        #"{"radius":-1e3,"type":"circle"}"#,
        #"{"name":"tri","points":[{"x":1,"y":2},{"x":3,"y":-4}],"type":"polygon"}"#,
        #"{"points":[],"type":"polygon"}"#,
        #"{"name":null,"points":[],"type":"polygon"}"#,
        #"{"label":"a \"b\" é","shape":{"radius":1,"type":"circle"},"type":"labeled"}"#,
        #"{"extra":[1,{"k":"}"}],"radius":1,"type":"circle"}"#,
        #"{"extra":true,"type":"empty"}"#,
    ])
    func listedCases(text: String) throws {
        let (fast, general) = both(text)
        let decoded = try #require(fast, "the fast path refused \(text)")
        #expect(decoded == general, "\(text)")
    }

    @Test("the counter's actions take the fast path in BuiltinApps' Codable counter")
    func counter() throws {
        let counter = CodableCounterApp()
        for action: CodableCounterApp.Action in [.increment, .decrement, .setIncrementing(false), .setLimitText("5")] {
            let bytes = counter.encodeAction(action).canonicalBytes
            #expect(try counter.decodeAction(JSON(parsing: bytes)) == action)
            #expect(bytes.withUnsafeBytes { counter.decodeAction(canonical: $0, maxDepth: 512) } == action)
        }
    }

    @Test("anything else is left to the general path (nil), never decoded differently", arguments: [
        #"{ "type":"empty"}"#,                              // whitespace
        #"{"type":"circle","radius":1}"#,                   // not canonical order
        #"{"radius":1,"radius":2,"type":"circle"}"#,        // a member twice
        #"{"rad\u0069us":1,"type":"circle"}"#,              // an escaped name
        #"{"type":"\u0065mpty"}"#,                          // an escaped tag
        #"{"type":"square"}"#,                              // a tag the table does not list
        #"{"radius":1}"#,                                   // no type
        #"{"type":1}"#,                                     // a type that is not a string
        #"{"radius":"1","type":"circle"}"#,                 // a member of the wrong type
        #"{"type":"circle"}"#,                              // a member missing
        #"{"radius":01,"type":"circle"}"#,                  // not JSON
        #"{"points":[1,],"type":"polygon"}"#,               // not JSON
        #"{"type":"empty"} "#,                              // trailing bytes
        #"{"type":"empty"},"x":1"#,                         // an envelope's extra member
        #"{"type":"empty""#, #"["type"]"#, #""#, #"{"#, #"{}"#,
    ])
    func othersFallBack(text: String) {
        let (fast, general) = both(text)
        #expect(fast == nil, "the fast path decoded \(text) as \(String(describing: fast)); the tree path gives \(String(describing: general))")
    }

    @Test("a case the table does not list decodes through Codable only")
    func unlisted() {
        let bytes = Array(#"{"text":"x","type":"unlisted"}"#.utf8)
        #expect(bytes.withUnsafeBytes { PartialApp().decodeAction(canonical: $0, maxDepth: 512) } == nil)
        #expect((try? PartialApp().decodeAction(JSON(parsing: bytes))) == .unlisted(text: "x"))
    }

    @Test("the depth limit is the parser's: a value one level too deep is refused by both")
    func depth() {
        let text = #"{"label":"x","shape":{"points":[{"x":1,"y":2}],"type":"polygon"},"type":"labeled"}"#
        #expect(both(text, maxDepth: 4).fast != nil)
        #expect(both(text, maxDepth: 4).general != nil)
        #expect(both(text, maxDepth: 3).fast == nil)
        #expect(both(text, maxDepth: 3).general == nil)
    }

    @Test("20 000 random and mutated actions: whatever the fast path decodes, the tree path decodes the same")
    func randomized() throws {
        var random = SeededRandom(seed: 0x7A66_ED_CA5E5)
        func pick(_ count: Int) -> Int { Int(random.next() % UInt64(count)) }
        func figure(_ depth: Int) -> Figure {
            switch pick(depth > 1 ? 3 : 4) {
            case 0: return .circle(radius: [0, 1.5, -2, 1e21][pick(4)])
            case 1: return .polygon(points: (0..<pick(3)).map { _ in Point(x: pick(9), y: -pick(9)) },
                                    name: [nil, "", "tri", "\"q\""][pick(4)])
            case 2: return .empty
            default: return .labeled(["", "a", "é", "x\ny"][pick(4)], [.empty, .circle(radius: 3)][pick(2)])
            }
        }
        let alphabet = Array(#"{}[]":,0123456789-.eE"typeradiusnameemptycircle\ "#.utf8)
        var accepted = 0
        for round in 0..<20_000 {
            var bytes = app.encodeAction(figure(0)).canonicalBytes
            // Half are mutated: a byte replaced, removed or inserted.
            if round % 2 == 1, !bytes.isEmpty {
                let at = pick(bytes.count)
                switch pick(3) {
                case 0: bytes[at] = alphabet[pick(alphabet.count)]
                case 1: bytes.remove(at: at)
                default: bytes.insert(alphabet[pick(alphabet.count)], at: at)
                }
            }
            let general = (try? JSON(parsing: bytes)).flatMap { try? app.decodeAction($0) }
            let fast = bytes.withUnsafeBytes { app.decodeAction(canonical: $0, maxDepth: 512) }
            if let fast {
                accepted += 1
                #expect(fast == general, "\(String(decoding: bytes, as: UTF8.self))")
            } else if round % 2 == 0 {
                Issue.record("the fast path refused the canonical action \(String(decoding: bytes, as: UTF8.self))")
            }
        }
        #expect(accepted > 10_000, "the fast path should take every unmutated action (took \(accepted))")
    }
}

/// A small, fast, seedable generator (SplitMix64) so failures can be replayed.
private struct SeededRandom {
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
