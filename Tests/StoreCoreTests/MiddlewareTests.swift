import StoreCore
import Testing
import SyncLocks
import Synchronization

@Suite("Middleware, enhancers and thunks")
struct MiddlewareTests {
    typealias M = Middleware<Count.State, Count.Action>

    @Test("middleware sees getState before and after next, in chain order")
    func chainOrder() {
        let log = Recorder<String>()
        let first = M { context, next, input in
            log.append("first before \(context.getState().count)")
            next(input)
            log.append("first after \(context.getState().count)")
        }
        let second = M { _, next, input in
            log.append("second")
            next(input)
        }
        let store = Store(initialState: Count.State(), reducer: Count(), enhancer: .applyMiddleware(first, second))
        store.dispatch(.increment)
        #expect(log.all == ["first before 0", "second", "first after 1"])
    }

    @Test("middleware can swallow, transform and add actions")
    func swallowTransformAdd() {
        let swallowNoops = M { _, next, input in
            if case .action(.noop) = input { return }
            next(input)
        }
        let doubleAdds = M { _, next, input in
            if case .action(.add(let n)) = input { next(.action(.add(n * 2))) } else { next(input) }
        }
        let followDecrementWithIncrement = M { context, next, input in
            next(input)
            if case .action(.decrement) = input { context.send(.add(100)) }
        }
        let seen = Recorder<Count.Action>()
        let spy = M { _, next, input in
            if let action = input.action { seen.append(action) }
            next(input)
        }
        let store = Store(
            initialState: Count.State(), reducer: Count(),
            enhancer: .applyMiddleware(swallowNoops, doubleAdds, followDecrementWithIncrement, spy)
        )
        store.dispatch(.noop)
        store.dispatch(.add(3))
        store.dispatch(.decrement)
        #expect(store.state.count == 6 - 1 + 200)
        #expect(seen.all == [.add(6), .decrement, .add(200)])
    }

    @Test("middleware can delay an action and pass it on later from another thread")
    func delay() async {
        let parked = Locked<[@Sendable () -> Void]>([])
        let delayIncrements = M { _, next, input in
            if case .action(.increment) = input {
                parked.withLock { $0.append { next(input) } }
            } else {
                next(input)
            }
        }
        let store = Store(initialState: Count.State(), reducer: Count(), enhancer: .applyMiddleware(delayIncrements))
        store.dispatch(.increment)
        store.dispatch(.add(5))
        #expect(store.state.count == 5)
        let release = parked.withLock { $0 }
        await Task.detached { for resume in release { resume() } }.value
        #expect(store.state.count == 6)
    }

    @Test("enhancers compose: the outer one sees each input first")
    func enhancersCompose() {
        let log = Recorder<String>()
        func tagging(_ tag: String) -> StoreEnhancer<Count.State, Count.Action> {
            StoreEnhancer { _, dispatch in { input in log.append(tag); dispatch(input) } }
        }
        let store = Store(
            initialState: Count.State(), reducer: Count(),
            enhancer: tagging("outer").composed(with: tagging("inner")).composed(with: .applyMiddleware(.logging(to: { _ in log.append("logger") })))
        )
        store.dispatch(.increment)
        #expect(log.all == ["outer", "inner", "logger", "logger"])
    }

    @Test("the thunk middleware runs sync thunks that read state and dispatch")
    func syncThunk() {
        let store = Store(initialState: Count.State(count: 2), reducer: Count(), enhancer: .applyMiddleware(.thunk))
        store.dispatch(Thunk { context in
            if context.getState().count == 2 { context.send(.add(40)) }
        })
        #expect(store.state.count == 42)
    }

    @Test("async thunks finish later and dispatch then (seed 001's authentication)")
    func asyncThunk() async {
        let store = Store(initialState: Count.State(), reducer: Count(), enhancer: .applyMiddleware(.thunk))
        let stream = store.values(of: { $0.count })
        store.dispatch(Thunk(async: { context in
            await Task.yield()
            context.send(.add(7))
        }))
        for await value in stream where value == 7 { break }
        #expect(store.state.count == 7)
    }

