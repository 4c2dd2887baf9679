"""The data source's options, checked once on the driver: a wrong one is a clear error
naming it, before any task starts."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

KNOWN_READ = {"namesrv", "topic", "startingoffsets", "startingtimestamp", "endingoffsets",
              "maxmessagespertrigger", "consumergroup", "includeproperties", "pullbatchsize",
              "failonunavailable"}
KNOWN_WRITE = {"namesrv", "topic", "producergroup", "batchsize"}


SPARK_OWN = {"path", "checkpointlocation", "queryname"}  # Spark passes these along


class OptionError(ValueError):
    """A bad ledgermq data source option."""


def _int(opts, key: str, default: int | None, minimum: int = 0) -> int | None:
    raw = opts.get(key)
    if raw is None:
        return default
    try:
        v = int(raw)
    except ValueError:
        raise OptionError(f"option {key}={raw!r} is not an integer") from None
    if v < minimum:
        raise OptionError(f"option {key}={v} must be at least {minimum}")
    return v


def _bool(opts, key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None:
        return default
    if str(raw).lower() not in ("true", "false"):
        raise OptionError(f"option {key}={raw!r} must be true or false")
    return str(raw).lower() == "true"


def _offsets(opts, key: str, default: str):
    """'earliest' | 'latest' | JSON {"topic": {"broker:queue": offset}} (Kafka's shape, with
    'broker:queue' for a partition; -2 = earliest, -1 = latest)."""
    raw = opts.get(key, default)
    if raw in ("earliest", "latest"):
        return raw
    try:
        d = json.loads(raw)
        out = {t: {str(q): int(o) for q, o in qs.items()} for t, qs in d.items()}
    except (ValueError, AttributeError, TypeError):
        raise OptionError(f"option {key}={raw!r} must be earliest, latest or JSON like "
                          '{"Topic": {"broker-a:0": 42}}') from None
    return out


def _lower(options) -> dict:
    return {str(k).lower(): v for k, v in dict(options).items()}


def _unknown(opts: dict, known: set[str], what: str) -> None:
    extra = sorted(set(opts) - known - SPARK_OWN)
    if extra:
        raise OptionError(f"unknown ledgermq {what} option(s): {', '.join(extra)} "
                          f"(known: {', '.join(sorted(known))})")


@dataclass(frozen=True)
class ReadOptions:
    namesrv: str
    topics: tuple[str, ...]
    starting: object = "earliest"
    starting_timestamp: int | None = None
    ending: object = "latest"
    max_per_trigger: int | None = None
    consumer_group: str | None = None
    include_properties: bool = True
    pull_batch: int = 4096
    fail_on_unavailable: bool = True  # a queue whose group is down fails the batch
    extra: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, options) -> "ReadOptions":
        o = _lower(options)
        _unknown(o, KNOWN_READ, "read")
        if not o.get("topic"):
            raise OptionError("option topic is required (one topic or a comma list)")
        topics = tuple(t.strip() for t in o["topic"].split(",") if t.strip())
        ending = _offsets(o, "endingoffsets", "latest")
        if ending == "earliest":
            raise OptionError("option endingOffsets=earliest makes no sense: use latest or JSON")
        return cls(namesrv=o.get("namesrv", "127.0.0.1:9876"), topics=topics,
                   starting=_offsets(o, "startingoffsets", "earliest"),
                   starting_timestamp=_int(o, "startingtimestamp", None),
                   ending=ending, max_per_trigger=_int(o, "maxmessagespertrigger", None, 1),
                   consumer_group=o.get("consumergroup") or None,
                   include_properties=_bool(o, "includeproperties", True),
                   pull_batch=_int(o, "pullbatchsize", 4096, 1),
                   fail_on_unavailable=_bool(o, "failonunavailable", True))


@dataclass(frozen=True)
class WriteOptions:
    namesrv: str
    topic: str | None
    producer_group: str
    batch_size: int

    @classmethod
    def parse(cls, options) -> "WriteOptions":
        o = _lower(options)
        _unknown(o, KNOWN_WRITE, "write")
        return cls(namesrv=o.get("namesrv", "127.0.0.1:9876"), topic=o.get("topic") or None,
                   producer_group=o.get("producergroup", "ledgermq-spark-sink"),
                   batch_size=_int(o, "batchsize", 1000, 1))
