import SyncCore
import Testing

/// An exhaustive reducer test, in the spirit of TCA's `TestStore`: send an action, say exactly
/// how the state changes, and the test fails on any change you did not assert, on a refusal
/// you did not expect, or on an expected refusal that did not happen.
///
/// ```swift
/// let store = TestStore(initialState: CounterApp().initialState, reducer: CounterApp())
/// store.send(.increment) { $0.count = 1 }
/// store.send(.setLimitText("5")) { $0.limitText = "5" }
/// ```
///
/// Failures are recorded with Swift Testing's `Issue.record` at the caller's source location.
/// The reducer runs directly (no middleware, no thunks): the test is about the pure reducer.
public final class TestStore<R: Reducer> where R.State: Equatable {
    /// The reducer under test.
    public let reducer: R
    /// The state after the last `send`.
    public private(set) var state: R.State

    /// Creates a test store.
    ///
    /// - Parameters:
    ///   - initialState: The state to start from.
    ///   - reducer: The reducer under test.
    public init(initialState: R.State, reducer: R) {
        self.state = initialState
        self.reducer = reducer
    }

    /// Sends an action that must be accepted, and asserts the exact change it makes.
    ///
    /// - Parameters:
    ///   - action: The action.
    ///   - update: Makes the expected change to a copy of the previous state; omit it when the
    ///     action must change nothing.
    ///   - sourceLocation: Where a failure is reported.
    public func send(_ action: R.Action, _ update: ((inout R.State) throws -> Void)? = nil,
                     sourceLocation: SourceLocation = #_sourceLocation) {
        var expected = state
        do {
            try update?(&expected)
        } catch {
            Issue.record("the expected-change closure threw: \(error)", sourceLocation: sourceLocation)
            return
        }
        var actual = state
        do throws(R.Failure) {
            try reducer.reduce(into: &actual, action: action)
        } catch {
            Issue.record("the reducer refused \(action): \(error); use sendRefused if that is expected",
                         sourceLocation: sourceLocation)
            return
        }
        if actual != expected {
            Issue.record("""
                the state after \(action) differs from the expected one
                  expected: \(expected)
                    actual: \(actual)
                """, sourceLocation: sourceLocation)
        }
        state = actual
    }

    /// Sends an action the reducer must refuse, and asserts that the state did not change.
    ///
    /// - Parameters:
    ///   - action: The action.
    ///   - check: Inspects the refusal (optional).
    ///   - sourceLocation: Where a failure is reported.
    public func sendRefused(_ action: R.Action, _ check: ((R.Failure) -> Void)? = nil,
                            sourceLocation: SourceLocation = #_sourceLocation) {
        var actual = state
        do throws(R.Failure) {
            try reducer.reduce(into: &actual, action: action)
        } catch {
            check?(error)
            if actual != state {
                Issue.record("the reducer refused \(action) but changed the state first: a reducer must validate before writing",
                             sourceLocation: sourceLocation)
            }
            return
        }
        Issue.record("the reducer accepted \(action), which was expected to be refused", sourceLocation: sourceLocation)
        state = actual
    }
}
