import SyncCore
import SyncLocks
import Synchronization

extension Replica {
    /// What one read's frames leave to do once the store's lock is released: continuations to
    /// resume and events to hand to observers, in the order the frames came.
    @usableFromInline
    struct Deliveries {
        @usableFromInline
        enum Step {
            case acknowledged(ReplyWaiter<UInt64>, UInt64)
            case refused(ReplyWaiter<UInt64>, ReplicaError)
            case status(ReplyWaiter<HubStatus>, HubStatus)
            case synced(ReplyWaiter<UInt64>, UInt64)
            case event([Observer], ReplicaEvent<App.Action>)
            /// An applied action for ``actionObservers``.
            case applied(AppliedAction<App.Action>)
        }

        @usableFromInline var steps: [Step] = []
        /// Whether the next three were read: what the actions of one read are checked
        /// against, read under one lock at the read's first action (not once per action).
        /// Neither can change in a way a read must see: the ids change only when this thread
        /// reconnects, and an observer added meanwhile hears from the next read on. Fields,
        /// not a struct: each action borrows them in place (a struct was copied per action).
        @usableFromInline var viewRead = false
        @usableFromInline var observers: [Observer] = []
        /// The ``observeActions(_:)`` observers, not copied into every step.
        @usableFromInline var actionObservers: [ActionObserver] = []
        /// This replica's ids in this history: only an action from one of them can answer a
        /// dispatch of this replica (the shared lock is taken for those only).
        @usableFromInline var ownReplicas: Set<Int> = []

        /// Reads the observers and this replica's ids, once per read.
        @inlinable
        mutating func readView(_ shared: borrowing Locked<Shared>) {
            guard !viewRead else { return }
            viewRead = true
            shared.withLock { shared in
                observers = shared.observers
                actionObservers = shared.actionObservers
                ownReplicas = shared.ledger.ownReplicas
            }
        }

        @inlinable init() {}

        /// Carries them out, with no lock held.
        @inlinable
        func run() {
            // By index: `for step in steps` copied each step out whole first.
            for index in steps.indices {
                switch steps[index] {
                case .acknowledged(let continuation, let seq): continuation.resume(returning: seq)
                case .refused(let continuation, let error): continuation.resume(throwing: error)
                case .status(let continuation, let status): continuation.resume(returning: status)
                case .synced(let continuation, let seq): continuation.resume(returning: seq)
                case .event(let observers, let event): for observer in observers { observer.callback(event) }
                case .applied(let action): for observer in actionObservers { observer.callback(action) }
                }
            }
        }
    }

    /// Handles every complete frame buffered in `decoder`, applying actions in one hold of
    /// the store's dispatch lock, then (with no lock held) resuming awaiting callers and
    /// calling observers; returns a reason to stop, or `nil` to read more.
    ///
    /// - Parameters:
    ///   - decoder: The connection's frames.
    ///   - resumeSynced: Set when the `sync` that ends a resume's replay came back.
    @inlinable
    func handleFrames(_ decoder: inout FrameDecoder, resumeSynced: inout Bool) -> ReplicaError? {
        var failure: ReplicaError?
        var deliveries = Deliveries()
        // About one step per frame of this read (an action frame is ~100 bytes): one
        // allocation, not a copy each time the array grows.
        deliveries.steps.reserveCapacity(min(4_096, decoder.bufferedByteCount / 96 + 1))
        store.receiveBatch { apply in
            while failure == nil {
                do throws(FrameError) {
                    guard let outcome = try decoder.decodeNext({ payload in
                        handle(payload, apply: apply, resumeSynced: &resumeSynced, deliveries: &deliveries)
                    }) else { return }
                    failure = outcome
                } catch {
                    failure = .protocolViolation(error.description)
                }
            }
        }
        deliveries.run()
        return failure
    }

