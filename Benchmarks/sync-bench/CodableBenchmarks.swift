import BuiltinApps
import SyncCore
import SyncPOSIX

/// Applying a wire action as a replica does — parse the bytes, decode, reduce — with the
/// hand-written `CounterApp` codec, then the `Codable` one (`codable.apply`; goal: at most
/// 1.5× the hand-written cost).
func codableApply(quick: Bool) -> [Result] {
    let bytes = Array(#"{"type":"setLimitText","text":"12"}"#.utf8)
    let manual = CounterApp(), codable = CodableCounterApp()
    var manualState = manual.initialState, codableState = codable.initialState
    let iterations = quick ? 20_000 : 200_000
    let handWritten = measure(rounds: quick ? 5 : 15, iterations: iterations) {
        if let wire = try? JSON(parsing: bytes), let action = try? manual.decodeAction(wire) {
            manual.reduce(into: &manualState, action: action)
        }
    }
    let viaCodable = measure(rounds: quick ? 5 : 15, iterations: iterations) {
        if let wire = try? JSON(parsing: bytes), let action = try? codable.decodeAction(wire) {
            codable.reduce(into: &codableState, action: action)
        }
    }
    // What a replica and the hub do now: the action decoded from its canonical bytes through
    // the table (no `JSON` tree), after its entry was checked once through the tree.
    var canonicalState = codable.initialState
    let canonical = (try? JSON(parsing: bytes))?.canonicalBytes ?? bytes
    _ = try? codable.decodeAction(JSON(parsing: canonical))
    if canonical.withUnsafeBytes({ codable.decodeAction(canonical: $0, maxDepth: 511) }) == nil {
        Console.error("sync-bench: codable.apply: the canonical path refused \(String(decoding: canonical, as: UTF8.self)); its figure measures nothing")
    }
    let viaCanonical = measure(rounds: quick ? 5 : 15, iterations: iterations) {
        if let action = canonical.withUnsafeBytes({ codable.decodeAction(canonical: $0, maxDepth: 511) }) {
            codable.reduce(into: &canonicalState, action: action)
        }
    }
    var plainState = codable.initialState
    let viaSynthesized = measure(rounds: quick ? 5 : 15, iterations: iterations) {
        if let wire = try? JSON(parsing: bytes), let action = try? JSONValueDecoder().decode(PlainCounterAction.self, from: wire) {
            codable.reduce(into: &plainState, action: action.counterAction)
        }
    }
    return [
        Result(scenario: "handwritten.apply", params: [("app", "counter")], metrics: [("ns_per_op", handWritten)]),
        Result(scenario: "codable.apply", params: [("app", "counter"), ("decode", "taggedCases")],
               metrics: [("ns_per_op", viaCodable), ("ratio_to_handwritten", viaCodable / handWritten)]),
        Result(scenario: "codable.apply", params: [("app", "counter"), ("decode", "taggedCases-canonical")],
               metrics: [("ns_per_op", viaCanonical), ("ratio_to_handwritten", viaCanonical / handWritten)]),
        Result(scenario: "codable.apply", params: [("app", "counter"), ("decode", "synthesized")],
               metrics: [("ns_per_op", viaSynthesized), ("ratio_to_handwritten", viaSynthesized / handWritten)]),
    ]
}

/// `CodableCounterApp.Action` without its ``TaggedCases`` table: decoded through the
/// synthesized `init(from:)` alone.
private enum PlainCounterAction: TaggedEnumCodable {
    case increment
    case decrement
    case setIncrementing(Bool)
    case setLimitText(String)

    static let memberNames = ["setIncrementing": ["value"], "setLimitText": ["text"]]

    var counterAction: CodableCounterApp.Action {
        switch self {
        case .increment: .increment
        case .decrement: .decrement
        case .setIncrementing(let value): .setIncrementing(value)
        case .setLimitText(let text): .setLimitText(text)
        }
    }
}
