"""Deterministic simulation of the replication protocols under faults: one simulator per
design over a shared world (`world`, `events`, `links`), fake disks (`disk`) and one
run / settle / report harness (`harness`)."""
from .checkpoint import CheckpointSim
from .classic_ha import ClassicHASim
from .harness import Simulation
from .raft import PROFILES, RaftSim
from .result import SimResult, Violation
from .world import World

HA_MODES = ("sync", "async", "checkpoint")


def HASim(seed: int, *, mode: str = "sync", **kwargs) -> ClassicHASim | CheckpointSim:
    """The S2 (mode "sync" / "async") or S3 (mode "checkpoint") simulator, by mode."""
    if mode == "checkpoint":
        return CheckpointSim(seed, **kwargs)
    return ClassicHASim(seed, mode=mode, **kwargs)


__all__ = ["HA_MODES", "PROFILES", "CheckpointSim", "ClassicHASim", "HASim", "RaftSim",
           "SimResult", "Simulation", "Violation", "World"]
