"""The request path: the one request function, its HTTP transport, server-sent events."""
