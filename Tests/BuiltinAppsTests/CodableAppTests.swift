import BuiltinApps
import SyncCore
import Testing

/// Seed 000's counter with its codec from `Codable` (BuiltinApps' `CodableCounterApp`): the
/// wire forms and digests must equal the hand-written `CounterApp`'s.
typealias CodableCounter = CodableCounterApp

/// Labeled associated values, nesting, optionals, arrays.
enum Shape: TaggedEnumCodable, Equatable, Sendable {
    case circle(radius: Double)
    case polygon(points: [Point], name: String?)
    case empty
}

/// `memberNames` that give `_0` the name a labeled value already has.
enum Clash: TaggedEnumCodable, Equatable, Sendable {
    case set(Int, text: String)
    static let memberNames = ["set": ["text"]]
}

struct Point: Codable, Hashable, Sendable {
    var x: Int
    var y: Int
}

@Suite("Codable apps: JSONValueEncoder / JSONValueDecoder")
struct CodableAppTests {
    @Test("actions travel as {\"type\":…} objects, exactly as the hand-written counter writes them")
    func actionsMatchHandWritten() throws {
        let codable = CodableCounter(), manual = CounterApp()
        let pairs: [(CodableCounter.Action, CounterApp.Action)] = [
            (.increment, .increment), (.decrement, .decrement),
            (.setIncrementing(false), .setIncrementing(false)), (.setLimitText("5"), .setLimitText("5")),
        ]
        for (mine, theirs) in pairs {
            let json = codable.encodeAction(mine)
            #expect(json.canonicalBytes == manual.encodeAction(theirs).canonicalBytes, "\(json.canonicalString)")
            #expect(try codable.decodeAction(json) == mine)
            #expect(try manual.decodeAction(json) == theirs)
        }
    }

    @Test("the digest of a Codable state equals the digest of the same state written by hand")
    func digestsMatchHandWritten() throws {
        let state = CodableCounter.State(count: 7, limitText: "e\u{301}")
        let manual = CounterApp.State(count: 7, isIncrementing: true, limitText: "e\u{301}")
        #expect(CodableCounter().digest(of: state) == CounterApp().digest(of: manual))
        #expect(try CodableCounter().decodeState(CounterApp().encodeState(manual)) == state)
    }

    @Test("labeled values, nesting, optionals and arrays round-trip; the wire form is readable")
    func roundTrip() throws {
        let shapes: [Shape] = [
            .circle(radius: 1.5), .polygon(points: [Point(x: 1, y: 2), Point(x: -3, y: 4)], name: "tri"),
            .polygon(points: [], name: nil), .empty,
        ]
        for shape in shapes {
            let json = try JSONValueEncoder().encode(shape)
            #expect(try JSONValueDecoder().decode(Shape.self, from: json) == shape)
        }
        #expect(try JSONValueEncoder().encode(Shape.circle(radius: 2)) == ["type": "circle", "radius": 2])
        #expect(try JSONValueEncoder().encode(Shape.empty) == ["type": "empty"])
        #expect(try JSONValueEncoder().encode([Shape.empty]) == [["type": "empty"]])
    }

    @Test("a refused action names its case as the case, not as a member path (with and without a case table)")
    func refusalNamesTheCase() throws {
        func message(_ body: () throws -> Void) -> String {
            do {
                try body()
                return ""
            } catch let error as AppCodingError {
                return error.message
            } catch {
                return "\(error)"
            }
        }
        // The counter has a case table; Shape decodes through synthesized Codable.
        let tabled = message { _ = try CodableCounter().decodeAction(["type": "setLimitText"]) }
        #expect(tabled == #"in case "setLimitText": missing member "text""#, "\(tabled)")
        let wrongType = message { _ = try CodableCounter().decodeAction(["type": "setLimitText", "text": 3]) }
        #expect(wrongType.hasPrefix(#"in case "setLimitText", at /text: "#), "\(wrongType)")
        let synthesized = message { _ = try JSONValueDecoder().decode(Shape.self, from: ["type": "circle"]) }
        #expect(synthesized.hasPrefix(#"in case "circle": "#) && synthesized.contains("radius"), "\(synthesized)")
        let nested = message {
            _ = try JSONValueDecoder().decode(Shape.self, from: ["type": "polygon", "points": [["x": 1, "y": "2"]]])
        }
        #expect(nested.hasPrefix(#"in case "polygon", at /points/0/y: "#), "\(nested)")
        let plain = message { _ = try JSONValueDecoder().decode(Point.self, from: ["x": 1.5, "y": 2]) }
        #expect(plain.hasPrefix("at /x: "), "\(plain)")
    }

