"""Faulting in a segment's pages a little ahead of the writer, on a thread of its own.

The first write through the mapping to each page of a freshly allocated segment costs a
page fault in which ext4 allocates the block (page_mkwrite): measured on this machine, a
128 KB batch took 188 µs to copy into fresh pages and 12-17 µs into faulted-in ones, and
that copy runs on the broker's event loop. So a thread faults the pages in first
(madvise MADV_POPULATE_WRITE, Linux 5.14+, called through ctypes, which releases the GIL)
up to WINDOW bytes ahead of the write position. Only that window: a faulted-in page is
dirty, and one the writer never reaches would be written back as zeros.

Where the kernel does not know the call, prefaulting switches itself off and writes fault
their pages in as before.
"""
from __future__ import annotations

import ctypes
import logging
import mmap
import threading

from .mapped_file import MappedFile, _libc

log = logging.getLogger(__name__)

MADV_POPULATE_WRITE = 23
WINDOW = 16 << 20  # faulted in ahead of the writer
# per madvise call (~0.3 ms a MB here, the GIL released): not small, since between calls
# the thread waits for the GIL, which a busy event loop hands over only every few ms; not
# the whole window either, since a segment being closed waits for the call in progress
# (under a journal busy with other writers' fsyncs a call can take seconds)
CHUNK = 4 << 20

_madvise = getattr(_libc, "madvise", None)
if _madvise is not None:
    _madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _madvise.restype = ctypes.c_int


def _kernel_has_it() -> bool:
    """Whether madvise knows MADV_POPULATE_WRITE here (tried on one anonymous page)."""
    if _madvise is None:
        return False
    page = mmap.mmap(-1, mmap.PAGESIZE)
    try:
        return _madvise(ctypes.addressof(ctypes.c_char.from_buffer(page)), mmap.PAGESIZE,
                        MADV_POPULATE_WRITE) == 0
    finally:
        page.close()


SUPPORTED = _kernel_has_it()


class Prefaulter:
    """One per commit log. `ahead(seg, pos)` after each write: cheap unless the window
    ahead of `pos` needs topping up, which the thread then does."""

    def __init__(self, what: str = "commit log"):
        self.enabled = SUPPORTED
        self._what = what
        self._cond = threading.Condition()
        self._seg: MappedFile | None = None  # the segment being written
        self._target = 0  # fault in up to here (a position in _seg)
        self._done = 0  # faulted in up to here
        self._stopped = False
        self._thread: threading.Thread | None = None

    def ahead(self, seg: MappedFile, pos: int) -> None:
        if not self.enabled or (seg is self._seg and pos + WINDOW // 2 <= self._target):
            return
        with self._cond:
            if seg is not self._seg:
                self._seg, self._done = seg, pos
            self._target = min(seg.size, pos + WINDOW)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name=f"prefault {self._what}")
                self._thread.start()
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(1)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (self._seg is None or self._done >= self._target):
                    self._cond.wait()
                if self._stopped:
                    return
                seg, lo = self._seg, self._done
                hi = min(self._target, lo + CHUNK)
            if not self._fault_in(seg, lo, hi):
                return
            with self._cond:
                if self._seg is seg:
                    self._done = max(self._done, hi)

    def _fault_in(self, seg: MappedFile, lo: int, hi: int) -> bool:
        """Fault in [lo, hi) of `seg` (page-aligned outward); False once switched off."""
        page = 4096
        lo -= lo % page
        with seg.mapping_lock:  # the segment is not unmapped meanwhile
            if seg.closed:
                return True
            if _madvise(seg.address + lo, hi - lo, MADV_POPULATE_WRITE) == 0:
                return True
        err = ctypes.get_errno()
        log.info("prefaulting the %s is off (madvise: errno %d); writes fault their pages "
                 "in themselves", self._what, err)
        self.enabled = False
        return False
