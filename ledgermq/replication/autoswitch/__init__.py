"""Controller mode's replication (S1): epochs and the handshake truncation, pure."""
from .epochs import BUGS, epoch_ranges, truncate_point

__all__ = ["BUGS", "epoch_ranges", "truncate_point"]
