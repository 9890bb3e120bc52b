import SyncCore

/// Sequenced actions in the file format Redux DevTools' Import reads: the *lifted state* of
/// `@redux-devtools/instrument` (`LiftedState` in its `instrument.ts`), which the extension's
/// `importState` takes as it is when the file has no `payload` member.
///
/// Action 0 is DevTools' own `@@INIT`, with the committed state (the state before the first
/// action) as its computed state; action *i* (1…n) is the *i*-th sequenced action, lifted as
/// DevTools lifts one (`{"type":"PERFORM_ACTION","action":…,"timestamp":…}`), and
/// `computedStates[i]` is the state after it. Nothing is skipped, and the selected state is
/// the newest. A StoreSync user then sees the hub's history in the tool they already know:
/// the action list, the state and diff at each action, and the slider.
enum DevToolsExport {
    /// The lifted state.
    ///
    /// - Parameters:
    ///   - committed: The state before the first action.
    ///   - actions: The actions, in seq order.
    ///   - states: The state after each action (as many as `actions`).
    /// - Returns: The JSON object to write to the file.
    static func liftedState(committed: JSON, actions: [SequencedAction], states: [JSON]) -> JSON {
        var actionsById: [JSONKey: JSON] = ["0": ["type": "PERFORM_ACTION", "action": ["type": "@@INIT"], "timestamp": 0]]
        var computedStates: [JSON] = [["state": committed]]
        for (index, action) in actions.enumerated() {
            // The time the hub sequenced it (milliseconds since 1970, as DevTools' Date.now()).
            let timestamp = action.stamp.time ?? 0
            actionsById[JSONKey(String(index + 1))] = ["type": "PERFORM_ACTION", "action": action.action, "timestamp": JSON(Int(truncatingIfNeeded: timestamp))]
            computedStates.append(["state": index < states.count ? states[index] : committed])
        }
        return [
            "actionsById": .object(actionsById),
            "computedStates": .array(computedStates),
            "committedState": committed,
            "currentStateIndex": JSON(actions.count),
            "isLocked": false,
            "isPaused": false,
            "monitorState": [:],
            "nextActionId": JSON(actions.count + 1),
            "skippedActionIds": [],
            "stagedActionIds": .array((0...actions.count).map { JSON($0) }),
        ]
    }
}
