"""RocketMQ's ACL 1.0 (plain_acl.yml): accounts with a secret key, an admin flag, default
and per-resource permissions, and the remote addresses they may come from; every request
is signed by its client (HMAC-SHA1 over the values of its header fields sorted by name, then
its body, base64; the AccessKey and Signature fields carry the account and the signature).

Pure decisions: `PlainAcl.check` takes a request's fields, body and the peer's address and
returns why it is refused, or None. The broker loads the file and reloads it when it
changes (acl_file.py)."""
from __future__ import annotations

import calendar
import fnmatch
import hashlib
import hmac
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ...remoting.signing import ACCESS_KEY, SIGNATURE, sign
from ...wire.message import StoredMessage
from ..refusals import Kind, Refused
from . import rules
from .rules import Ask

# how far a RocketMQ 5 client's signed x-mq-date-time may lie from the broker's clock
# (aclSignatureWindowSeconds)
SIGNATURE_WINDOW_S = 15 * 60

DENY, PUB, SUB = 0, rules.PUB, rules.SUB
Lookup = Callable[[int], StoredMessage | None]  # a commit-log offset -> its stored message
_PERMS = {"DENY": DENY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB,
          "ANY": PUB | SUB}


def perm_of(text: str) -> int:
    try:
        return _PERMS[str(text).strip().upper()]
    except KeyError:
        raise ValueError(f"permission {text!r} is not one of DENY, PUB, SUB, PUB|SUB") from None


def _resource_perms(entries: Iterable[object] | None, what: str) -> dict[str, int]:
    out = {}
    for entry in entries or ():
        name, sep, perm = str(entry).partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{what} entry {entry!r} is not NAME=PERMISSION")
        out[name.strip()] = perm_of(perm)
    return out


@dataclass
class Account:
    access_key: str
    secret_key: str
    admin: bool = False
    white_remote_address: str = ""
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    topic_perms: dict[str, int] = field(default_factory=dict)
    group_perms: dict[str, int] = field(default_factory=dict)

    def topic_allows(self, topic: str, need: int) -> bool:
        return self.topic_perms.get(topic, self.default_topic_perm) & need == need

    def group_allows(self, group: str, need: int) -> bool:
        return self.group_perms.get(group, self.default_group_perm) & need == need


