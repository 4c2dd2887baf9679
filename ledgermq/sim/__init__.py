"""Deterministic simulation of the replication protocols under faults."""
from .raft import RaftSim, SimResult
from .world import Violation, World

__all__ = ["RaftSim", "SimResult", "Violation", "World"]
