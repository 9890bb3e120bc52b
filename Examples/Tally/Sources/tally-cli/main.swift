// BEGIN README tally cli example
import StoreSyncCommands
import TallyApp

await ReplicaCommand.main(app: Tally())   // attach, dispatch, state, watch, status, shorthand
// END README tally cli example
