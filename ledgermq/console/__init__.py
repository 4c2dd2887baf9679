"""The web console: the pages an operator opens daily (cluster, topics, consumer groups,
message search) and a live replica-group page, served by `ledgermq console`. It reads and
changes the cluster only through client.admin.Admin, the API the CLI uses."""
from .server import Console

__all__ = ["Console"]
