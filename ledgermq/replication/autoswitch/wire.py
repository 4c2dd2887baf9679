"""The HA port's wire in controller mode (ledgermq's own; RocketMQ's auto-switch HA
carries the same facts).

slave -> master, 17 bytes: kind (1), a (8), b (8)
- HANDSHAKE: a = slave broker id, b = flags (1: asynchronous learner, 2: an empty log
  starts at the master's last segment)
- REPORT: a = the slave's max offset (heartbeat and ack)

master -> slave, a 37-byte header: kind (1), offset (8), size (4), epoch (8),
epoch start (8), confirm offset (8)
- EPOCHS: offset = the master's log end, size = number of (epoch, start) pairs that follow
  (16 bytes each)
- TRANSFER: `size` commit-log bytes at `offset`, all of epoch `epoch` (size 0: heartbeat)
"""
from __future__ import annotations

import struct

SLAVE_MSG = struct.Struct(">bqq")
HANDSHAKE, REPORT = 1, 2
FLAG_LEARNER, FLAG_FROM_LAST_FILE = 1, 2

MASTER_HEADER = struct.Struct(">bqiqqq")
EPOCHS, TRANSFER = 1, 2
EPOCH_PAIR = struct.Struct(">qq")
MAX_EPOCHS = 1 << 20
