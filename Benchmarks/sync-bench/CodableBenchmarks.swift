import BuiltinApps
import SyncCore

/// Decoding a wire action and applying it: the hand-written `CounterApp` codec, then the
/// `Codable` one (`codable.apply`; goal: at most 1.5× the hand-written cost).
func codableApply(quick: Bool) -> [Result] {
    let wire: JSON = ["type": "setLimitText", "text": "12"]
    let manual = CounterApp(), codable = CodableCounterApp()
    var manualState = manual.initialState, codableState = codable.initialState
    let iterations = quick ? 20_000 : 200_000
    let handWritten = measure(rounds: quick ? 5 : 15, iterations: iterations) {
        if let action = try? manual.decodeAction(wire) { manual.reduce(into: &manualState, action: action) }
    }
    let viaCodable = measure(rounds: quick ? 5 : 15, iterations: iterations) {
        if let action = try? codable.decodeAction(wire) { codable.reduce(into: &codableState, action: action) }
    }
    return [
        Result(scenario: "handwritten.apply", params: [("app", "counter")], metrics: [("ns_per_op", handWritten)]),
        Result(scenario: "codable.apply", params: [("app", "counter")],
               metrics: [("ns_per_op", viaCodable), ("ratio_to_handwritten", viaCodable / handWritten)]),
    ]
}
