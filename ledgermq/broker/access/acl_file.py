"""plain_acl.yml on disk: read at start (a broken file stops start-up, naming what is
wrong), then read again when it changes (a broken edit is logged and the rules before it
stay), looked at no more than once a second."""
from __future__ import annotations

import logging
import time
from pathlib import Path

import yaml

from .accounts import PlainAcl

log = logging.getLogger(__name__)

STAT_EVERY_S = 1.0


def load(path: Path) -> PlainAcl:
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ValueError(f"ACL file {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"ACL file {path} is not YAML: {e}") from None
    try:
        return PlainAcl.from_doc(doc)
    except ValueError as e:
        raise ValueError(f"ACL file {path}: {e}") from None


class AclFile:
    def __init__(self, path: Path):
        self.path = path
        self.acl = load(path)
        self._mtime = path.stat().st_mtime_ns
        self._looked = time.monotonic()

    def current(self) -> PlainAcl:
        now = time.monotonic()
        if now - self._looked >= STAT_EVERY_S:
            self._looked = now
            try:
                mtime = self.path.stat().st_mtime_ns
            except OSError as e:
                log.error("ACL file %s: %s; the rules read before stay", self.path, e)
                return self.acl
            if mtime != self._mtime:
                self._mtime = mtime
                try:
                    self.acl = load(self.path)
                    log.info("ACL file %s read again: %d accounts", self.path,
                             len(self.acl.accounts))
                except ValueError as e:
                    log.error("%s; the rules read before stay", e)
        return self.acl
