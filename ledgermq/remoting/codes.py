"""RocketMQ's remoting request and response code numbers, and header enums."""
from __future__ import annotations

import enum


class RequestCode(enum.IntEnum):
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_TOPIC_CONFIG_LIST = 22
    GET_TOPIC_CONFIG = 351  # RocketMQ 5: one topic's config (mqadmin topicStatus asks it)
    LITE_PULL_MESSAGE = 361  # RocketMQ 5's DefaultLitePullConsumer: a pull, served as one
    GET_TOPIC_NAME_LIST = 23
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    RESET_CONSUMER_CLIENT_OFFSET = 220  # broker -> client
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    GET_CONSUMER_RUNNING_INFO = 307
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    QUERY_CONSUME_QUEUE = 321
    QUERY_DATA_VERSION = 322
    GET_SUBSCRIPTIONGROUP_CONFIG = 352  # RocketMQ 5: one group's config (its proxy asks)
    # RocketMQ 5's POP over remoting: what its proxy in cluster mode sends a broker
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    BATCH_ACK_MESSAGE = 200151
    # ledgermq's own: the control node of checkpoint mode (S3)
    CONTROL_HEARTBEAT = 9910
    CONTROL_CACHE = 9911
    CONTROL_RESOLVE = 9912
    CONTROL_STATUS = 9913
    CONTROL_PROMOTE = 9914
    CONTROL_HAND_OVER = 9918  # a master no client reaches gives its group up
    # ledgermq's own: an operator lets a restarted SYNC_MASTER take writes without the
    # refill from its slaves, accepting the loss of what only they hold (cluster secret)
    END_HA_RECOVERY = 9915
    # ledgermq's own (DLedger, controller and checkpoint mode): a client tells a follower it
    # cannot reach the group's leader; a follower passes that on to its leader, which hands
    # over if no client reaches it (modes/client_handover.py)
    REPORT_MASTER_UNREACHABLE = 9916
    CLIENTS_CANNOT_REACH_LEADER = 9917
    # ledgermq's own: servers of one cluster prove they know its secret (peer_auth.py)
    PEER_AUTH = 9920
    # controller mode (S1): RocketMQ 5's codes; the bodies are ledgermq's JSON
    BROKER_HEARTBEAT = 904
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_REPLICA_INFO = 1004
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006
    GET_BROKER_EPOCH_CACHE = 1007
    GET_CONTROLLER_CONFIG = 1010
    CLEAN_BROKER_DATA = 1011


class ResponseCode(enum.IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210
    # ledgermq's own (S3): stored, replicated to no checkpoint and not cached by the
    # control node; the producer resolves it (see Producer.resolve)
    SEND_PENDING = 9920
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_NOT_LEADER = 2007


class LanguageCode(enum.IntEnum):
    """Ordinals as the binary (ROCKETMQ) header carries them; JSON carries the name."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12


class SerializeType(enum.IntEnum):
    JSON = 0
    ROCKETMQ = 1


FLAG_RESPONSE = 0x1  # RPC_TYPE bit: 1 = response
FLAG_ONEWAY = 0x2

# A topic's permission bits, as routes and topic configs carry them
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1

# PULL_MESSAGE's sysFlag bits
PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
PULL_FLAG_SUBSCRIPTION = 0x4

# The topics a group's failed messages go through: retried, then dead letters
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
