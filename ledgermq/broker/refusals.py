"""What the broker's services refuse, in one convention: they raise `Refused` with a
`Kind`, and each protocol maps kinds to its own codes in one table (remoting:
`processors/refusal_codes.py`, gRPC: `grpc/convert.py`); a test checks both cover every
kind. Checks that only answer "may this go on?" (a mode's `refuse_write`, an ACL rule)
return the reason or None, and their caller's protocol says the code."""
from __future__ import annotations

import enum


class Kind(enum.Enum):
    BAD_REQUEST = "bad request"  # a field missing, malformed or out of range
    UNAUTHORIZED = "unauthorized"  # the ACL refuses the caller or what it asks
    CLIENT_ID_REQUIRED = "client id required"  # a RocketMQ 5 call that names no client
    CLIENT_ID_TAKEN = "client id taken"  # another connection's RocketMQ 5 session
    TOPIC_NOT_FOUND = "topic not found"
    TOO_MANY = "too many"  # past a creation limit: nothing was created
    RECEIPT_HANDLE = "receipt handle"  # another broker's or topic's, or expired
    INVISIBLE_TIME = "invisible time"  # out of the allowed range
    MESSAGE_TAG = "message tag"
    MESSAGE_KEY = "message key"
    MESSAGE_ID = "message id"
    MESSAGE_GROUP = "message group"
    PROPERTY_KEY = "property key"  # a key only the broker may set
    PROPERTIES_TOO_LARGE = "properties too large"
    STORE_REFUSED = "store refused"  # the store did not take the broker's own write


class Refused(ValueError):
    """A request the broker refuses; `str(e)` says why, for the client to read."""

    def __init__(self, kind: Kind, message: str):
        super().__init__(message)
        self.kind = kind
