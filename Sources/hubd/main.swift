import BuiltinApps
import StoreHub
import StoreSyncCommands

// hubd: the library's HubCommand over the built-in apps (counter by default), each with the
// hub's per-action engine compiled for it here, where its type is written (HubSpecialization).
HubSpecialization.register(CounterApp.self)
HubSpecialization.register(TodosApp.self)
HubSpecialization.register(TodosV1App.self)
HubSpecialization.register(JSONApp.self)
HubCommand.main(apps: BuiltinApps.all.compactMap { BuiltinApps.app(named: $0.name) })
