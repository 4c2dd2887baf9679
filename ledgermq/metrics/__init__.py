"""Prometheus serving and the latency histogram the servers record into."""
