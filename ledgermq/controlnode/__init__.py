"""The control node of checkpoint mode (S3): `ledgermq controlnode`."""
from .server import ControlNode

__all__ = ["ControlNode"]
