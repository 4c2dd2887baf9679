"""asyncio shells around the sans-IO replication cores: they own the sockets, files and
timers and feed the cores' inputs, carrying out the actions the cores return. Drivers
never import broker/: a broker's replication mode wires them."""
