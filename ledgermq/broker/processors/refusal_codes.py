"""The remoting response code of each kind of refusal (see ../refusals.py)."""
from __future__ import annotations

from ...remoting import ResponseCode
from ..refusals import Kind

REMOTING_CODES: dict[Kind, int] = {
    Kind.BAD_REQUEST: ResponseCode.SYSTEM_ERROR,
    Kind.UNAUTHORIZED: ResponseCode.NO_PERMISSION,
    Kind.CLIENT_ID_REQUIRED: ResponseCode.SYSTEM_ERROR,  # (gRPC's alone)
    Kind.CLIENT_ID_TAKEN: ResponseCode.SYSTEM_ERROR,  # (gRPC's alone)
    Kind.TOPIC_NOT_FOUND: ResponseCode.TOPIC_NOT_EXIST,
    Kind.TOO_MANY: ResponseCode.SYSTEM_BUSY,
    Kind.RECEIPT_HANDLE: ResponseCode.SYSTEM_ERROR,
    Kind.INVISIBLE_TIME: ResponseCode.SYSTEM_ERROR,
    Kind.MESSAGE_TAG: ResponseCode.MESSAGE_ILLEGAL,
    Kind.MESSAGE_KEY: ResponseCode.MESSAGE_ILLEGAL,
    Kind.MESSAGE_ID: ResponseCode.MESSAGE_ILLEGAL,
    Kind.MESSAGE_GROUP: ResponseCode.MESSAGE_ILLEGAL,
    Kind.PROPERTY_KEY: ResponseCode.MESSAGE_ILLEGAL,
    Kind.PROPERTIES_TOO_LARGE: ResponseCode.MESSAGE_ILLEGAL,
    Kind.STORE_REFUSED: ResponseCode.SYSTEM_ERROR,
}
