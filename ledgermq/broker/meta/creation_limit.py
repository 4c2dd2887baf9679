"""How many topics or groups clients may create in a minute. Auto-creation (a send to a
new topic, a retry topic, a consumer of a new group) grows tables the broker keeps,
saves and registers with its name servers: a client inventing names in a loop must not
grow them without bound."""
from __future__ import annotations

import time
from collections import deque
from typing import Callable

from ..refusals import Kind, Refused


class CreationLimit:
    def __init__(self, per_minute: int, what: str, key: str,
                 clock: Callable[[], float] = time.monotonic):
        self.per_minute, self.what, self.key = per_minute, what, key
        self.clock = clock
        self._recent: deque[float] = deque()  # when the last creations were (one minute)

    def take(self, name: str) -> None:
        """Count one creation of `name`; Refused (TOO_MANY) past the limit."""
        now = self.clock()
        while self._recent and self._recent[0] <= now - 60:
            self._recent.popleft()
        if len(self._recent) >= self.per_minute:
            raise Refused(Kind.TOO_MANY,
                f"[TOO_MANY_NEW_{self.what.upper()}S] {self.what} {name[:128]} not created: "
                f"{self.per_minute} {self.what}s were created in the last minute ({self.key}); "
                f"create it with the admin tool, or try again later")
        self._recent.append(now)
