"""A small certificate authority for a cluster's TLS (`ledgermq cluster up --tls`) and
for tests: a CA and the certificates it signs, as PEM files, made with `cryptography`.

Keys are ECDSA P-256 (fast to make and to handshake). A server certificate names every
host its peers dial (IP addresses as IP SANs: clients check the name they connected to).
"""
from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..runtime.files import write_private

VALID_DAYS = 825  # the longest validity clients accept for a server certificate


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ledgermq"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(path: Path, key, password: str | None) -> None:
    encryption = serialization.BestAvailableEncryption(password.encode()) if password \
        else serialization.NoEncryption()
    write_private(path, key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8, encryption))


@dataclass
class CertAuthority:
    cert_path: Path
    key_path: Path

    @classmethod
    def create(cls, directory: Path, name: str = "ledgermq CA") -> "CertAuthority":
        """A new self-signed CA in `directory` (ca.pem, ca-key.pem)."""
        directory.mkdir(parents=True, exist_ok=True)
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
                .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                .add_extension(x509.KeyUsage(
                    digital_signature=False, content_commitment=False,
                    key_encipherment=False, data_encipherment=False, key_agreement=False,
                    key_cert_sign=True, crl_sign=True, encipher_only=False,
                    decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                               critical=False)
                .sign(key, hashes.SHA256()))
        ca = cls(directory / "ca.pem", directory / "ca-key.pem")
        ca.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(ca.key_path, key, None)
        return ca

    def issue(self, directory: Path, name: str, hosts: list[str] | None = None, *,
              password: str | None = None) -> tuple[Path, Path]:
        """(cert, key) files `name.pem`, `name-key.pem` in `directory`, for a server and
        client alike, valid for `hosts` (default: 127.0.0.1 and localhost); the key is
        encrypted with `password` if given (tls.server.keyPassword)."""
        ca_cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
        ca_key = serialization.load_pem_private_key(self.key_path.read_bytes(), None)
        key = ec.generate_private_key(ec.SECP256R1())
        sans: list[x509.GeneralName] = []
        for host in hosts or ["127.0.0.1", "localhost"]:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(_name(name))
                .issuer_name(ca_cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]),
                               critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    ca_key.public_key()), critical=False)
                .sign(ca_key, hashes.SHA256()))
        directory.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = directory / f"{name}.pem", directory / f"{name}-key.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key_path, key, password)
        return cert_path, key_path