    /// Handles one frame from the hub (under the store's dispatch lock); returns a reason to
    /// stop, or `nil` to go on. What must run without the lock goes into `deliveries`.
    @inlinable
    func handle(_ frame: UnsafeRawBufferPointer, apply: (App.Action) throws(App.Failure) -> Void,
                resumeSynced: inout Bool, deliveries: inout Deliveries) -> ReplicaError? {
        // The hub's own action envelopes: no JSON object for the envelope, and none for the
        // action either when the app reads it from its canonical bytes and no event observer
        // wants its JSON; other apps get only the action's value parsed. An envelope whose
        // action slice is not one value (an extra member) takes the general path.
        if let envelope = HubMessage.actionEnvelope(frame) {
            let bytes = UnsafeRawBufferPointer(rebasing: frame[envelope.action])
            if let action = app.decodeAction(canonical: bytes, maxDepth: 511) {
                return applied(seq: envelope.seq, origin: envelope.origin, id: .number(envelope.id), stamp: { envelope.stamp(in: frame) }, action: action,
                               json: { (try? JSON(parsing: bytes, maxDepth: 511)) ?? app.encodeAction(action) },
                               apply: apply, deliveries: &deliveries)
            }
            if let json = try? JSON(parsing: bytes, maxDepth: 511) {
                return applied(seq: envelope.seq, origin: envelope.origin, id: .number(envelope.id), stamp: envelope.stamp(in: frame), json: json,
                               apply: apply, deliveries: &deliveries)
            }
        }
        let message: HubMessage
        do {
            message = try HubMessage(json: JSON(parsing: frame))
        } catch let error as WireError {
            return .protocolViolation(error.message)
        } catch {
            return .protocolViolation(String(describing: error))
        }
        switch message {
        case .action(let seq, let origin, let id, let json, let stamp):
            return applied(seq: seq, origin: origin, id: id, stamp: stamp, json: json, apply: apply, deliveries: &deliveries)
        case .reject(let id, let error):
            var ack: ReplyWaiter<UInt64>?
            let observers = shared.withLock { shared -> [Observer] in
                shared.ledger.rejected(id)
                ack = shared.acks.removeValue(forKey: id)
                return shared.observers
            }
            if let ack { deliveries.steps.append(.refused(ack, Self.refusal(error))) }
            if !observers.isEmpty { deliveries.steps.append(.event(observers, .rejected(id: id, error: error))) }
        case .status(let status):
            // `.some(nil)`: the reader's own digest check; `nil`: nobody asked.
            let waiter: ReplyWaiter<HubStatus>?? = shared.withLock { shared in
                shared.statusWaiters.isEmpty ? .none : .some(shared.statusWaiters.removeFirst())
            }
            if case .some(.some(let caller)) = waiter { deliveries.steps.append(.status(caller, status)) }
            // Answered in order: every action up to `status.seq` was applied here just before.
            if case .some(.none) = waiter, status.seq == lastSeq.load(ordering: .relaxed) {
                let started = ContinuousClock.now
                let local = app.digest(of: store.unobservedState)
                let cost = ContinuousClock.now - started
                digestCheckCost.store(Int(cost.components.seconds) * 1_000_000_000 + Int(cost.components.attoseconds / 1_000_000_000),
                                      ordering: .relaxed)
                if local != status.digest {
                    return .diverged("at seq \(status.seq) this replica's state digest is \(local), the hub's is \(status.digest): a reducer is not deterministic (a clock, a random value or a global read inside it), or the two sides run different code (a changed reducer needs a new app version)")
                }
                agreedAfter.store(status.seq &+ 1, ordering: .relaxed)
            }
        case .synced(_, let id?) where id == Self.resumeSyncID:
            resumeSynced = true
        case .synced:
            if let waiter = shared.withLock({ $0.syncWaiters.isEmpty ? nil : $0.syncWaiters.removeFirst() }) {
                deliveries.steps.append(.synced(waiter, lastSeq.load(ordering: .relaxed)))
            }
        case .duplicate(let id, let seq):
            // A re-sent dispatch the hub had already sequenced (its action was applied here
            // before the link dropped, or is part of the state a full welcome brought).
            let ack = shared.withLock { shared -> ReplyWaiter<UInt64>? in
                shared.ledger.duplicate(id) != nil ? shared.acks.removeValue(forKey: id) : nil
            }
            if let ack { deliveries.steps.append(.acknowledged(ack, seq)) }
        case .checkpoint(let seq, let digest):
            // It follows action `seq`; one for any other point (there is none) is ignored.
            guard seq == lastSeq.load(ordering: .relaxed) else { break }
            let local = app.digest(of: store.unobservedState)
            if local != digest {
                return .diverged("at checkpoint seq \(seq) this replica's state digest is \(local), the hub's is \(digest): a reducer is not deterministic (a clock, a random value or a global read inside it), or the two sides run different code")
            }
            agreedAfter.store(seq &+ 1, ordering: .relaxed)
        case .log(let available, let reason, _):
            let observers = shared.withLock { $0.observers }
            if !observers.isEmpty { deliveries.steps.append(.event(observers, .hubLog(available: available, reason: reason))) }
        case .error(let error):
            return .hub(error)
        case .welcome:
            return .protocolViolation("a second welcome")
        case .history:
            // An answer to a `history` request this stream never sends (HubConnection.history
            // reads its own): nothing to apply.
            break
        case .upgraded(let notice):
            // In order: every action before the upgrade was applied above. The hub detaches
            // this connection next; what this replica dispatched and was not sequenced before
            // the upgrade is never applied.
            return upgraded(notice)
        case .waiting, .upgrade:
            // Answers to a `hello` held before its welcome, and to an `upgrade` request this
            // stream never sends: nothing to apply.
            break
        case .unknown:
            // The extension rule: a newer hub may send message types this library does not know.
            break
        }
        return nil
    }

