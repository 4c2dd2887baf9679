"""Chooses, per hot function, the compiled version or its pure-Python twin.

The per-message byte work of the wire formats (splitting a batch body, laying out stored
messages, ...) has a C implementation in `_native.c`, built by `pip install` where a
compiler is present. Each is registered here beside its pure-Python twin of the same
signature: the twin is the readable specification, the property tests hold the two to
byte-for-byte equal results, and it runs wherever the module did not build or
LEDGERMQ_PURE=1 asks for it.
"""
from __future__ import annotations

import os
from typing import Any, Callable, TypeVar, cast

from .message import MessageFormatError

PURE = os.environ.get("LEDGERMQ_PURE", "") not in ("", "0")

try:
    from . import _native  # type: ignore[attr-defined]  # a C extension without stubs
    _native.init(MessageFormatError)
except ImportError:  # no compiler at install time: the twins run
    _native = None

# name -> (pure twin, native version or None)
TWINS: dict[str, tuple[Callable[..., Any], Callable[..., Any] | None]] = {}
_F = TypeVar("_F", bound=Callable[..., Any])


def twin(native_name: str, adapt: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None
         ) -> Callable[[_F], _F]:
    """Decorates a pure function: registers it with its compiled twin `native_name`
    (wrapped by `adapt` where the C function returns raw buffers) and returns the one in
    use."""
    def register(pure: _F) -> _F:
        native: Callable[..., Any] | None = getattr(_native, native_name, None)
        if native is not None and adapt is not None:
            native = adapt(native)
        TWINS[pure.__name__] = (pure, native)
        return pure if PURE or native is None else cast(_F, native)
    return register


def twin_or_fallback(native_name: str) -> Callable[[_F], _F]:
    """Like `twin`, for a compiled function that handles the usual inputs and returns None
    for the rest (odd number forms, unusual types: whatever it would have to reimplement
    Python's rules for); the pure twin then answers. Their contract, held by the property
    tests: where the compiled one answers, it answers as the twin does."""
    def register(pure: _F) -> _F:
        def falling_back(compiled: Callable[..., Any]) -> Callable[..., Any]:
            first: Callable[..., Any] = _native.first_of(compiled, pure)
            return first  # (a C callable: no Python frame around each call)
        return twin(native_name, adapt=falling_back)(pure)
    return register


def active() -> str:
    """Which implementation runs: "native" or "pure" (and why pure)."""
    if _native is None:
        return "pure (the compiled module is not built)"
    return "pure (LEDGERMQ_PURE=1)" if PURE else "native"
