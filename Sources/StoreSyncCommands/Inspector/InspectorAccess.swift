/// Who may read the inspector, decided for each request from its head alone: a pure function,
/// tested with requests as values.
///
/// The model is Jupyter's: the server listens on loopback only, and each run has a random
/// token that the URL printed at start carries. A request must name the server as it listens
/// (`Host`), come from no other origin (`Origin`, when a browser sends one), and carry the
/// token (`?token=`). So another local user (who cannot read the URL), a page from another
/// site in the same browser (its `Origin` differs) and a DNS-rebinding page (its `Host` is its
/// own name) are all refused with 403, and only `GET` is answered (405 otherwise).
struct InspectorAccess: Sendable {
    /// The token every request must carry.
    let token: String
    /// The `Host` values that name this server: `127.0.0.1:PORT`, `localhost:PORT` or
    /// `[::1]:PORT`, as it listens; on port 80 (and 443, behind a forward that adds TLS) also
    /// without the port, as browsers and curl send them for a scheme's default port.
    let hosts: Set<String>
    /// The `Origin` values of the server's own page: `http://` and each host (`https://` and
    /// each host without its port, on 443).
    let origins: Set<String>

    /// The access rule for a server listening on a loopback address.
    ///
    /// - Parameters:
    ///   - token: The run's token.
    ///   - port: The port it listens on.
    init(token: String, port: Int) {
        self.token = token
        let names = ["127.0.0.1", "localhost", "[::1]"]
        var hosts = Set(names.map { "\($0):\(port)" })
        var origins = Set(hosts.map { "http://" + $0 })
        // A browser leaves a scheme's default port out of both Host and Origin.
        if port == 80 {
            hosts.formUnion(names)
            origins.formUnion(names.map { "http://" + $0 })
        } else if port == 443 {
            hosts.formUnion(names)
            origins.formUnion(names.map { "https://" + $0 })
        }
        self.hosts = hosts
        self.origins = origins
    }

    /// What to do with a request.
    enum Decision: Equatable {
        /// Serve it.
        case allow
        /// Refuse it with this status (403, 405) and the reason (said in the body, never the token).
        case refuse(status: Int, String)
    }

    /// Decides about one request.
    ///
    /// Checked in this order: the method (`GET` only: 405), the `Host` (403), the `Origin`
    /// when there is one (403), then the token (403).
    ///
    /// - Parameter request: The request's head.
    /// - Returns: The decision.
    func decide(_ request: HTTPRequest) -> Decision {
        guard request.method == "GET" else { return .refuse(status: 405, "only GET is answered") }
        guard let host = request.headers["host"]?.lowercased(), hosts.contains(host) else {
            return .refuse(status: 403, "the Host header does not name this server (open the URL the inspector printed)")
        }
        if let origin = request.headers["origin"], !origins.contains(origin.lowercased()) {
            return .refuse(status: 403, "a request from another origin")
        }
        guard let given = request.query["token"], Self.equalInConstantTime(given, token) else {
            return .refuse(status: 403, "a missing or wrong token (open the URL the inspector printed, with its ?token=)")
        }
        return .allow
    }

    /// Compares two strings without stopping at the first difference (the time taken does
    /// not tell how much of a guess was right).
    static func equalInConstantTime(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        var difference = UInt8(x.count == y.count ? 0 : 1)
        for index in 0..<max(x.count, y.count) {
            difference |= (index < x.count ? x[index] : 0) ^ (index < y.count ? y[index] : 0)
        }
        return difference == 0
    }
}
