// swift-tools-version:6.0
import PackageDescription

/// An app of its own on StoreSync: a shared tally with its own daemon (`tally-hub`), its own
/// CLI (`tally-cli`) and a multi-process test. It depends on StoreSync by path (this
/// repository), as a user's package would depend on it by URL.
let package = Package(
    name: "Tally",
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    dependencies: [.package(name: "StoreSync", path: "../..")],
    targets: [
        .target(name: "TallyApp", dependencies: [.product(name: "SyncCore", package: "StoreSync")]),
        .executableTarget(name: "tally-hub", dependencies: [
            "TallyApp", .product(name: "StoreSyncCommands", package: "StoreSync"),
        ]),
        .executableTarget(name: "tally-cli", dependencies: [
            "TallyApp", .product(name: "StoreSyncCommands", package: "StoreSync"),
        ]),
        .testTarget(name: "TallyTests", dependencies: [
            "TallyApp",
            .product(name: "StoreSyncTesting", package: "StoreSync"),
            .product(name: "StoreReplica", package: "StoreSync"),
            .product(name: "SyncCore", package: "StoreSync"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
