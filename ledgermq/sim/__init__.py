"""Deterministic simulation of the replication protocols under faults."""
from .ha import HASim
from .raft import PROFILES, RaftSim
from .world import SimResult, Violation, World

__all__ = ["PROFILES", "HASim", "RaftSim", "SimResult", "Violation", "World"]