    /// Decodes one sequenced action from its JSON, then ``applied(seq:origin:id:stamp:action:json:apply:deliveries:)``.
    @inlinable
    func applied(seq: UInt64, origin: Int, id: DispatchID, stamp: ActionStamp, json: JSON,
                 apply: (App.Action) throws(App.Failure) -> Void, deliveries: inout Deliveries) -> ReplicaError? {
        let action: App.Action
        do {
            action = try app.decodeAction(json)
        } catch {
            let expected = lastSeq.load(ordering: .relaxed) + 1
            guard seq == expected else { return .protocolViolation("expected seq \(expected), got \(seq)") }
            return .diverged("sequenced action \(seq) does not decode here: \(error.message)")
        }
        return applied(seq: seq, origin: origin, id: id, stamp: { stamp }, action: action, json: { json }, apply: apply, deliveries: &deliveries)
    }

    /// Applies one sequenced action and queues what follows it (the dispatcher's answer, the
    /// observers' reports); returns a reason to stop, or `nil`.
    ///
    /// - Parameters:
    ///   - stamp: When the hub sequenced it and its origin's name, asked for only when an
    ///     observer wants it.
    ///   - json: The action's JSON, asked for only when an event observer wants it.
    @inlinable
    func applied(seq: UInt64, origin: Int, id: DispatchID, stamp: () -> ActionStamp, action: App.Action, json: () -> JSON,
                 apply: (App.Action) throws(App.Failure) -> Void, deliveries: inout Deliveries) -> ReplicaError? {
        let expected = lastSeq.load(ordering: .relaxed) + 1
        guard seq == expected else {
            return .protocolViolation("expected seq \(expected), got \(seq)")
        }
        do throws(App.Failure) {
            try apply(action)
        } catch {
            return .diverged("this replica's reducer refused sequenced action \(seq): \(app.describe(error))")
        }
        lastSeq.store(seq, ordering: .releasing)
        // No tuple crosses a lock: where this runs unspecialised (a replica attached from
        // generic code), a tuple of generic types costs a locked metadata look-up each time.
        deliveries.readView(shared)
        // Ours if this replica held that id in this history (a resume replays actions
        // dispatched over an earlier connection, under its earlier replica id).
        if deliveries.ownReplicas.contains(origin), let ack = shared.withLock({ shared -> ReplyWaiter<UInt64>? in
            shared.ledger.sequenced(origin: origin, id: id) != nil ? shared.acks.removeValue(forKey: id) : nil
        }) {
            deliveries.steps.append(.acknowledged(ack, seq))
        }
        // Decoded once, and only when someone observes.
        let observed = deliveries.observers.isEmpty && deliveries.actionObservers.isEmpty ? nil : stamp()
        if let observed, !deliveries.observers.isEmpty {
            deliveries.steps.append(.event(deliveries.observers, .action(seq: seq, origin: origin, id: id, action: action, json: json(), stamp: observed)))
        }
        if let observed, !deliveries.actionObservers.isEmpty {
            deliveries.steps.append(.applied(AppliedAction(seq: seq, origin: origin, id: id, action: action, stamp: observed)))
        }
        return nil
    }
}
