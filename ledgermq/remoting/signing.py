"""Request signatures as RocketMQ's ACL 1.0 defines them: HMAC-SHA1 keyed by the secret
key over the values of the header's fields sorted by name (the Signature field left out),
then the body; base64. A client adds AccessKey, OnsChannel and Signature fields."""
from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Callable

from .command import RemotingCommand

ACCESS_KEY, SIGNATURE, CHANNEL = "AccessKey", "Signature", "OnsChannel"
DEFAULT_CHANNEL = "ALIYUN"  # what RocketMQ's clients send unless told otherwise


def body_bytes(body) -> bytes:
    if not body:
        return b""
    if isinstance(body, list):
        return b"".join(bytes(b) for b in body)
    return bytes(body)


def sign(secret_key: str, fields: dict[str, str], body) -> str:
    content = "".join(str(v) for k, v in sorted(fields.items())
                      if k != SIGNATURE and v is not None).encode()
    mac = hmac.new(secret_key.encode(), content + body_bytes(body), hashlib.sha1)
    return base64.b64encode(mac.digest()).decode()


def signer(access_key: str, secret_key: str,
           channel: str = DEFAULT_CHANNEL) -> Callable[[RemotingCommand], None]:
    """What signs every request a client sends (set on its connections)."""
    def apply(cmd: RemotingCommand) -> None:
        ext = {k: str(v) for k, v in cmd.ext.items() if v is not None}
        ext[ACCESS_KEY], ext[CHANNEL] = access_key, channel
        ext.pop(SIGNATURE, None)
        ext[SIGNATURE] = sign(secret_key, ext, cmd.body)
        cmd.ext = ext
    return apply
