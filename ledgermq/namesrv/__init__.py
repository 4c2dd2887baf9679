"""The name server: broker registry and topic routes."""
from .routes import BrokerData, QueueData, RouteTable
from .server import NamesrvConfig, NameServer

__all__ = ["BrokerData", "QueueData", "RouteTable", "NamesrvConfig", "NameServer"]
