import BuiltinApps
import StoreSyncCommands

// replica-cli: the library's ReplicaCommand over the built-in apps.
await ReplicaCommand.main(apps: BuiltinApps.all.compactMap { BuiltinApps.app(named: $0.name) })
