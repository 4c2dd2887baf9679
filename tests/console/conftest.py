"""The console's tests drive the machine's Chromium (Debian's `chromium`) with
Playwright against a real cluster and a real `ledgermq console` process; they skip, saying
why, where Chromium or Playwright is missing."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ledgermq.client.admin import Admin
from ledgermq.client.sync import Blocking
from ledgermq.localcluster.cluster import down, up

from ..wait import wait_until

CHROMIUM = os.environ.get("LEDGERMQ_CHROMIUM") or shutil.which("chromium") or \
    shutil.which("chromium-browser")
# as root, in a closed network: no sandbox, nothing fetched in the background
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    """Chromium for one test module: Playwright's sync API keeps its event loop running
    in this thread while it is open, so asyncio.run() fails in every test after it."""
    if CHROMIUM is None:
        pytest.skip("no Chromium on this machine (apt-get install chromium): the console's "
                    "browser tests need it")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    pg.set_default_timeout(15_000)
    try:
        yield pg
    finally:
        ctx.close()


class ConsoleProcess:
    """`ledgermq console` for a cluster's name servers, on a free port."""

    def __init__(self, namesrv: str, workdir: Path):
        self.log = open(workdir / "console.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ledgermq", "console", "-n", namesrv, "--port", "0",
             "--json"], stdout=subprocess.PIPE, stderr=self.log, text=True)
        line = self.proc.stdout.readline()  # the ready line (or EOF if it died)
        if not line:
            self.stop()
            raise RuntimeError(f"console did not start: {(workdir / 'console.log').read_text()}")
        self.url = json.loads(line)["console"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def dledger(tmp_path_factory):
    """A three-node DLedger group, a console on it, and an admin client (the CLI's API)."""
    d = tmp_path_factory.mktemp("console-dledger")
    # elections only when a leader is gone for 2-4 s, not on a 300 ms stall of a loaded
    # CI machine: a leader change mid-send resends it (at least once), and these tests
    # compare what one send shows (CI saw 11 messages of 10 sent, and 2 of one)
    state = up("dledger", 3, d, {"dLegerElectionTimeoutMs": "2000"})
    console = admin = None
    try:
        console = ConsoleProcess(state["namesrv"], d)
        admin = Blocking(Admin, state["namesrv"])

        def registered():  # every broker at the name server, one of them as master
            addrs = admin.cluster_list()["brokerAddrTable"].get("broker-a", {})
            return len(addrs.get("brokerAddrs", {})) == 3 and "0" in addrs["brokerAddrs"]
        wait_until(registered, "the three brokers registered, one as master", timeout=30)
        yield {"dir": d, "state": state, "url": console.url, "admin": admin,
               "namesrv": state["namesrv"]}
    finally:
        if admin is not None:
            admin.close()
        if console is not None:
            console.stop()
        down(d)
