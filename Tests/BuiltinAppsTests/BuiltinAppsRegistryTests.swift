import BuiltinApps
import SyncCore
import Testing

@Suite("BuiltinApps registry")
struct BuiltinAppsRegistryTests {
    /// FNV-1a 64, computed here by hand.
    static func fnv1a64(_ bytes: some Sequence<UInt8>) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        return hash
    }

    /// 16 lowercase hex digits, zero padded.
    static func hex16(_ value: UInt64) -> String {
        let digits = String(value, radix: 16, uppercase: false)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }

    static func isHexDigest(_ text: String) -> Bool {
        text.utf8.count == 16 && text.unicodeScalars.allSatisfy { ("0"..."9").contains($0) || ("a"..."f").contains($0) }
    }

    @Test("app(named:) finds counter, todos and json")
    func appNamed() throws {
        let counter = try #require(BuiltinApps.app(named: "counter"))
        #expect(counter is CounterApp)
        #expect(type(of: counter).fingerprint == "counter@1")
        let todos = try #require(BuiltinApps.app(named: "todos"))
        #expect(todos is TodosApp)
        #expect(type(of: todos).fingerprint == "todos@2")
        let json = try #require(BuiltinApps.app(named: "json"))
        #expect(json is JSONApp)
        #expect(type(of: json).fingerprint == "json@1")
    }

    @Test("app(named:) returns nil for any other name", arguments: [
        "", "Counter", "COUNTER", "counter ", " counter", "counter@1", "todo", "JSON", "jsonapp", "chat",
    ])
    func appNamedUnknown(_ name: String) {
        #expect(BuiltinApps.app(named: name) == nil)
    }

    @Test("all lists the apps in order")
    func all() {
        #expect(BuiltinApps.all.map { $0.name } == ["counter", "todos", "json"])
        #expect(BuiltinApps.all.map { $0.fingerprint } == ["counter@1", "todos@2", "json@1"])
        #expect(BuiltinApps.names == "counter, todos, json")
        for type in BuiltinApps.all {
            #expect(!type.summary.isEmpty)
            #expect(!type.commandHelp.isEmpty)
            #expect(BuiltinApps.app(named: type.name).map { Swift.type(of: $0).name } == type.name)
        }
    }

    func initialDigest<App: SyncApp>(_ app: App) -> (digest: String, expected: String, canonical: String) {
        let state = app.initialState
        return (app.digest(of: state), Digest.of(app.encodeState(state)), app.encodeState(state).canonicalString)
    }

    @Test("every app's initial digest is Digest.of its encoded state, 16 lowercase hex digits", arguments: ["counter", "todos", "json"])
    func initialDigests(_ name: String) throws {
        let app = try #require(BuiltinApps.app(named: name))
        let (digest, expected, canonical) = initialDigest(app)
        #expect(digest == expected)
        #expect(Self.isHexDigest(digest))
        #expect(digest == Self.hex16(Self.fnv1a64(canonical.utf8)))
    }

    @Test("the counter's initial digest is FNV-1a 64 of its exact canonical bytes")
    func counterDigestByHand() {
        let bytes = Array(#"{"count":0,"isIncrementing":true,"limitText":""}"#.utf8)
        let app = CounterApp()
        #expect(app.canonicalBytes(of: app.initialState) == bytes)
        let expected = Self.hex16(Self.fnv1a64(bytes))
        #expect(app.digest(of: app.initialState) == expected)
        #expect(Self.isHexDigest(expected))
    }

    @Test("the hand-written FNV-1a 64 agrees with the published test vectors")
    func fnvVectors() {
        #expect(Self.fnv1a64([UInt8]()) == 0xcbf2_9ce4_8422_2325)
        #expect(Self.fnv1a64(Array("a".utf8)) == 0xaf63_dc4c_8601_ec8c)
        #expect(Self.fnv1a64(Array("foobar".utf8)) == 0x8594_4171_f739_67e8)
        #expect(Self.hex16(0xff) == "00000000000000ff")
    }

    @Test("the todos and json initial digests match their exact canonical bytes")
    func otherDigestsByHand() {
        #expect(TodosApp().digest(of: TodosApp().initialState) == Self.hex16(Self.fnv1a64(Array(#"{"filter":"all","todos":[]}"#.utf8))))
        #expect(JSONApp().digest(of: JSONApp().initialState) == Self.hex16(Self.fnv1a64(Array("{}".utf8))))
    }

    @Test("equal states give equal digests, different states different ones")
    func digestsTrackState() {
        let app = CounterApp()
        var state = app.initialState
        let start = app.digest(of: state)
        app.reduce(into: &state, action: .increment)
        let one = app.digest(of: state)
        #expect(one != start)
        #expect(one == Self.hex16(Self.fnv1a64(Array(#"{"count":1,"isIncrementing":true,"limitText":""}"#.utf8))))
        app.reduce(into: &state, action: .decrement)
        #expect(app.digest(of: state) == start)
    }
}
