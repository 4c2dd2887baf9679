"""A short differential fuzz run of the compiled wire parsers (tests/fuzz/fuzz_wire.py);
`make fuzz` runs the same for longer."""
import os
import subprocess
import sys

import pytest

from ledgermq.wire import native

SECONDS = int(os.environ.get("LEDGERMQ_FUZZ_SECONDS", "6"))  # make fuzz: 600


@pytest.mark.skipif(native._native is None, reason="the compiled module is not built")
def test_fuzz_native_against_pure_twins(tmp_path):
    pytest.importorskip("atheris")
    run = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.fuzz_wire", f"-max_total_time={SECONDS}",
         "-seed=1", f"-artifact_prefix={tmp_path}/", "-print_final_stats=1"],
        capture_output=True, text=True, timeout=SECONDS + 120)
    tail = run.stderr[-3000:]
    assert run.returncode == 0, f"the fuzzer found a failing input:\n{tail}"
    assert "Done" in tail and "runs in" in tail, tail  # it ran, and ran to its end
