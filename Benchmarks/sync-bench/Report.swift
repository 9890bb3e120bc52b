import Foundation
import SyncCore
import SyncPOSIX

/// One measured scenario, printed as a table row or as one JSON line.
struct Result {
    let scenario: String
    let params: [(String, JSON)]
    let metrics: [(String, Double)]
    /// The main metric divided by the same metric of in-run baselines, by baseline name.
    var ratios: [(String, Double)] = []

    init(scenario: String, params: [(String, JSON)], metrics: [(String, Double)]) {
        self.scenario = scenario
        self.params = params
        self.metrics = metrics
    }

    /// The first metric (the one ratios are taken of).
    var value: Double { metrics.first?.1 ?? .nan }

    /// `{"scenario":…,"params":{…},"metrics":{…},"ratios":{…},"machine":{…}}`, members in that order.
    var jsonLine: String {
        func object(_ members: [(String, JSON)]) -> String {
            JSON.object(Dictionary(members.map { (JSONKey($0.0), $0.1) }, uniquingKeysWith: { $1 })).canonicalString
        }
        func numbers(_ members: [(String, Double)]) -> String {
            object(members.map { ($0.0, JSON.number(($0.1 * 1000).rounded() / 1000)) })
        }
        return #"{"scenario":\#(JSON.string(scenario).canonicalString),"params":\#(object(params)),"metrics":\#(numbers(metrics)),"ratios":\#(numbers(ratios)),"machine":\#(Machine.current.json.canonicalString)}"#
    }

    var text: String {
        let p = params.map { "\($0.0)=\($0.1.canonicalString)" }.joined(separator: " ")
        let m = metrics.map { "\($0.0)=\(format($0.1))" }.joined(separator: "  ")
        let r = ratios.isEmpty ? "" : "  [" + ratios.map { "\(String(format: "%.3g", $0.1))× \($0.0)" }.joined(separator: ", ") + "]"
        return "\(pad(scenario, 18)) \(pad(p, 44)) \(m)\(r)"
    }
}

/// The machine a run measured: cores, operating system, Swift version.
struct Machine {
    let cores: Int
    let os: String
    let swift: String

    static let current = Machine()

    init() {
        cores = Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
        var names = utsname()
        uname(&names)
        func text<T>(_ field: T) -> String {
            withUnsafeBytes(of: field) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        }
        os = "\(text(names.sysname)) \(text(names.release)) \(text(names.machine))"
        #if compiler(>=6.4)
        swift = "6.4 or later"
        #elseif compiler(>=6.3)
        swift = "6.3"
        #elseif compiler(>=6.2)
        swift = "6.2"
        #else
        swift = "6.1 or earlier"
        #endif
    }

    var json: JSON { ["cores": JSON(cores), "os": .string(os), "swift": .string(swift)] }

    var text: String { "machine: \(cores) cores, \(os), Swift \(swift)" }
}

func pad(_ text: String, _ width: Int) -> String {
    text + String(repeating: " ", count: max(0, width - text.count))
}

func format(_ value: Double) -> String {
    if value >= 100 { return String(Int(value.rounded())) }
    return String((value * 100).rounded() / 100)
}

/// The median of some samples.
func median(_ samples: [Double]) -> Double {
    let sorted = samples.sorted()
    guard !sorted.isEmpty else { return .nan }
    return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

/// The value below which `fraction` of the samples fall (nearest rank).
func percentile(_ samples: [Double], _ fraction: Double) -> Double {
    let sorted = samples.sorted()
    guard !sorted.isEmpty else { return .nan }
    let rank = min(sorted.count - 1, max(0, Int((fraction * Double(sorted.count)).rounded(.up)) - 1))
    return sorted[rank]
}

/// Nanoseconds from a duration.
func nanoseconds(_ duration: Duration) -> Double {
    let (seconds, attoseconds) = duration.components
    return Double(seconds) * 1e9 + Double(attoseconds) / 1e9
}
