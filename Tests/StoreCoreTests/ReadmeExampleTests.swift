import Testing

// The README's "Library example" for StoreCore, compiled and run as a test.
// Keep this file and the README in step.

// BEGIN README StoreCore example
import StoreCore

struct Counter: Reducer {
    struct State: Sendable, Equatable { var count = 0 }
    enum Action: Sendable { case increment, decrement }

    func reduce(into state: inout State, action: Action) {
        switch action {
        case .increment: state.count += 1
        case .decrement: state.count -= 1
        }
    }
}

func readmeExample() -> [Int] {
    let store = Store(
        initialState: Counter.State(),
        reducer: Counter(),
        enhancer: .applyMiddleware(.thunk, .logging(to: { print($0) }))
    )
    var seen: [Int] = []
    let box = SeenBox()
    let token = store.subscribe(to: { $0.count }) { box.append($0) }   // fires only on change
    store.dispatch(.increment)
    store.dispatch(Thunk { context in                                    // side effects live in thunks
        if context.getState().count < 2 { context.send(.increment) }
    })
    token.cancel()
    seen = box.values
    return seen                                                          // [1, 2]
}
// END README StoreCore example

import Synchronization
final class SeenBox: Sendable {
    private let storage = Mutex<[Int]>([])
    func append(_ value: Int) { storage.withLock { $0.append(value) } }
    var values: [Int] { storage.withLock { $0 } }
}

@Test("the README's StoreCore example does what the README says")
func readmeExampleRuns() {
    #expect(readmeExample() == [1, 2])
}
