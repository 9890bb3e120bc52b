import BuiltinApps
import StoreReplica
import StoreSyncCommands

// replica-cli: the library's ReplicaCommand over the built-in apps, each with the replica's
// per-action path compiled for it here, where its type is written (ReplicaSpecialization).
ReplicaSpecialization.register(CounterApp.self)
ReplicaSpecialization.register(TodosApp.self)
ReplicaSpecialization.register(TodosV1App.self)
ReplicaSpecialization.register(JSONApp.self)
await ReplicaCommand.main(apps: BuiltinApps.all.compactMap { BuiltinApps.app(named: $0.name) })
