"""ledgermq: a RocketMQ-compatible message broker with a replicated commit log."""
__version__ = "0.1.0"
