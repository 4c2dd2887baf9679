"""Controller mode's replication (S1): epochs and the handshake truncation, pure."""
from .epochs import BUGS as _EPOCH_BUGS
from .epochs import epoch_ranges, truncate_point
from .sync_state import BUGS as _SET_BUGS

BUGS = {**_EPOCH_BUGS, **_SET_BUGS}

__all__ = ["BUGS", "epoch_ranges", "truncate_point"]
