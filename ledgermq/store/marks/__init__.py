"""The small files the store keeps beside its log: the abort mark, the flushed mark, the
epoch file, the checkpoint."""
