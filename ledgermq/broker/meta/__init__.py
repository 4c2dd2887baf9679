"""The broker's metadata: topics, subscription groups, consumers and their offsets."""
