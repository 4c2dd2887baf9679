"""RocketMQ 5's gRPC API (apache.rocketmq.v2): our .proto files, the message modules
`make proto` generates from them (committed, so `pip install` needs no code generator), and
rpc.py, which serves and calls the MessagingService from its descriptor."""
