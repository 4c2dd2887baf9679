"""Request processors by concern, as RocketMQ's broker cuts them: each offers a table of
request code -> handler, and the broker merges the tables."""
from .admin import AdminProcessor
from .broker_config import BrokerConfigProcessor
from .consumer_manage import ConsumerManageProcessor
from .groups import GroupAdminProcessor
from .pop import PopProcessor
from .pull import PullProcessor
from .query import QueryProcessor
from .send import SendProcessor
from .transaction import TransactionProcessor

PROCESSORS = (SendProcessor, PullProcessor, ConsumerManageProcessor, QueryProcessor,
              AdminProcessor, TransactionProcessor, GroupAdminProcessor, BrokerConfigProcessor,
              PopProcessor)

__all__ = ["PROCESSORS", "AdminProcessor", "BrokerConfigProcessor", "ConsumerManageProcessor",
           "GroupAdminProcessor", "PopProcessor", "PullProcessor",
           "QueryProcessor", "SendProcessor", "TransactionProcessor"]
