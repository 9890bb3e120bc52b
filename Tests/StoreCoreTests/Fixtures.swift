import StoreCore
import SyncLocks
import Synchronization

/// A tiny counter used across the StoreCore tests.
struct Count: Reducer {
    enum Action: Sendable, Equatable { case increment, decrement, add(Int), noop }
    struct State: Sendable, Equatable { var count = 0; var label = "" }
    func reduce(into state: inout State, action: Action) {
        switch action {
        case .increment: state.count += 1
        case .decrement: state.count -= 1
        case .add(let n): state.count += n
        case .noop: break
        }
    }
}

/// A reducer that refuses negative results, validating before it writes.
struct NonNegative: Reducer {
    struct Refused: Error, Equatable { let count: Int }
    func reduce(into state: inout Int, action: Int) throws(Refused) {
        guard state + action >= 0 else { throw Refused(count: state + action) }
        state += action
    }
}

/// A thread-safe list for recording callbacks.
final class Recorder<T: Sendable>: Sendable {
    private let items = Locked<[T]>([])
    func append(_ item: T) { items.withLock { $0.append(item) } }
    var all: [T] { items.withLock { $0 } }
    var count: Int { items.withLock { $0.count } }
}
