import Foundation
import Testing

/// docs/ARCHITECTURE.md's claims about modules, checked against the code: the module table's
/// "imports" column against Package.swift, and the executables' imports against their sources.
@Suite("ARCHITECTURE.md: the module table matches Package.swift")
struct ArchitectureDocTests {
    /// The repository's root (this file is `Tests/SyncTests/ArchitectureDocTests.swift`).
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func read(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    /// Every target of Package.swift (tests aside) and the targets it depends on.
    static func targets() throws -> [String: Set<String>] {
        let manifest = try read("Package.swift")
        var targets: [String: Set<String>] = [:]
        // `.target(name: "X"…)`, `.executableTarget(name: "X", dependencies: [...]…)`, up to the
        // next target: its dependencies are the quoted names in `dependencies: [...]`.
        let pieces = manifest.components(separatedBy: ".target(").dropFirst().map { ("target", $0) }
            + manifest.components(separatedBy: ".executableTarget(").dropFirst().map { ("executable", $0) }
        for (_, piece) in pieces {
            guard let name = Self.quoted(after: "name:", in: piece) else { continue }
            let body = piece.components(separatedBy: "),").first ?? piece
            var dependencies: Set<String> = []
            if let start = body.range(of: "dependencies: [")?.upperBound, let end = body[start...].firstIndex(of: "]") {
                for part in body[start..<end].split(separator: ",") {
                    let trimmed = part.trimmingCharacters(in: .whitespacesAndNewlines)
                    if trimmed.hasPrefix("\""), trimmed.hasSuffix("\""), trimmed.count > 2 {
                        dependencies.insert(String(trimmed.dropFirst().dropLast()))
                    }
                }
            }
            targets[name] = dependencies
        }
        return targets
    }

    static func quoted(after label: String, in text: String) -> String? {
        guard let start = text.range(of: label)?.upperBound, let open = text[start...].firstIndex(of: "\"") else { return nil }
        let rest = text[text.index(after: open)...]
        guard let close = rest.firstIndex(of: "\"") else { return nil }
        return String(rest[..<close])
    }

    /// The module table's rows: the module named in the first cell, and the names in the last.
    static func tableRows() throws -> [(module: String, imports: String)] {
        let doc = try read("docs/ARCHITECTURE.md")
        guard let start = doc.range(of: "| module | one job | imports |") else { return [] }
        var rows: [(String, String)] = []
        for line in doc[start.upperBound...].split(separator: "\n", omittingEmptySubsequences: false).dropFirst(2) {
            guard line.hasPrefix("|") else { break }
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count >= 4 else { continue }
            rows.append((cells[1], cells[cells.count - 2]))
        }
        return rows
    }

    @Test("every library target has a row, and its imports column names exactly its dependencies in Package.swift")
    func importTable() throws {
        let targets = try Self.targets()
        let ours = Set(targets.keys)
        let rows = try Self.tableRows()
        #expect(!rows.isEmpty, "no module table in docs/ARCHITECTURE.md")
        var described: Set<String> = []
        for row in rows {
            // A row of one module: `` `Name` ``.
            guard row.module.hasPrefix("`"), row.module.hasSuffix("`"), row.module.filter({ $0 == "`" }).count == 2 else { continue }
            let module = String(row.module.dropFirst().dropLast())
            guard let dependencies = targets[module] else {
                Issue.record("docs/ARCHITECTURE.md describes \(module), which Package.swift has no target for")
                continue
            }
            described.insert(module)
            let named = Set(row.imports.components(separatedBy: CharacterSet(charactersIn: " ,();`")).filter { ours.contains($0) })
            #expect(named == dependencies, "\(module): the table says it imports \(named.sorted()), Package.swift says \(dependencies.sorted())")
        }
        let executables: Set<String> = ["hubd", "replica-cli", "sync-bench"]
        let libraries = ours.subtracting(executables)
        #expect(described == libraries, "modules without a row of their own: \(libraries.subtracting(described).sorted())")
    }

    @Test("the executables import what the document says, and no more")
    func executables() throws {
        // Prose wraps: compare with every run of white space as one space.
        let doc = try Self.read("docs/ARCHITECTURE.md").split(whereSeparator: \.isWhitespace).joined(separator: " ")
        for (executable, imports) in [("hubd", ["BuiltinApps", "StoreHub", "StoreSyncCommands"]),
                                      ("replica-cli", ["BuiltinApps", "StoreReplica", "StoreSyncCommands"])] {
            let source = try Self.read("Sources/\(executable)/main.swift")
            let found = source.split(separator: "\n").filter { $0.hasPrefix("import ") }.map { String($0.dropFirst("import ".count)) }
            #expect(found.sorted() == imports, "\(executable) imports \(found)")
            let claim = "`\(executable)` imports " + imports.map { "`\($0)`" }.joined(separator: ", ")
            #expect(doc.contains(claim), "docs/ARCHITECTURE.md does not say \(claim)")
        }
    }
}
