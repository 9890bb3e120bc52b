import SyncCore
import Synchronization

/// The state of the store benchmarks: one counter that changes and fields that don't.
struct BenchState: Sendable, Equatable {
    var count = 0
    var others = [Int](repeating: 0, count: 100)
}

struct BenchReducer: Reducer {
    enum Action: Sendable { case tick }
    func reduce(into state: inout BenchState, action: Action) {
        state.count &+= 1
    }
}

/// Measures `body` over `rounds` rounds of `iterations` calls; returns the median ns per call.
func measure(rounds: Int, iterations: Int, _ body: () -> Void) -> Double {
    var samples: [Double] = []
    for _ in 0..<rounds {
        let start = ContinuousClock.now
        for _ in 0..<iterations { body() }
        samples.append(nanoseconds(ContinuousClock.now - start) / Double(iterations))
    }
    return median(samples)
}

/// `store.dispatch` of a trivial action with the thunk middleware and one subscriber, plus
/// `selectors` selector subscriptions of which exactly one sees its value change.
func storeDispatch(selectors: Int, quick: Bool) -> Result {
    let store = Store(initialState: BenchState(), reducer: BenchReducer(), enhancer: .applyMiddleware(.thunk))
    let calls = Atomic<Int>(0)
    var tokens: [Subscription] = [store.subscribe { _ in calls.add(1, ordering: .relaxed) }]
    if selectors > 0 {
        tokens.append(store.subscribe(to: { $0.count }) { _ in calls.add(1, ordering: .relaxed) })
        for index in 1..<selectors {
            let slot = index % 100
            tokens.append(store.subscribe(to: { $0.others[slot] }) { _ in calls.add(1, ordering: .relaxed) })
        }
    }
    let iterations = quick ? 20_000 : (selectors > 0 ? 100_000 : 500_000)
    let ns = measure(rounds: quick ? 5 : 15, iterations: iterations) { store.dispatch(.tick) }
    withExtendedLifetime(tokens) {}
    return Result(scenario: "store.dispatch", params: [("selectors", JSON(selectors))], metrics: [("ns_per_op", ns)])
}

/// Where the baseline keeps its state, so the optimiser cannot fold the loop away.
final class BaselineBox {
    var state = BenchState()
}

/// One reducer call on state behind a reference: the least work any store must do.
@inline(never)
func baselineApply(_ box: BaselineBox, _ reducer: BenchReducer) {
    reducer.reduce(into: &box.state, action: .tick)
}

/// The in-run baseline for the store: the reducer called directly, through an opaque call.
func reduceBaseline(quick: Bool) -> Result {
    let reducer = BenchReducer()
    let box = BaselineBox()
    let ns = measure(rounds: quick ? 5 : 15, iterations: quick ? 100_000 : 2_000_000) {
        baselineApply(box, reducer)
    }
    precondition(box.state.count > 0)
    return Result(scenario: "baseline.reduce", params: [], metrics: [("ns_per_op", ns)])
}
