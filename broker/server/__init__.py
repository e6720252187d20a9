"""The request path of a listener: accepting connections, reading frames, and turning each request
into its response through the handler registry.

    listener  the TCP listener and the per-connection loop (requests in order, responses gathered)
    dispatch  header parsing, authentication and authorization gates, handler lookup, the
              UNKNOWN_SERVER_ERROR answer when a handler fails

It sits above handlers/ and security/ (it calls them) and below quorum/ (the controller listener
is a listener too) and broker.py (which binds the client listeners)."""
