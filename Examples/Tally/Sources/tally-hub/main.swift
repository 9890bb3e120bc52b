import StoreSyncCommands
import TallyApp

// The tally's daemon: every hubd flag, for this app.
HubCommand.main(app: Tally())
