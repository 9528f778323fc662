"""Certificates made in the test with ``cryptography``: self-signed or from a throwaway CA, with the
names the test needs, and the broken pairs a user meets (swapped, encrypted, mismatched)."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
from typing import Optional

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


class Cert:
    def __init__(self, cert_path: str, key_path: str, der: bytes):
        self.cert, self.key, self.der = cert_path, key_path, der

    @property
    def fp(self) -> str:
        return hashlib.sha256(self.der).hexdigest()


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    out: list = []
    for n in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            out.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(out)


def make_cert(directory: str, names: tuple = ("localhost", "127.0.0.1"), stem: str = "server",
              days: int = 30, password: Optional[bytes] = None) -> Cert:
    """A self-signed certificate for ``names`` (DNS names and IPs) in ``directory``/``stem``.{crt,key}."""
    os.makedirs(directory, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(_san(list(names)), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = os.path.join(directory, f"{stem}.crt"), os.path.join(directory, f"{stem}.key")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    enc = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc))
    os.chmod(key_path, 0o600)
    return Cert(cert_path, key_path, cert.public_bytes(serialization.Encoding.DER))
