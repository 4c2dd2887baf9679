"""`cluster up --acl`: RocketMQ's ACL 1.0 on every broker of a local cluster. One admin
account (a random secret key, in DIR/acl/, mode 0600) that the brokers also sign their
own requests with; `cluster status` signs with it, and users export it
(LEDGERMQ_ACCESS_KEY / LEDGERMQ_SECRET_KEY) or add accounts to DIR/acl/plain_acl.yml,
which the brokers read again when it changes."""
from __future__ import annotations

import secrets
from pathlib import Path

from ..remoting.signing import signer
from ..runtime.files import write_private

ADMIN_KEY = "ledgermq-admin"


def make_cluster_acl(d: Path) -> dict:
    """Write the account file and the admin secret; what cluster.json records."""
    acl_dir = d / "acl"
    acl_dir.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_hex(16)
    key_file = acl_dir / "admin.secret"
    write_private(key_file, (secret + "\n").encode())
    acl_file = acl_dir / "plain_acl.yml"
    write_private(acl_file, (
        "# RocketMQ's ACL 1.0 (plain_acl.yml): edit to add accounts; brokers re-read it\n"
        "accounts:\n"
        f"  - accessKey: {ADMIN_KEY}\n"
        f"    secretKey: {secret}\n"
        "    admin: true\n"
        "    defaultTopicPerm: PUB|SUB\n"
        "    defaultGroupPerm: PUB|SUB\n").encode())
    return {"accessKey": ADMIN_KEY, "secretKeyFile": str(key_file), "aclFile": str(acl_file)}


def acl_broker_conf(acl: dict) -> dict[str, str]:
    """broker.conf keys: ACL on, and the admin account for the broker's own requests."""
    return {"aclEnable": "true", "aclFile": acl["aclFile"], "accessKey": acl["accessKey"],
            "secretKey": _secret(acl)}


def cluster_signer(state: dict):
    """What signs a tool's requests to this cluster (None without --acl)."""
    acl = state.get("acl")
    return signer(acl["accessKey"], _secret(acl)) if acl else None


def _secret(acl: dict) -> str:
    return Path(acl["secretKeyFile"]).read_text().strip()