    @Test("the logging middleware writes the action and the state after it to its sink")
    func logging() {
        let lines = Recorder<String>()
        let store = Store(initialState: Count.State(), reducer: Count(), enhancer: .applyMiddleware(.logging(to: { lines.append($0) }), .thunk))
        store.dispatch(.increment)
        store.dispatch(Thunk { $0.send(.decrement) })
        #expect(lines.all == [
            "action: increment", "state: State(count: 1, label: \"\")",
            "thunk",
            "action: decrement", "state: State(count: 0, label: \"\")",
        ])
    }

    @Test("a thunk without the thunk middleware still runs, at the end of the chain (never dropped)")
    func thunkWithoutMiddleware() {
        let store = Store(initialState: Count.State(), reducer: Count())
        store.dispatch(Thunk { $0.send(.increment) })
        #expect(store.state.count == 1)

        // With other middleware but no `.thunk`, the thunk passes through it and runs at the end.
        let lines = Recorder<String>()
        let logged = Store(initialState: Count.State(), reducer: Count(), enhancer: .applyMiddleware(.logging(to: { lines.append($0) })))
        logged.dispatch(Thunk { $0.send(.increment) })
        #expect(logged.state.count == 1)
        #expect(lines.all == ["thunk", "action: increment", "state: State(count: 1, label: \"\")"])
    }
}

@Suite("Redux's own store rules, where StoreCore once differed")
struct ReduxStoreRuleTests {
    typealias M = Middleware<Count.State, Count.Action>

    @Test("an action and a thunk dispatched while middleware is being built are not lost: they run through the finished chain")
    func dispatchDuringBuild() {
        let seen = Recorder<String>()
        let eager = M(wrap: { context, next in
            context.send(.add(10))
            context.dispatch(.thunk(Thunk { context in context.send(.add(5)) }))
            return { input in
                if let action = input.action { seen.append("\(action)") }
                next(input)
            }
        })
        let store = Store(initialState: Count.State(), reducer: Count(), enhancer: .applyMiddleware(eager))
        #expect(store.state.count == 15)
        // They went through the chain, this middleware included.
        #expect(seen.all == ["add(10)", "add(5)"])
    }

    @Test("a reducer that dispatches stops with Redux's rule, not a lock's recursion trap")
    func reducerMayNotDispatch() async throws {
        let result = try await #require(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let box = StoreBox()
            let store = Store(initialState: 0, reducer: Reaching(box: box))
            box.store.withLock { $0 = store }
            store.dispatch(1)
        }
        let text = String(decoding: result.standardErrorContent, as: UTF8.self)
        #expect(text.contains("a reducer may not dispatch actions"), "\(text)")
    }

    @Test("a reducer that reads its store's state stops with a message too")
    func reducerMayNotRead() async throws {
        let result = try await #require(processExitsWith: .failure, observing: [\.standardErrorContent]) {
            let box = StoreBox()
            let store = Store(initialState: 0, reducer: Reaching(box: box, reads: true))
            box.store.withLock { $0 = store }
            store.dispatch(1)
        }
        let text = String(decoding: result.standardErrorContent, as: UTF8.self)
        #expect(text.contains("a reducer may not read its store's state"), "\(text)")
    }
}

/// Holds the store a misbehaving reducer reaches for.
final class StoreBox: Sendable {
    let store = Locked<Store<Reaching>?>(nil)
}

/// A reducer that breaks the rule: it dispatches to (or reads) its own store.
struct Reaching: Reducer {
    let box: StoreBox
    var reads = false
    func reduce(into state: inout Int, action: Int) {
        state += action
        guard let store = box.store.withLock({ $0 }) else { return }
        if reads { _ = store.state } else { store.dispatch(action) }
    }
}
