"""RocketMQ-style `key=value` configuration files mapped onto typed dataclasses.

Config dataclasses name their fields exactly as the keys users write in broker.conf
(camelCase, as RocketMQ), so a key maps to a field with no translation table. Each field
may carry `metadata={"check": fn}` returning an error text for a bad value.
"""
from __future__ import annotations

import dataclasses
import difflib
import enum
import logging
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

log = logging.getLogger(__name__)

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key and the fix."""


def read_properties(path: str | Path) -> dict[str, str]:
    """Parse a Java-properties-style file (key=value or key: value, # and ! comments)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    return parse_properties(text, str(path))


def parse_properties(text: str, where: str) -> dict[str, str]:
    """key=value (or key: value) lines, # and ! comments; ConfigError naming `where` and the
    line number for a line that is neither."""
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep <= 0:
            raise ConfigError(f"{where}:{n}: expected key=value, got {line!r}")
        out[line[:sep].strip()] = line[sep + 1:].strip()
    return out


def convert(key: str, raw: Any, typ: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        if typ is bool:
            low = raw.lower()
            if low not in ("true", "false"):
                raise ValueError
            return low == "true"
        if typ is int:
            return int(raw)
        if typ is float:
            return float(raw)
        if isinstance(typ, type) and issubclass(typ, enum.Enum):
            return typ[raw]
    except (ValueError, KeyError):
        allowed = ""
        if isinstance(typ, type) and issubclass(typ, enum.Enum):
            allowed = " (one of " + ", ".join(m.name for m in typ) + ")"
        kind = getattr(typ, "__name__", str(typ))
        raise ConfigError(f"{key}={raw!r} is not a valid {kind}{allowed}") from None
    return raw


def build(cls: type[T], values: dict[str, Any], *, strict: bool = False) -> tuple[T, list[str]]:
    """An instance of config dataclass `cls` from `values`; returns (config, unknown keys).

    Unknown keys are returned (and logged) so that the caller can hand them to another
    config class or report them; with strict=True they are an error.
    """
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    unknown: list[str] = []
    for key, raw in values.items():
        if key not in fields:
            unknown.append(key)
            continue
        kwargs[key] = convert(key, raw, hints[key])
    if unknown and strict:
        raise ConfigError(f"unknown config keys: {', '.join(sorted(unknown))}")
    obj = cls(**kwargs)
    validate(obj)
    return obj, unknown


def explain_unknown(keys: list[str], *classes: type) -> list[str]:
    """Each unknown key, with the known key it was probably meant to be:
    "flushDiskTyp (did you mean flushDiskType?)"."""
    known = [f.name for cls in classes for f in dataclasses.fields(cls)]
    by_case = {k.lower(): k for k in known}
    out = []
    for key in sorted(keys):
        guess = by_case.get(key.lower()) or next(
            iter(difflib.get_close_matches(key, known, n=1, cutoff=0.8)), None)
        out.append(f"{key} (did you mean {guess}?)" if guess else key)
    return out


def validate(obj: Any) -> None:
    for f in dataclasses.fields(obj):
        check = f.metadata.get("check")
        if check is not None:
            problem = check(getattr(obj, f.name))
            if problem:
                raise ConfigError(f"{f.name}={getattr(obj, f.name)!r}: {problem}")


def positive(v: int | float) -> str | None:
    return None if v > 0 else "must be greater than 0"


def non_negative(v: int | float) -> str | None:
    return None if v >= 0 else "must not be negative"


def percent(v: int | float) -> str | None:
    return None if 0 < v <= 100 else "must be a percentage in (0, 100]"


def check(fn) -> dict:
    """Field metadata attaching a validator: `x: int = field(default=1, metadata=check(positive))`."""
    return {"check": fn}
