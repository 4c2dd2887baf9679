"""The patent's consistent checkpoint and control node (S3) as pure state machines; the
master's checkpoint itself lives in `replication/ha` (HAMaster with checkpoint=True)."""
from .control import (
    BUGS, Cached, ControlConfig, GroupControl, GroupState, Promote, Resolution, SaveCache,
    SaveState, View,
)
from .replica import (
    AnswerPromotion, CheckpointReplica, Follow, Lead, Promotion, Replay, SaveRole, Stand,
    Truncate, lead_start,
)

__all__ = ["BUGS", "Cached", "ControlConfig", "GroupControl", "GroupState", "Promote",
           "Resolution", "SaveCache", "SaveState", "View", "AnswerPromotion",
           "CheckpointReplica", "Follow", "Lead", "Promotion", "Replay", "SaveRole", "Stand",
           "Truncate", "lead_start"]
