"""Request bodies in JSON (heartbeats, queue locks, client configs) checked for shape
before use: a client may send any JSON, and a list where an object belongs must get a
clear error, not an exception deep in a handler. ValueError says what is wrong (the
broker answers it as a bad request)."""
from __future__ import annotations

import json
from typing import Any


def json_object(body: bytes | None, what: str = "the body") -> dict[str, Any]:
    try:
        doc = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{what} is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{what} is not a JSON object")
    return doc


def objects(value: object, what: str) -> list[dict[str, Any]]:
    """A list of JSON objects (absent: empty)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"{what} is not a list of JSON objects")
    return value


def text(doc: dict[str, Any], key: str, what: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what}: {key} is missing or not a string")
    return value


def queue_id(doc: dict[str, Any], what: str) -> int:
    value = doc.get("queueId")
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{what}: queueId is not a number")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{what}: queueId {str(value)[:20]!r} is not a number") from None
