import BuiltinApps
import SyncCore

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
    return [
        Result(scenario: "handwritten.apply", params: [("app", "counter")], metrics: [("ns_per_op", handWritten)]),
        Result(scenario: "codable.apply", params: [("app", "counter")],
               metrics: [("ns_per_op", viaCodable), ("ratio_to_handwritten", viaCodable / handWritten)]),
    ]
}
