import StoreHub
import SyncPOSIX
import SyncProtocol

/// A mistake on a command line, as a value: what to say. The command prints it after its
/// name and exits with status 2 (bad usage).
struct UsageError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What is wrong, and what to do.
    let message: String

    /// Creates the error.
    ///
    /// - Parameter message: What is wrong, and what to do.
    init(_ message: String) { self.message = message }

    var description: String { message }
}

/// One flag of a command: the names it goes by, whether it takes a value, its entries in the
/// help, and what it does to the options. A command's flags are one table of these: the
/// parser, the help's OPTIONS section and "did you mean" all read it, so no flag is written
/// twice.
struct Flag<Options> {
    /// The names it goes by (`["-h", "--help"]`).
    let names: [String]
    /// Whether a value follows it.
    let takesValue: Bool
    /// Whether parsing stops once it is read (`--help`, `--version`): what follows is not read.
    let ends: Bool
    /// Its entries in the help's OPTIONS section: the flag as shown, and its lines (empty:
    /// the flag is described elsewhere, e.g. under a command).
    let help: [(label: String, lines: [String])]
    /// Reads the flag (and its value, `""` for a switch) into the options.
    let apply: (inout Options, String) throws(UsageError) -> Void

    /// A flag followed by a value.
    ///
    /// - Parameters:
    ///   - name: Its name.
    ///   - label: The flag as the help shows it (default: the name).
    ///   - help: Its help lines.
    ///   - apply: Reads the value into the options.
    static func value(_ name: String, _ label: String? = nil, help: [String],
                      _ apply: @escaping (inout Options, String) throws(UsageError) -> Void) -> Flag {
        Flag(names: [name], takesValue: true, ends: false, help: help.isEmpty ? [] : [(label ?? name, help)], apply: apply)
    }

    /// A flag whose value is kept as it is, in one member of the options.
    ///
    /// - Parameters:
    ///   - name: Its name.
    ///   - label: The flag as the help shows it (default: the name).
    ///   - help: Its help lines.
    ///   - member: Where the value goes.
    static func value(_ name: String, _ label: String? = nil, help: [String], into member: WritableKeyPath<Options, String?>) -> Flag {
        .value(name, label, help: help) { options, text throws(UsageError) in options[keyPath: member] = text }
    }

    /// A flag with no value.
    ///
    /// - Parameters:
    ///   - names: Its names.
    ///   - label: The flag as the help shows it (default: its names, joined by ", ").
    ///   - ends: Whether parsing stops at it.
    ///   - help: Its help lines.
    ///   - apply: Records it in the options.
    static func `switch`(_ names: String..., label: String? = nil, ends: Bool = false, help: [String],
                         _ apply: @escaping (inout Options) -> Void) -> Flag {
        Flag(names: names, takesValue: false, ends: ends,
             help: help.isEmpty ? [] : [(label ?? names.joined(separator: ", "), help)]) { options, _ in apply(&options) }
    }
}

/// A command's flags, and what is made from them: parsing, the help's OPTIONS section, and
/// the closest flag to a mistyped one.
struct FlagTable<Options> {
    /// The flags, in the order the help lists them.
    let flags: [Flag<Options>]

    /// The column the help's descriptions start at.
    static var helpColumn: Int { 25 }

    /// The flag with this name.
    ///
    /// - Parameter name: A name, e.g. `--socket`.
    /// - Returns: The flag, or `nil`.
    func flag(named name: String) -> Flag<Options>? {
        flags.first { $0.names.contains(name) }
    }

    /// Every name of every flag.
    var names: [String] { flags.flatMap(\.names).filter { $0.hasPrefix("--") } }

    /// Reads one flag at the cursor (its value too), when the argument names one.
    ///
    /// - Parameters:
    ///   - argument: The argument just read.
    ///   - cursor: The rest of the command line.
    ///   - options: The options so far.
    ///   - program: The executable's name, for messages.
    /// - Returns: `nil` when the argument is no flag of the table; else whether parsing ends here.
    /// - Throws: ``UsageError`` for a missing or bad value.
    func read(_ argument: String, from cursor: inout ArgumentCursor, into options: inout Options,
              program: String) throws(UsageError) -> Bool? {
        guard let flag = flag(named: argument) else { return nil }
        var value = ""
        if flag.takesValue {
            guard let next = cursor.next() else { throw UsageError("\(shown(argument)) needs a value; see \(program) --help") }
            value = next
        }
        try flag.apply(&options, value)
        return flag.ends
    }

