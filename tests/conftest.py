from tests.dev_process import dev  # noqa: F401  (the `dev` fixture for every test package)

import pytest  # noqa: E402

from tests.dev_process import DevProcess  # noqa: E402


@pytest.fixture(scope="module")
def dev_once(tmp_path_factory):
    """One `ledgermq dev` process shared by a module's tests (e.g. property tests)."""
    p = DevProcess(tmp_path_factory.mktemp("dev-once")).start()
    yield p
    p.stop()
