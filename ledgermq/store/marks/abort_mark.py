"""The abort mark: a file that exists while a store is open, holding the machine's boot id
(Linux's /proc/sys/kernel/random/boot_id) of the boot that opened it.

Found at start-up, it says the last run did not close the store (a crash). Its boot id
says what the crash could have lost: the same boot means only the process died, and the
kernel's page cache kept every byte written, flushed or not; another boot (or none
recorded) means the machine itself went down, and writes not yet fsynced may be gone.
"""
from __future__ import annotations

from pathlib import Path

ABORT_FILE = "abort"  # in the store's root
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""  # not Linux: unknown


def open_mark(path: Path) -> tuple[bool, bool | None]:
    """Mark the store open; returns (crashed, same boot) of the run before: same boot is
    None when unknown (no crash, or no boot id recorded or readable)."""
    crashed = path.exists()
    same: bool | None = None
    if crashed:
        try:
            recorded = path.read_text().strip()
        except (OSError, UnicodeDecodeError):
            recorded = ""
        now = boot_id()
        same = (recorded == now) if recorded and now else None
    path.write_text(boot_id())
    return crashed, same
