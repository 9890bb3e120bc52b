import BuiltinApps
import StoreSyncCommands

// hubd: the library's HubCommand over the built-in apps (counter by default).
HubCommand.main(apps: BuiltinApps.all.compactMap { BuiltinApps.app(named: $0.name) })
