"""Chaos testing on real processes: test hosts in network namespaces and the faults between
them (partitions, client cuts, slow and lossy links). Needs root and iproute2; see
`available()` and docs/testing.md. Imports no broker internals: what runs on a test host
is a process, started by command line.

What a run records and concludes needs neither root nor a network: `history` (the
workload's attempts, reads and fault windows as JSON lines), `checker` (the queue-model
check: lost, unexpected, duplicates, order, recovery times), `schedule` (the seeded fault
windows) and `timeline` (timeline.png; matplotlib, the `chaos` extra)."""
from .cleanup import sweep
from .iproute import NetError
from .netns import Host, TestNet, available
from .shaper import Shape

__all__ = ["Host", "NetError", "Shape", "TestNet", "available", "sweep"]
