"""RocketMQ 5's gRPC API (apache.rocketmq.v2): our .proto files and the Python modules
`make proto` generates from them (committed, so `pip install` needs no code generator)."""