    /// Parses a whole command line of flags only.
    ///
    /// - Parameters:
    ///   - arguments: The arguments, the executable first.
    ///   - options: The options before any flag (the defaults).
    ///   - program: The executable's name, for messages.
    ///   - unknown: What to call an argument that is no flag ("argument", "option").
    /// - Returns: The options.
    /// - Throws: ``UsageError`` for an unknown flag (with the closest one), or a missing or bad value.
    func parse(_ arguments: [String], into options: Options, program: String, unknown: String = "argument") throws(UsageError) -> Options {
        var options = options
        var cursor = ArgumentCursor(arguments)
        while let argument = cursor.next() {
            guard let ends = try read(argument, from: &cursor, into: &options, program: program) else {
                throw unknownFlag(argument, program: program, word: unknown)
            }
            if ends { break }
        }
        return options
    }

    /// The error for an argument that is no flag, with the closest flag when one is near.
    ///
    /// - Parameters:
    ///   - argument: The argument.
    ///   - program: The executable's name.
    ///   - word: What to call it ("argument", "option").
    /// - Returns: The error.
    func unknownFlag(_ argument: String, program: String, word: String = "argument") -> UsageError {
        // `--flag=value` for a flag of the table: the value goes after a space.
        if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "="), let known = flag(named: String(argument[..<equals])),
           known.takesValue {
            return UsageError("unknown \(word) \"\(shown(argument))\": write \(argument[..<equals]) VALUE, with a space; see \(program) --help")
        }
        let hint = closestFlag(argument, among: names).map { " (did you mean \($0)?)" } ?? ""
        return UsageError("unknown \(word) \"\(shown(argument))\"\(hint); see \(program) --help")
    }

    /// The help's OPTIONS entries: each flag as shown, its description from the help column
    /// on (on the next line when the flag is too long to leave a space before it).
    var optionsHelp: String {
        var lines: [String] = []
        let indent = String(repeating: " ", count: Self.helpColumn)
        for flag in flags {
            for (label, text) in flag.help {
                let shown = "  " + label
                if shown.count < Self.helpColumn {
                    let padded = shown + String(repeating: " ", count: Self.helpColumn - shown.count)
                    lines.append(padded + (text.first ?? ""))
                    lines += text.dropFirst().map { indent + $0 }
                } else {
                    lines.append(shown)
                    lines += text.map { indent + $0 }
                }
            }
        }
        return lines.joined(separator: "\n")
    }
}

/// An argument as a message may quote it: never a secret, never a control character.
///
/// Whatever stands before an `@` in a URL (`nats://USER:PASS@…`, or `USER:PASS@HOST` without
/// a scheme) is shown as `***`, wherever the argument stands on the command line; the value
/// of `--flag=value` is not shown at all (`--flag=…`): it may be anything, a secret too.
/// Control characters are escaped.
///
/// - Parameter argument: An argument, or a flag's value, as given.
/// - Returns: The text to put in a message.
func shown(_ argument: String) -> String {
    if argument.hasPrefix("-"), let equals = argument.firstIndex(of: "=") {
        // `--flag=value`: the value of a flag may be anything, a secret too, and is not shown.
        return ControlCharacters.escaped(String(argument[..<equals])) + "=…"
    }
    return SharedLogConfiguration.redact(argument)
}

/// Reads a positive whole number.
///
/// - Parameters:
///   - text: The value.
///   - flag: The flag, for the message.
/// - Returns: The number.
/// - Throws: ``UsageError`` when it is not a positive whole number.
func positiveInteger(_ text: String, for flag: String) throws(UsageError) -> Int {
    guard let number = Int(text), number > 0 else { throw UsageError("\(flag) needs a positive integer, got \"\(shown(text))\"") }
    return number
}

/// Reads a number of seconds above 0 and at most a day, as a duration (whole milliseconds).
///
/// - Parameters:
///   - text: The value.
///   - flag: The flag, for the message.
/// - Returns: The duration.
/// - Throws: ``UsageError`` when it is out of range or not a number.
func secondsValue(_ text: String, for flag: String) throws(UsageError) -> Duration {
    guard let seconds = Double(text), seconds > 0, seconds <= 86_400 else {
        throw UsageError("\(flag) needs a number of seconds above 0 and at most 86400, got \"\(shown(text))\"")
    }
    return .milliseconds(max(1, Int(seconds * 1000)))
}
