"""Deterministic simulation of the replication protocols under faults."""
from .raft import PROFILES, RaftSim, SimResult
from .world import Violation, World

__all__ = ["PROFILES", "RaftSim", "SimResult", "Violation", "World"]
