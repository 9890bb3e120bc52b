import Testing

// docs/YOUR-APP.md's StoreCore example ("The store (StoreCore)"), compiled and run as a test.
// Keep the lines between BEGIN and END identical to the page (ReadmeSyncTests checks them).

// BEGIN docs/YOUR-APP.md StoreCore example
import StoreCore
import Synchronization

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

/// Callbacks are `@Sendable`, so they record into something thread-safe.
final class Seen: Sendable {
    let counts = Mutex<[Int]>([])
}

func readmeExample() -> [Int] {
    let store = Store(
        initialState: Counter.State(),
        reducer: Counter(),
        enhancer: .applyMiddleware(.thunk, .logging(to: { print($0) }))
    )
    let seen = Seen()
    let token = store.subscribe(to: { $0.count }) { count in      // fires only on change
        seen.counts.withLock { $0.append(count) }
    }
    store.dispatch(.increment)
    store.dispatch(Thunk { context in                              // side effects live in thunks
        if context.getState().count < 2 { context.send(.increment) }
    })
    token.cancel()
    return seen.counts.withLock { $0 }                             // [1, 2]
}
// END docs/YOUR-APP.md StoreCore example

@Test("docs/YOUR-APP.md's StoreCore example does what the page says")
func readmeExampleRuns() {
    #expect(readmeExample() == [1, 2])
}
