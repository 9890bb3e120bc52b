import SyncProtocol

extension NATSMessage {
    /// This message read as the reply to a JetStream API call (or to a publish a stream
    /// acknowledges): its JSON, or why there is none.
    ///
    /// The one reading of a reply, whether it was waited for (``NATSConnection/jetStream(_:_:timeoutMilliseconds:)``)
    /// or matched later by the shared log's replicator.
    ///
    /// - Parameter what: What was asked (`STREAM.INFO.S`, a subject), for the messages.
    /// - Returns: The reply's JSON, or ``NATSError``: `noResponders` (status 503),
    ///   `protocolError` (not JSON), or `api(code:errCode:)` with the server's description, escaped.
    public func jetStreamAnswer(to what: String) -> Result<JSON, NATSError> {
        if headers?.status == 503 {
            return .failure(NATSError(.noResponders, "no NATS server answers on \(what) (is JetStream on, with a quorum?)"))
        }
        guard let json = try? JSON(parsing: payload) else {
            return .failure(NATSError(.protocolError, "JetStream answered \(what) with something that is not JSON"))
        }
        if let error = json["error"] {
            return .failure(NATSError(.api(code: error["code"]?.intValue ?? 0, errCode: error["err_code"]?.intValue ?? 0),
                                      "JetStream refused \(what): \(ControlCharacters.escaped(error["description"]?.stringValue ?? "no description"))"))
        }
        return .success(json)
    }
}
