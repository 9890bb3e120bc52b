// BEGIN docs/YOUR-APP.md tally hub example
import StoreSyncCommands
import TallyApp

HubCommand.main(app: Tally())        // every hubd flag, signal, log line and exit status
// END docs/YOUR-APP.md tally hub example
