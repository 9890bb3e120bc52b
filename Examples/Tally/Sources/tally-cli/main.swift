import StoreSyncCommands
import TallyApp

// The tally's CLI: attach, dispatch, state, watch, status, with the app's shorthand.
await ReplicaCommand.main(app: Tally())
