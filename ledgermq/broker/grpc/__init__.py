"""RocketMQ 5's gRPC endpoint in the broker process (RocketMQ's proxy in local mode)."""
