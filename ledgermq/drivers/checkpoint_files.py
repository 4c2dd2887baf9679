"""Checkpoint mode's (S3) files on a broker: its role (epoch and an unfinished
promotion) and, on a master, the consistent checkpoint with its member slaves."""
from __future__ import annotations

import json
from pathlib import Path

from ..files import replace_file
from ..replication.checkpoint import Promotion


def load_role(path: Path) -> tuple[int, Promotion | None]:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return 0, None
    p = d.get("promotion")
    if p is not None:
        p = Promotion(p["epoch"], p["takeover"],
                      tuple(tuple(x) for x in p["replayed"]) if p["replayed"] is not None
                      else None, p["logEnd"])
    return d["epoch"], p


def save_role(path: Path, epoch: int, p: Promotion | None) -> None:
    d = {"epoch": epoch, "promotion": None if p is None else {
        "epoch": p.epoch, "takeover": p.takeover, "logEnd": p.log_end,
        "replayed": None if p.replayed is None else [list(x) for x in p.replayed]}}
    replace_file(path, json.dumps(d).encode())


class CheckpointFile:
    """The consistent checkpoint and its member slaves (S3), as the master last saved it."""

    def __init__(self, path: Path):
        self.path = path

    def load(self) -> tuple[int, int, dict[int, int]]:
        """(epoch, checkpoint, members)"""
        try:
            d = json.loads(self.path.read_text())
            return d["epoch"], d["checkpoint"], {int(k): v for k, v in d["members"].items()}
        except (OSError, ValueError, KeyError):
            return -1, 0, {}

    def save(self, epoch: int, checkpoint: int, members) -> None:
        """Durably (file and directory fsynced): the master publishes a checkpoint only
        once this returned (see HAMasterDriver)."""
        replace_file(self.path, json.dumps({"epoch": epoch, "checkpoint": checkpoint,
                                            "members": dict(members)}).encode())
