"""Replication designs as sans-IO state machines: raft/ (S0), and the others to come."""
