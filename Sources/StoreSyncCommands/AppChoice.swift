import SyncCore

/// Which app, and which of its versions, `--app` names: `NAME` (the newest version this
/// executable carries) or `NAME@VERSION` (exactly that version, which must be in the app's
/// chain, ``SyncApp/versions``).
enum AppChoice {
    /// The app `text` names among `apps`.
    ///
    /// - Parameters:
    ///   - text: `NAME` or `NAME@VERSION`, as given.
    ///   - apps: The apps of the executable, each its newest version.
    /// - Returns: The app, or what is wrong (no such app, or no such version of it), quoting
    ///   what was given safely.
    static func find(_ text: String, among apps: [any SyncApp]) -> Result<any SyncApp, UsageError> {
        let name: Substring, version: Substring?
        if let at = text.firstIndex(of: "@") {
            name = text[..<at]
            version = text[text.index(after: at)...]
        } else {
            name = text[...]
            version = nil
        }
        let names = apps.map { type(of: $0).name }.joined(separator: ", ")
        guard let newest = apps.first(where: { JSONKey(type(of: $0).name) == JSONKey(String(name)) }) else {
            // An app's name and version are plain words: anything else is quoted as an argument
            // (a URL given here by mistake is shown without its credentials).
            let plain = text.unicodeScalars.allSatisfy { $0.properties.isAlphabetic || $0.properties.numericType != nil || "-_.@".unicodeScalars.contains($0) }
            return .failure(UsageError("unknown app \"\(plain ? ControlCharacters.escaped(text) : shown(text))\"; the apps are \(names)"))
        }
        guard let version else { return .success(newest) }
        let fingerprint = "\(type(of: newest).name)@\(version)"
        guard let app = newest.versions.app(fingerprint) else {
            let carried = newest.versions.fingerprints.joined(separator: ", ")
            return .failure(UsageError("\(type(of: newest).name) has no version \"\(shown(String(version)))\" here: this executable carries \(carried)"))
        }
        return .success(app)
    }

    /// The app's name alone, from `NAME` or `NAME@VERSION` (what a default socket path is named after).
    ///
    /// - Parameter text: What `--app` was given.
    /// - Returns: The name.
    static func name(_ text: String) -> String {
        text.firstIndex(of: "@").map { String(text[..<$0]) } ?? text
    }
}
