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

/// An optional member under the wrong name: wrong even when the member is absent.
enum Misnamed: TaggedEnumCodable, Equatable, Sendable {
    case tag(name: String?)
    static let taggedCases = TaggedCases<Misnamed>(.case("tag", Misnamed.tag, "title"))
}

/// `memberNames` given by hand, disagreeing with the table.
enum Disagreeing: TaggedEnumCodable, Equatable, Sendable {
    case set(String)
    static let memberNames = ["set": ["text"]]
    static let taggedCases = TaggedCases<Disagreeing>(.case("set", Disagreeing.set, "value"))
}

/// A value that reads `null` but is not an optional.
struct Blank: Codable, Equatable, Sendable {
    var text: String?

    init(text: String?) { self.text = text }

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        text = container.decodeNil() ? nil : try container.decode(String.self)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let text { try container.encode(text) } else { try container.encodeNil() }
    }
}

/// A member that reads `null` but is not optional; a tag listed twice.
enum Loose: TaggedEnumCodable, Equatable, Sendable {
    case put(Blank)
    case drop
    static let taggedCases = TaggedCases<Loose>(.case("put", Loose.put, "value"), .case("drop", .drop),
                                                .case("put", Loose.put, "other"))
}

/// Decoded for the first time from several tasks at once.
enum Raced: TaggedEnumCodable, Equatable, Sendable {
    case add(amount: Int)
    static let taggedCases = TaggedCases<Raced>(.case("add", Raced.add, "amount"))
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
        #expect(swapped.contains(#"the entry "on" of Swapped.taggedCases builds {"type":"off"}"#) && swapped.contains("give it the enum case itself"), "\(swapped)")
        // Members out of order are found whatever the values: here x == y on first use.
        let crossed = refusal(Crossed.self, ["type": "move", "x": 1, "y": 1])
        #expect(crossed.contains(#"the entry "move" of Crossed.taggedCases names the members ["y", "x"]"#), "\(crossed)")
        #expect(refusal(Crossed.self, ["type": "move", "x": 1, "y": 2]).contains("Crossed.taggedCases"))
        let miscounted = refusal(Miscounted.self, ["type": "pair", "first": 1, "_1": 2])
        #expect(miscounted.contains("names 1 member(s) for 2 associated value(s)"), "\(miscounted)")
        // A misnamed optional is found even when the member is absent (it would read as nil).
        let misnamed = refusal(Misnamed.self, ["type": "tag"])
        #expect(misnamed.contains(#"names the members ["title"], but Codable reads case "tag" from ["name"]"#), "\(misnamed)")
        // memberNames by hand that disagree with the table: the refusal names the entry, not
        // only a missing member.
        let disagreeing = refusal(Disagreeing.self, try JSONValueEncoder().encode(Disagreeing.set("x")))
        #expect(disagreeing.contains("Disagreeing.taggedCases") && disagreeing.contains(#"["text"]"#), "\(disagreeing)")
    }

    @Test("an absent member is nil only for an optional, as through Codable; a tag listed twice keeps its first entry")
    func absentMembers() throws {
        do {
            _ = try JSONValueDecoder().decode(Loose.self, from: ["type": "put"])
            Issue.record("an absent JSON member is not null")
        } catch {
            #expect(error.message.contains(#"missing member "value""#), "\(error.message)")
        }
        #expect(try JSONValueDecoder().decode(Loose.self, from: ["type": "put", "value": nil]) == .put(Blank(text: nil)))
        #expect(Loose.memberNames == ["put": ["value"]])
        #expect(try JSONValueEncoder().encode(Loose.put(Blank(text: "7"))) == ["type": "put", "value": "7"])
    }

    @Test("first uses from several tasks at once all decode alike")
    func concurrentFirstUse() async throws {
        let results = try await withThrowingTaskGroup(of: Raced.self) { group in
            for amount in 0..<16 {
                group.addTask { try JSONValueDecoder().decode(Raced.self, from: ["type": "add", "amount": JSON(amount)]) }
            }
            return try await group.reduce(into: [Raced]()) { $0.append($1) }
        }
        #expect(Set(results.map { try? JSONValueEncoder().encode($0).canonicalString }).count == 16)
    }
}
