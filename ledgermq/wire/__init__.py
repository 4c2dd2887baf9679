"""The message formats every layer shares: RocketMQ's stored-message codec, batch encoding
and splitting, and walks over stored bytes. The client, the Spark source and the store
all import this package; it imports nothing of theirs."""
