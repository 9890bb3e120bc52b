import SyncCore
import SyncPOSIX

/// One measured scenario, printed as a table row or as one JSON line.
struct Result {
    let scenario: String
    let params: [(String, JSON)]
    let metrics: [(String, Double)]

    /// `{"scenario":…,"params":{…},"metrics":{…}}`, members in that order.
    var jsonLine: String {
        let params = JSON.object(Dictionary(params.map { (JSONKey($0.0), $0.1) }, uniquingKeysWith: { $1 })).canonicalString
        let metrics = JSON.object(Dictionary(metrics.map { (JSONKey($0.0), JSON.number(($0.1 * 100).rounded() / 100)) },
                                             uniquingKeysWith: { $1 })).canonicalString
        return #"{"scenario":\#(JSON.string(scenario).canonicalString),"params":\#(params),"metrics":\#(metrics)}"#
    }

    var text: String {
        let p = params.map { "\($0.0)=\($0.1.canonicalString)" }.joined(separator: " ")
        let m = metrics.map { "\($0.0)=\(format($0.1))" }.joined(separator: "  ")
        return "\(pad(scenario, 22)) \(pad(p, 34)) \(m)"
    }
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
