// swift-tools-version:6.0
import PackageDescription

/// StoreSync: a strict Redux store, taken across process boundaries.
///
/// Module graph (imports run downward only):
///
///     hubd, replica-cli, sync-bench          (executables: parse flags, wire parts, print)
///        StoreSyncCommands, StoreSyncTesting (hubd and replica-cli generic over the app; TestStore)
///        StoreHub        StoreReplica        (the two ends; a replica never imports the hub)
///        NATSClient                          (the shared log's client: NATS and JetStream over TCP)
///              SyncPOSIX   BuiltinApps       (sockets/poll/signals and terminal-safe output, over
///                                             CSyncPOSIX's Linux shims; shared reducers)
///                    SyncCore                (SyncApp: a reducer plus its JSON codec)
///              StoreCore   SyncProtocol      (the store; the wire: JSON, frames, messages, digest,
///                                             SHA-256/HMAC, the one escaping helper)
///              SyncLocks                     (Locked: the one lock type, honest with ThreadSanitizer)
///              CSyncPOSIX  CSyncCRC  CSyncTSan (C shims: Linux calls Glibc hides; CRC-32C
///                                             instructions; TSan's lock annotations)
let package = Package(
    name: "StoreSync",
    // Synchronization's Mutex and Atomic need these; Linux has no minimum.
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "SyncLocks", targets: ["SyncLocks"]),
        .library(name: "StoreCore", targets: ["StoreCore"]),
        .library(name: "SyncProtocol", targets: ["SyncProtocol"]),
        .library(name: "SyncCore", targets: ["SyncCore"]),
        .library(name: "BuiltinApps", targets: ["BuiltinApps"]),
        .library(name: "NATSClient", targets: ["NATSClient"]),
        .library(name: "StoreHub", targets: ["StoreHub"]),
        .library(name: "StoreReplica", targets: ["StoreReplica"]),
        .library(name: "StoreSyncTesting", targets: ["StoreSyncTesting"]),
        .library(name: "StoreSyncCommands", targets: ["StoreSyncCommands"]),
        .executable(name: "hubd", targets: ["hubd"]),
        .executable(name: "replica-cli", targets: ["replica-cli"]),
        .executable(name: "sync-bench", targets: ["sync-bench"]),
    ],
    targets: [
        // The one lock type (Locked), over a C header of ThreadSanitizer annotations, and
        // TypeKeyed, values kept by type under it.
        .target(name: "CSyncTSan"),
        .target(name: "SyncLocks", dependencies: ["CSyncTSan"]),
        .target(name: "StoreCore", dependencies: ["SyncLocks"]),
        .target(name: "SyncProtocol"),
        .target(name: "CSyncPOSIX"),
        .target(name: "CSyncCRC"),
        .target(name: "SyncPOSIX", dependencies: ["CSyncPOSIX", "SyncProtocol", "SyncLocks"]),
        .target(name: "SyncCore", dependencies: ["StoreCore", "SyncProtocol"]),
        .target(name: "BuiltinApps", dependencies: ["SyncCore"]),
        // A NATS client of our own (TCP, the text protocol, JetStream's JSON API): the shared log.
        .target(name: "NATSClient", dependencies: ["SyncProtocol", "SyncPOSIX"]),
        .target(name: "StoreHub", dependencies: ["SyncCore", "SyncPOSIX", "NATSClient", "CSyncCRC", "SyncLocks"]),
        .target(name: "StoreReplica", dependencies: ["SyncCore", "SyncPOSIX", "SyncLocks"]),
        // For users' test targets: TestStore (exhaustive reducer tests), DeterminismCheck.
        .target(name: "StoreSyncTesting", dependencies: ["SyncCore", "StoreReplica", "SyncLocks"]),
        // hubd and replica-cli as library entry points generic over the app.
        // The inspector's page ships in the package and is compiled into the program (no file
        // to find at run time, nothing loaded from a network).
        .target(name: "StoreSyncCommands", dependencies: ["StoreHub", "StoreReplica", "SyncCore", "SyncPOSIX", "SyncLocks"],
                resources: [.embedInCode("Inspector/inspector.html")]),
        // Each executable declares every module it imports.
        .executableTarget(name: "hubd", dependencies: ["StoreSyncCommands", "StoreHub", "BuiltinApps"]),
        .executableTarget(name: "replica-cli", dependencies: ["StoreSyncCommands", "StoreReplica", "BuiltinApps"]),
        .executableTarget(
            name: "sync-bench",
            dependencies: ["StoreHub", "StoreReplica", "BuiltinApps", "SyncCore", "SyncPOSIX", "NATSClient", "SyncLocks",
                           "StoreSyncCommands"],
            path: "Benchmarks/sync-bench"
        ),
        .testTarget(name: "StoreCoreTests", dependencies: ["StoreCore", "SyncLocks"]),
        .testTarget(name: "SyncProtocolTests", dependencies: ["SyncProtocol"]),
        .testTarget(name: "NATSClientTests", dependencies: ["NATSClient", "SyncProtocol", "SyncLocks"]),
        .testTarget(name: "BuiltinAppsTests", dependencies: ["BuiltinApps", "SyncCore", "StoreSyncTesting", "SyncLocks"]),
        .testTarget(
            name: "SyncTests",
            dependencies: ["StoreHub", "StoreReplica", "BuiltinApps", "SyncPOSIX", "StoreSyncTesting", "SyncLocks", "StoreSyncCommands"],
            // The inspector's browser tests drive Chromium with this script (run, not compiled).
            exclude: ["Support/browse.py"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
