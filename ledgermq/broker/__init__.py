"""The broker: request processors wiring the store, the network and the name server."""
from .broker import Broker
from .config import BrokerConfig, BrokerRole, load_broker_config

__all__ = ["Broker", "BrokerConfig", "BrokerRole", "load_broker_config"]
