// BEGIN docs/YOUR-APP.md tally cli example
import StoreSyncCommands
import TallyApp

await ReplicaCommand.main(app: Tally())   // attach, dispatch, state, watch, status, shorthand
// END docs/YOUR-APP.md tally cli example
