"""The commit log's pages are faulted in ahead of the writer by a thread (store/prefault.py):
after an append, the window past the write position becomes resident without anyone
writing there, the bytes written are untouched, and closing the log meanwhile is safe."""
import ctypes
import mmap
import os

import pytest

from ledgermq.store import MessageStore
from ledgermq.store.mapped_file import _libc
from ledgermq.store import prefault
from ledgermq.store.prefault import WINDOW

from ..wait import wait_until
from .conftest import small_config

_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def resident_pages(seg, lo: int, hi: int) -> int:
    """How many pages of seg[lo:hi] are in memory (mincore)."""
    n = -(-(hi - lo) // mmap.PAGESIZE)
    vec = ctypes.create_string_buffer(n)
    assert _libc.mincore(seg.address + lo, hi - lo, vec) == 0, ctypes.get_errno()
    return sum(b & 1 for b in vec.raw)


def open_store(tmp_path) -> MessageStore:
    s = MessageStore(small_config(tmp_path, mappedFileSizeCommitLog=64 << 20))
    s.open()
    return s


def test_the_window_ahead_of_the_writer_is_faulted_in(tmp_path):
    store = open_store(tmp_path)
    try:
        if not prefault.SUPPORTED:
            pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux 5.14+)")
        r = store.append(store.encode("T", 0, [os.urandom(100) for _ in range(100)]))
        assert r.ok
        seg = store.commitlog.files.last()
        end = store.commitlog.max_offset - seg.start
        lo = end - end % mmap.PAGESIZE + mmap.PAGESIZE  # pages nobody has written
        pages = (WINDOW - mmap.PAGESIZE) // mmap.PAGESIZE
        # the thread's progress: every page of the window ahead comes in
        wait_until(lambda: resident_pages(seg, lo, lo + pages * mmap.PAGESIZE) == pages,
                   "the window ahead of the writer resident", timeout=10, interval=0.01)
        far = seg.size - 16 * mmap.PAGESIZE  # past the window: left alone
        assert resident_pages(seg, far, seg.size) == 0
        assert not any(seg.view[lo:lo + pages * mmap.PAGESIZE])  # faulted in, not written
        got = store.get_messages("T", 0, 0, 100)
        assert got.message_count == 100
    finally:
        store.close()


def test_closing_the_log_while_the_window_is_faulted_in_is_safe(tmp_path):
    for _ in range(5):
        store = open_store(tmp_path)
        store.append(store.encode("T", 0, [b"x" * 100] * 50))
        store.close()  # the thread may be inside madvise: close waits for its chunk
        thread = store.commitlog._prefault._thread
        assert thread is None or not thread.is_alive()


def test_without_the_kernel_call_writes_still_work(tmp_path, monkeypatch):
    monkeypatch.setattr(prefault, "_madvise", lambda *a: -1)  # as an old kernel answers
    store = open_store(tmp_path)
    try:
        for i in range(3):
            assert store.append(store.encode("T", 0, [b"y" * 100] * 100)).ok
        wait_until(lambda: not store.commitlog._prefault.enabled, "prefaulting switched off",
                   timeout=10, interval=0.01)
        assert store.get_messages("T", 0, 0, 300).message_count == 300
    finally:
        store.close()
