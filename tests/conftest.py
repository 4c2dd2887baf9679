from tests.dev_process import dev  # noqa: F401  (the `dev` fixture for every test package)

import pytest  # noqa: E402

from tests.dev_process import DevProcess  # noqa: E402


def _own_ports() -> None:
    """Each xdist worker picks its clusters' ports from a range of its own: two workers
    drawing from one range sometimes drew the same port (a name server that could not
    bind, seen once in 891 tests)."""
    import os
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), \
        os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if worker and count and "LEDGERMQ_PORT_RANGE" not in os.environ:
        k, n, width = int(worker.removeprefix("gw")), int(count), (32_000 - 10_000)
        lo = 10_000 + k * width // n
        os.environ["LEDGERMQ_PORT_RANGE"] = f"{lo}-{10_000 + (k + 1) * width // n}"


_own_ports()


def pytest_collection_modifyitems(items):
    """Under `pytest -n 2 --dist loadgroup` (make test) the runs on test hosts take one
    worker between them: each lays out a cluster of ~10 processes and holds recovery times
    to a bound, which two at once on a 2-core machine would stretch."""
    for item in items:
        if "tests/chaos/" in str(item.path):
            item.add_marker(pytest.mark.xdist_group("test-hosts"))


@pytest.fixture(scope="module")
def dev_once(tmp_path_factory):
    """One `ledgermq dev` process shared by a module's tests (e.g. property tests)."""
    p = DevProcess(tmp_path_factory.mktemp("dev-once")).start()
    yield p
    p.stop()


@pytest.fixture(scope="module", params=["native", "pure"])
def wire_impl(request):
    """Runs a module's tests once on the compiled wire functions and once on their pure
    twins (ledgermq/wire/native.py), whatever LEDGERMQ_PURE says: every name bound to a
    twin in a loaded ledgermq module is pointed at the asked implementation."""
    import sys
    from ledgermq.wire import native
    if request.param == "native" and native._native is None:
        pytest.skip("the compiled module is not built (no C compiler at install time)")
    with pytest.MonkeyPatch.context() as mp:
        for pure, compiled in native.TWINS.values():
            want = compiled if request.param == "native" else pure
            for mod in [m for n, m in sys.modules.items() if n.startswith("ledgermq")]:
                for attr, val in list(vars(mod).items()):
                    if val is pure or (compiled is not None and val is compiled):
                        mp.setattr(mod, attr, want)
        yield request.param