def _top_level_split(pattern: str) -> list[str]:
    """Split on the commas outside braces (`a.{1,2}.*,b.*` is two patterns)."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in pattern:
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    return parts + ["".join(cur)]


def address_matches(pattern: str, ip: str) -> bool:
    """RocketMQ's forms: `*`, `192.168.0.*`, `192.168.1.1,192.168.1.2`, `192.168.{1,2}.*`,
    `192.168.1.1-200`."""
    for part in (p.strip() for p in _top_level_split(pattern) if p.strip()):
        if "{" in part:
            head, _, rest = part.partition("{")
            options, _, tail = rest.partition("}")
            if any(address_matches(head + o.strip() + tail, ip) for o in options.split(",")):
                return True
        elif "-" in part.rsplit(".", 1)[-1]:
            prefix, _, span = part.rpartition(".")
            lo, _, hi = span.partition("-")
            head, _, last = ip.rpartition(".")
            if head == prefix and last.isdigit() and int(lo) <= int(last) <= int(hi):
                return True
        elif fnmatch.fnmatchcase(ip, part):
            return True
    return False


@dataclass
class PlainAcl:
    accounts: dict[str, Account]
    global_white: list[str] = field(default_factory=list)

    @classmethod
    def from_doc(cls, doc: dict[str, Any] | None) -> "PlainAcl":
        """From plain_acl.yml's content; ValueError naming what is wrong."""
        doc = doc or {}
        if not isinstance(doc, dict):
            raise ValueError("plain_acl.yml must be a mapping (accounts:, "
                             "globalWhiteRemoteAddresses:)")
        accounts = {}
        for i, a in enumerate(doc.get("accounts") or ()):
            if not isinstance(a, dict) or not a.get("accessKey") or not a.get("secretKey"):
                raise ValueError(f"account #{i + 1} needs accessKey and secretKey")
            if len(str(a["secretKey"])) < 6:
                raise ValueError(f"account {a['accessKey']}: secretKey shorter than 6")
            accounts[str(a["accessKey"])] = Account(
                str(a["accessKey"]), str(a["secretKey"]),
                admin=str(a.get("admin", False)).lower() == "true",
                white_remote_address=str(a.get("whiteRemoteAddress") or ""),
                default_topic_perm=perm_of(a.get("defaultTopicPerm", "DENY")),
                default_group_perm=perm_of(a.get("defaultGroupPerm", "DENY")),
                topic_perms=_resource_perms(a.get("topicPerms"), "topicPerms"),
                group_perms=_resource_perms(a.get("groupPerms"), "groupPerms"))
        white = [str(w) for w in doc.get("globalWhiteRemoteAddresses") or ()]
        return cls(accounts, white)

    def check(self, code: int, fields: dict[str, str], body: bytes | None,
              ip: str, message: Lookup | None = None) -> str | None:
        """Why this remoting request is refused, or None."""
        try:
            account = self._account(fields.get(ACCESS_KEY), ip)
        except Refused as e:
            return str(e)
        if account is WHITE:
            return None
        given = str(fields.get(SIGNATURE) or "").encode("utf-8", "replace")
        if not hmac.compare_digest(given, sign(account.secret_key, fields, body).encode()):
            return f"wrong signature for account {account.access_key}"
        return self.permission(account, code, fields, body, message)

    def authenticate_grpc(self, authorization: str, date_time: str, ip: str,
                          now: float | None = None, window_s: int = SIGNATURE_WINDOW_S
                          ) -> Account:
        """The account of a RocketMQ 5 client's call; Refused (UNAUTHORIZED) saying why not.
        `authorization` is "MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time,
        Signature=HEX" (HMAC-SHA1 of x-mq-date-time). The signed time must lie within
        `window_s` of ours: a captured header cannot be replayed for good."""
        parts = dict(p.strip().partition("=")[::2]
                     for p in authorization.partition(" ")[2].split(","))
        account = self._account(parts.get("Credential", "").split("/")[0], ip)
        if account is WHITE:
            return account
        expected = hmac.new(account.secret_key.encode(), date_time.encode(),
                            hashlib.sha1).hexdigest()
        given = parts.get("Signature", "").lower().encode("utf-8", "replace")
        if not hmac.compare_digest(given, expected.encode()):
            raise _unauthorized(f"wrong signature for account {account.access_key}")
        try:
            signed = calendar.timegm(time.strptime(date_time, "%Y%m%dT%H%M%SZ"))
        except ValueError:
            raise _unauthorized(f"x-mq-date-time {date_time[:32]!r} is not "
                                "yyyyMMddTHHmmssZ") from None
        skew = (time.time() if now is None else now) - signed
        if abs(skew) > window_s:
            raise _unauthorized(
                f"x-mq-date-time {date_time} is {abs(skew):.0f} s "
                f"{'old' if skew > 0 else 'ahead'}: signatures are taken within "
                f"{window_s} s (aclSignatureWindowSeconds)")
        return account

    def _account(self, ak: str | None, ip: str) -> Account:
        """The account named by AccessKey `ak`, calling from `ip`; Refused saying why not."""
        if any(address_matches(w, ip) for w in self.global_white):
            return WHITE  # RocketMQ: a globally white address needs no signature
        if not ak:
            raise _unauthorized("no AccessKey: this broker has aclEnable=true; sign requests")
        account = self.accounts.get(ak)
        if account is None:
            raise _unauthorized(f"no account with AccessKey {ak}")
        if account.white_remote_address and \
                not address_matches(account.white_remote_address, ip):
            raise _unauthorized(f"account {ak} may not connect from {ip}")
        return account

    @staticmethod
    def permission(account: Account, code: int, fields: dict[str, str],
                   body: bytes | None = None, message: Lookup | None = None) -> str | None:
        """What the request needs (rules.RULES), and whether the account has it.
        `message(offset)`: the stored message at a commit-log offset, or None."""
        ask = Ask(fields, body) if message is None else Ask(fields, body, message)
        return rules.refusal(account, code, ask)


# a globally white address: trusted as an admin, as RocketMQ does
WHITE = Account("(white address)", "", admin=True)


def _unauthorized(why: str) -> Refused:
    return Refused(Kind.UNAUTHORIZED, why)
