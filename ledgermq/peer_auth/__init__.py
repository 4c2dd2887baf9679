"""The cluster-secret handshake between servers: the core, and its remoting and stream
forms."""
