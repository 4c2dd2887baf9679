"""`ledgermq cluster`: local layouts of real processes, with their ACL, TLS, configs and
certificates."""