    @Test("what JSON cannot carry exactly is refused with the path, never rounded")
    func refusals() throws {
        #expect(throws: AppCodingError.self) { try JSONValueEncoder().encode(["big": Int.max]) }
        #expect(throws: AppCodingError.self) { try JSONValueEncoder().encode(Point(x: 1 << 60, y: 0)) }
        #expect(throws: AppCodingError.self) { try JSONValueEncoder().encode([Double.nan]) }
        do {
            _ = try JSONValueDecoder().decode(Point.self, from: ["x": 1.5, "y": 2])
            Issue.record("1.5 is not an Int")
        } catch {
            #expect(error.message.contains("/x"), "\(error.message)")
        }
        do {
            _ = try JSONValueDecoder().decode(Shape.self, from: ["type": "hexagon"])
            Issue.record("an unknown case must be refused")
        } catch {
            #expect(!error.message.isEmpty)
        }
        #expect(throws: AppCodingError.self) { try JSONValueDecoder().decode(Shape.self, from: ["radius": 1]) }
        #expect(throws: AppCodingError.self) { try JSONValueDecoder().decode(Point.self, from: ["x": 1]) }
        // An unencodable action is sent as something the hub refuses with the reason.
        struct Wide: CodableSyncApp {
            typealias State = Int
            enum Action: TaggedEnumCodable, Sendable { case add(Int) }
            static let name = "wide"
            static let version = "1"
            var initialState: Int { 0 }
            func reduce(into state: inout Int, action: Action) {}
        }
        #expect(Wide().encodeAction(.add(Int.max))["unencodable"] != nil)
    }

    @Test("what hash order would scramble is written in one order: sets, pair-encoded dictionaries; ambiguous input decodes alike everywhere")
    func deterministicAcrossProcesses() throws {
        let set: Set<String> = ["pear", "apple", "fig", "banana", "kiwi"]
        #expect(try JSONValueEncoder().encode(set) == ["apple", "banana", "fig", "kiwi", "pear"])
        let byPoint: [Point: String] = [Point(x: 2, y: 0): "b", Point(x: 1, y: 0): "a"]
        let pairs = try JSONValueEncoder().encode(byPoint)
        #expect(pairs == [["x": 1, "y": 0], "a", ["x": 2, "y": 0], "b"], "\(pairs.canonicalString)")
        #expect(try JSONValueDecoder().decode([Point: String].self, from: pairs) == byPoint)
        // A renamed member and a literal `_0` both present: the wire name wins, in every process.
        let ambiguous: JSON = ["type": "setLimitText", "text": "5", "_0": "6"]
        #expect(try CodableCounter().decodeAction(ambiguous) == .setLimitText("5"))
    }

    @Test("edge values are refused with a message, never a trap; optional tagged values encode")
    func edges() throws {
        #expect(throws: AppCodingError.self) { try JSONValueEncoder().encode([Int.min]) }
        #expect(throws: AppCodingError.self) { try JSONValueEncoder().encode([Int64.min]) }
        #expect(throws: AppCodingError.self) { try JSONValueDecoder().decode(Float.self, from: 1e39) }
        let optionals: [Shape?] = [.empty, nil, .circle(radius: 1)]
        let json = try JSONValueEncoder().encode(optionals)
        #expect(json == [["type": "empty"], .null, ["type": "circle", "radius": 1]])
        #expect(try JSONValueDecoder().decode([Shape?].self, from: json) == optionals)
        // Two members that would take one wire name.
        #expect(throws: AppCodingError.self) { try JSONValueEncoder().encode(Clash.set(1, text: "x")) }
    }

    @Test("a Codable app runs in a store like any other")
    func inAStore() {
        let store = Store(initialState: CodableCounter().initialState, reducer: CodableCounter())
        let manual = Store(initialState: CounterApp().initialState, reducer: CounterApp())
        for (mine, theirs) in [(CodableCounter.Action.increment, CounterApp.Action.increment),
                               (.setLimitText("3"), .setLimitText("3")), (.setIncrementing(false), .setIncrementing(false))] {
            store.dispatch(mine)
            manual.dispatch(theirs)
            #expect(CodableCounter().digest(of: store.state) == CounterApp().digest(of: manual.state))
        }
        #expect(store.state == CodableCounter.State(count: 1, isIncrementing: false, limitText: ""))
    }
}

/// docs/YOUR-APP.md's Codable example, as written there.
// BEGIN docs/YOUR-APP.md codable app example
import SyncCore

struct Tally: CodableSyncApp {
    struct State: Codable, Equatable, Sendable { var count = 0 }
    enum Action: TaggedEnumCodable, Sendable {
        case add(amount: Int)          // {"type":"add","amount":2}
        case reset                     // {"type":"reset"}
    }
    static let name = "tally"
    static let version = "1"
    var initialState: State { State() }
    func reduce(into state: inout State, action: Action) {
        switch action {
        case .add(let amount): state.count += amount
        case .reset: state.count = 0
        }
    }
}
// END docs/YOUR-APP.md codable app example

// BEGIN docs/YOUR-APP.md tagged cases example
import SyncCore

extension Tally.Action {
    static let taggedCases = TaggedCases<Tally.Action>(
        .case("add", Tally.Action.add, "amount"),
        .case("reset", .reset)
    )
}
// END docs/YOUR-APP.md tagged cases example

@Test("docs/YOUR-APP.md's Tally app speaks the wire form the page shows")
func readmeTally() throws {
    let app = Tally()
    #expect(app.encodeAction(.add(amount: 2)) == ["type": "add", "amount": 2])
    #expect(app.encodeAction(.reset) == ["type": "reset"])
    var state = app.initialState
    app.reduce(into: &state, action: try app.decodeAction(["type": "add", "amount": 2]))
    #expect(app.encodeState(state) == ["count": 2])
}
