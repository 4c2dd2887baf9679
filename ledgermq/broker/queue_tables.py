"""Tables keyed by message queue in a response body, as each client reads them. RocketMQ's
Java tools read fastjson's map keyed by MessageQueue objects ({"offsetTable": {{"brokerName":
..., "queueId": 0, "topic": ...}: {...}}}: object keys, not JSON); the C++ client and
ledgermq's own read a list of rows that carry their queue ({topic, brokerName, queueId,
...})."""
from __future__ import annotations

import json
from typing import Any

from .name_server_link import json_body

QUEUE_FIELDS = ("brokerName", "queueId", "topic")


def queue_table(rows: list[dict[str, Any]], language: str,
                extra: dict[str, Any] | None = None) -> bytes:
    """{"offsetTable": ...} (and `extra` keys) for a client speaking `language`. Each
    row's non-queue fields become its value (a row with one such field `offset`, as
    RESET_CONSUMER_CLIENT_OFFSET's, maps to the bare number)."""
    if language in ("CPP", "PYTHON"):
        return json_body({"offsetTable": rows, **(extra or {})})
    pairs = []
    for row in rows:
        key = json.dumps({k: row[k] for k in QUEUE_FIELDS}, separators=(",", ":"))
        value = {k: v for k, v in row.items() if k not in QUEUE_FIELDS}
        if list(value) == ["offset"]:
            value = value["offset"]
        pairs.append(f"{key}:{json.dumps(value, separators=(',', ':'))}")
    tail = "".join(f",{json.dumps(k)}:{json.dumps(v)}" for k, v in (extra or {}).items())
    return ('{"offsetTable":{' + ",".join(pairs) + "}" + tail + "}").encode()
