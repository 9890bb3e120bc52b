import BuiltinApps
import SyncCore
import Testing

/// `Shape` with a table: labeled values, an optional, an array of structs, a nested tagged enum.
enum Figure: TaggedEnumCodable, Equatable, Sendable {
    case circle(radius: Double)
    case polygon(points: [Point], name: String?)
    case labeled(String, Shape)
    case empty

    static let taggedCases = TaggedCases<Figure>(
        .case("circle", Figure.circle, "radius"),
        .case("polygon", Figure.polygon, "points", "name"),
        .case("labeled", Figure.labeled, "label", "shape"),
        .case("empty", .empty)
    )
}

/// The example in `TaggedCases`'s documentation, as written there.
enum DocumentedAction: TaggedEnumCodable, Equatable, Sendable {
    case add(amount: Int)
    case rename(String, to: String)
    case reset

    static let taggedCases = TaggedCases<DocumentedAction>(
        .case("add", DocumentedAction.add, "amount"),
        .case("rename", DocumentedAction.rename, "from", "to"),
        .case("reset", .reset)
    )
}

/// A table that lists only some cases: the others decode through `Codable`.
enum Partial: TaggedEnumCodable, Equatable, Sendable {
    case listed(Int)
    case unlisted(text: String)

    static let taggedCases = TaggedCases<Partial>(.case("listed", Partial.listed, "value"))
}

/// Wrong tables: each must be refused loudly, never misread.
enum Swapped: TaggedEnumCodable, Equatable, Sendable {
    case on
    case off
    static let taggedCases = TaggedCases<Swapped>(.case("on", .off), .case("off", .on))
}

enum Crossed: TaggedEnumCodable, Equatable, Sendable {
    case move(x: Int, y: Int)
    static let taggedCases = TaggedCases<Crossed>(.case("move", Crossed.move, "y", "x"))
}

enum Miscounted: TaggedEnumCodable, Equatable, Sendable {
    case pair(Int, Int)
    static let taggedCases = TaggedCases<Miscounted>(.case("pair", Miscounted.pair, "first"))
}

@Suite("TaggedCases: decoding tagged enums through a table of constructors")
struct TaggedCasesTests {
    @Test("every case round-trips through the table, as through Codable; unlabeled values take the table's names")
    func roundTrip() throws {
        let figures: [Figure] = [
            .circle(radius: 1.5), .polygon(points: [Point(x: 1, y: 2)], name: "tri"), .polygon(points: [], name: nil),
            .labeled("inner", .circle(radius: 2)), .labeled("none", .empty), .empty,
        ]
        for figure in figures {
            let json = try JSONValueEncoder().encode(figure)
            #expect(try JSONValueDecoder().decode(Figure.self, from: json) == figure, "\(json.canonicalString)")
        }
        // The table's names are the enum's member names: what is written is what it reads.
        #expect(try JSONValueEncoder().encode(Figure.labeled("a", .empty))
            == ["type": "labeled", "label": "a", "shape": ["type": "empty"]])
        #expect(Figure.memberNames["labeled"] == ["label", "shape"])
        // An absent optional member is nil, as `decodeIfPresent` reads it.
        #expect(try JSONValueDecoder().decode(Figure.self, from: ["type": "polygon", "points": []]) == .polygon(points: [], name: nil))
        // The documentation's example: an unlabeled value and a labeled one in one case.
        #expect(try JSONValueEncoder().encode(DocumentedAction.rename("a", to: "b")) == ["type": "rename", "from": "a", "to": "b"])
        #expect(try JSONValueDecoder().decode(DocumentedAction.self, from: ["type": "rename", "from": "a", "to": "b"]) == .rename("a", to: "b"))
        // Nested in other values, the generic decoder uses the table too.
        let many: [Figure?] = [.empty, nil, .circle(radius: 3)]
        #expect(try JSONValueDecoder().decode([Figure?].self, from: try JSONValueEncoder().encode(many)) == many)
    }

    @Test("the counter's table decodes exactly what the hand-written codec does")
    func counterTable() throws {
        let codable = CodableCounterApp(), manual = CounterApp()
        #expect(!CodableCounterApp.Action.taggedCases.isEmpty)
        for line in [#"{"type":"increment"}"#, #"{"type":"decrement"}"#, #"{"type":"setIncrementing","value":false}"#,
                     #"{"type":"setLimitText","text":"e\u0301"}"#] {
            let json = try JSON(parsing: Array(line.utf8))
            let action = try codable.decodeAction(json)
            #expect(codable.encodeAction(action).canonicalBytes == manual.encodeAction(try manual.decodeAction(json)).canonicalBytes)
        }
    }

    @Test("bad members are refused with the path and the member, as through Codable")
    func refusals() throws {
        for (json, fragment) in [(["type": "circle"] as JSON, "radius"), (["type": "circle", "radius": "big"], "/radius"),
                                 (["type": "labeled", "label": "a", "shape": ["type": "hexagon"]], "shape")] {
            do {
                _ = try JSONValueDecoder().decode(Figure.self, from: json)
                Issue.record("\(json.canonicalString) must be refused")
            } catch {
                #expect(error.message.contains(fragment), "\(error.message)")
            }
        }
        // A tag the table does not list falls back to Codable, which words the refusal.
        #expect(throws: AppCodingError.self) { try JSONValueDecoder().decode(Figure.self, from: ["type": "hexagon"]) }
        #expect(throws: AppCodingError.self) { try JSONValueDecoder().decode(Figure.self, from: ["radius": 1]) }
        #expect(throws: AppCodingError.self) { try JSONValueDecoder().decode(Figure.self, from: ["type": 7]) }
    }

    @Test("a partial table: listed cases through it, the others through Codable")
    func partial() throws {
        for value in [Partial.listed(3), .unlisted(text: "x")] {
            #expect(try JSONValueDecoder().decode(Partial.self, from: try JSONValueEncoder().encode(value)) == value)
        }
        #expect(try JSONValueEncoder().encode(Partial.listed(3)) == ["type": "listed", "value": 3])
    }

    @Test("a wrong table is refused with the entry and what to fix, never a silent misreading")
    func wrongTables() throws {
        func refusal<E: TaggedEnumCodable>(_ type: E.Type, _ json: JSON) -> String {
            do {
                let value = try JSONValueDecoder().decode(type, from: json)
                return "decoded \(value)"
            } catch {
                return error.message
            }
        }
        let swapped = refusal(Swapped.self, ["type": "on"])
        #expect(swapped.contains("Swapped.taggedCases") && swapped.contains("fix that entry"), "\(swapped)")
        let crossed = refusal(Crossed.self, ["type": "move", "x": 1, "y": 2])
        #expect(crossed.contains("Crossed.taggedCases"), "\(crossed)")
        let miscounted = refusal(Miscounted.self, ["type": "pair", "first": 1, "_1": 2])
        #expect(miscounted.contains("names 1 member(s) for 2 associated value(s)"), "\(miscounted)")
    }
}
