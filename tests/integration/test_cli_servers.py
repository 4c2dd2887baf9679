"""A server that cannot start says why in one line, with what to do, and exits non-zero:
a store another process has open (two writers would corrupt it), a port in use, a data
directory it cannot use. Never a traceback."""
import subprocess
import sys

from .test_cli import cli


def dev_cli(data, *args):
    return cli("dev", "--data", data, *args, check=False)


def one_line_error(p: subprocess.CompletedProcess, *needles: str) -> None:
    assert p.returncode != 0
    assert "Traceback" not in p.stderr, p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), p.stderr
    for n in needles:
        assert n in last, last


def test_a_second_dev_on_the_same_store_is_refused(dev):
    first = dev()
    store = first.data / "store"
    p = dev_cli(store, "--namesrv-port", 0, "--port", 0)
    one_line_error(p, f"store {store} is in use by pid {first.proc.pid}")
    # the first one is untouched: it still serves
    assert cli("produce", "-n", first.namesrv, "-t", "StillMine", "--body", "x").returncode == 0


def test_a_port_in_use_is_one_line(dev, tmp_path):
    first = dev()
    ns_port, _ = first.ports
    p = dev_cli(tmp_path / "other", "--namesrv-port", ns_port, "--port", 0)
    one_line_error(p, "address already in use", "choose other ports")


def test_a_data_directory_that_is_a_file_is_one_line(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    p = dev_cli(not_a_dir / "store", "--namesrv-port", 0, "--port", 0)
    one_line_error(p, str(not_a_dir))


def test_the_store_lock_goes_with_the_process(dev):
    """A killed server leaves no stale lock: the next one starts on the same store."""
    first = dev()
    first.stop(sig=9)
    again = dev(data=first.data)
    assert cli("produce", "-n", again.namesrv, "-t", "After", "--body", "x").returncode == 0


def test_python_sees_the_lock_too(tmp_path):
    """Two stores on one directory in one process: the second open refuses."""
    out = subprocess.run([sys.executable, "-c", f"""
from ledgermq.runtime.files import DirectoryInUse
from ledgermq.store import MessageStore, StoreConfig
cfg = StoreConfig(storePathRootDir={str(tmp_path)!r}, mappedFileSizeCommitLog=1 << 16)
a = MessageStore(cfg); a.open()
try:
    MessageStore(cfg).open()
except DirectoryInUse as e:
    print("refused:", e)
a.close()
MessageStore(cfg).open()  # free again once closed
print("reopened")
"""], capture_output=True, text=True, timeout=60)
    assert "refused: store" in out.stdout and "reopened" in out.stdout, out.stderr
