"""Files that hold secrets (#31): the cluster secret, the ACL file with its secret keys,
TLS private keys are created readable by their owner only from the start (0600 at
creation), never widened first and narrowed afterwards by a chmod, even over an older,
world-readable file of the same name."""
import os
import stat

import pytest

from ledgermq.localcluster.certs import CertAuthority
from ledgermq.localcluster.acl import make_cluster_acl
from ledgermq.peer_auth.core import write_secret


@pytest.fixture
def no_chmod(monkeypatch):
    calls = []
    monkeypatch.setattr(os, "chmod", lambda *a, **k: calls.append(a))
    monkeypatch.setattr("pathlib.Path.chmod", lambda self, *a, **k: calls.append(self))
    return calls


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_secret_files_are_0600_from_the_start(tmp_path, no_chmod):
    old = tmp_path / "acl"
    old.mkdir()
    (old / "plain_acl.yml").write_text("old")
    acl = make_cluster_acl(tmp_path)
    secret = write_secret(tmp_path / "cluster.secret")
    ca = CertAuthority.create(tmp_path / "ca")
    for path in (acl["aclFile"], acl["secretKeyFile"], secret, ca.key_path):
        assert mode(path) == 0o600, (path, oct(mode(path)))
    assert not no_chmod, no_chmod
