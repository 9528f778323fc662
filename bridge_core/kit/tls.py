"""TLS for every listener: the served certificate, its checks and its reload (docs/remote-access.md).

The certificate and key are checked before anything listens, each failure in one line
(swapped, encrypted, mismatched: ``check_key_pair``); ``make_ssl_context`` builds the one
context every front end serves; ``TLSReloader`` reloads it in place when its files change
or on SIGHUP. ``cert_names``, ``name_matches`` and ``chains_to_public_ca`` say what a
client will make of it; ``cert_fingerprint`` is the pin the Loomi QR carries.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import os
import ssl
import warnings
from typing import Any, Optional

from ..bridge.tasks import TaskSet
from ..model.errors import BridgeError, ConfigError

log = logging.getLogger("agent_bridge.frontend")  # the name its log lines have always had


class TLSError(ConfigError):
    """A certificate or key the bridge cannot serve: one line saying what to do."""

    code = "config_error"
    default_message = "Bad TLS certificate or key"
    fatal = True


def _no_password(*_: Any) -> bytes:
    # handed to load_cert_chain: an encrypted key fails at once instead of prompting on the terminal
    raise TLSError("the TLS key is encrypted: give an unencrypted key (openssl pkey -in KEY -out KEY.plain)")


def read_chain(cert_path: str) -> list:
    """The certificates of a PEM file (cryptography objects), first the served one; TLSError otherwise."""
    from cryptography import x509

    try:
        with open(cert_path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise TLSError(f"TLS certificate {cert_path} unreadable: {exc.strerror or exc}")
    if b"-----BEGIN CERTIFICATE-----" not in data:
        hint = " (are --tls-cert and --tls-key swapped?)" if b"PRIVATE KEY-----" in data else ""
        raise TLSError(f"TLS certificate {cert_path} holds no PEM certificate{hint}")
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise TLSError(f"TLS certificate {cert_path} is not a valid PEM certificate: {exc}")


def cert_fingerprint(cert_path: Optional[str]) -> str:
    """SHA-256 of the served (first) certificate of a PEM file, lowercase hex; "" without one."""
    if not cert_path:
        return ""
    from cryptography.hazmat.primitives import serialization

    return hashlib.sha256(read_chain(cert_path)[0].public_bytes(serialization.Encoding.DER)).hexdigest()


def check_key_pair(cert_path: str, key_path: str) -> None:
    """TLSError (one line) for a swapped pair, an encrypted key, a key of another certificate."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    chain = read_chain(cert_path)
    try:
        with open(key_path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise TLSError(f"TLS key {key_path} unreadable: {exc.strerror or exc}")
    if b"PRIVATE KEY-----" not in data:
        hint = " (are --tls-cert and --tls-key swapped?)" if b"-----BEGIN CERTIFICATE-----" in data else ""
        raise TLSError(f"TLS key {key_path} holds no PEM private key{hint}")
    if b"ENCRYPTED" in data.split(b"-----END", 1)[0]:
        raise TLSError(f"TLS key {key_path} is encrypted: give an unencrypted key "
                       "(openssl pkey -in KEY -out KEY.plain), the bridge never prompts for a pass phrase")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise TLSError(f"TLS key {key_path} is encrypted: give an unencrypted key "
                       "(openssl pkey -in KEY -out KEY.plain), the bridge never prompts for a pass phrase")
    except (ValueError, UnsupportedAlgorithm) as exc:  # a corrupt key, or a kind OpenSSL cannot use
        raise TLSError(f"TLS key {key_path} is not a usable private key: {(str(exc).splitlines() or ['?'])[0][:120]}")
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if key.public_key().public_bytes(*fmt) != chain[0].public_key().public_bytes(*fmt):
        raise TLSError(f"TLS key {key_path} does not belong to the certificate {cert_path}")


def make_ssl_context(cert: Optional[str], key: Optional[str]) -> Optional[ssl.SSLContext]:
    """The server context for ``cert``/``key``, checked first (``check_key_pair``): TLSError, never a prompt."""
    if not (cert and key):
        return None
    check_key_pair(cert, key)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        ctx.load_cert_chain(cert, key, password=_no_password)
    except ssl.SSLError as exc:
        raise TLSError(f"cannot serve TLS with {cert} and {key}: {exc.reason or exc}")
    return ctx


def cert_names(cert_path: str) -> list[str]:
    """The DNS names and IP addresses the served certificate is valid for (its SAN; the CN without one)."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    cert = read_chain(cert_path)[0]
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        return [*san.get_values_for_type(x509.DNSName), *(str(a) for a in san.get_values_for_type(x509.IPAddress))]
    except x509.ExtensionNotFound:
        return [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]


def name_matches(names: list[str], host: str) -> bool:
    """Whether ``host`` is one of ``names`` (a ``*.`` wildcard covers one label), case-insensitive."""
    host = host.strip("[]").lower().rstrip(".")
    for n in names:
        n = n.lower().rstrip(".")
        if n == host:
            return True
        if n.startswith("*.") and "." in host and host.split(".", 1)[1] == n[2:]:
            return True
    return False


def cert_expiry(cert_path: str) -> float:
    """When the served certificate expires (epoch seconds)."""
    return read_chain(cert_path)[0].not_valid_after_utc.timestamp()


def chains_to_public_ca(cert_path: str) -> bool:
    """Whether the served chain verifies against this system's public CA store (then a phone needs
    no pin and the Loomi QR's ``fp`` stays empty); False for a self-signed or private-CA certificate."""
    try:
        from cryptography import x509
        from cryptography.x509.verification import DNSName, IPAddress, PolicyBuilder, Store

        chain = read_chain(cert_path)
        paths = ssl.get_default_verify_paths()
        roots: list = []
        if paths.cafile and os.path.exists(paths.cafile):
            with open(paths.cafile, "rb") as f, warnings.catch_warnings():
                warnings.simplefilter("ignore")  # an old root's serial number is not our concern
                roots = x509.load_pem_x509_certificates(f.read())
        if not roots:
            return False
        names = cert_names(cert_path)
        if not names:
            return False
        try:
            subject: Any = IPAddress(ipaddress.ip_address(names[0]))
        except ValueError:
            subject = DNSName(names[0].replace("*.", "x.", 1))
        verifier = PolicyBuilder().store(Store(roots)).build_server_verifier(subject)
        verifier.verify(chain[0], chain[1:])
        return True
    except Exception:
        return False


class TLSReloader:
    """The served context, reloaded in place when its files change (polled) or on ``reload()`` (SIGHUP).

    New connections get the new certificate (the listeners keep the same ``SSLContext``); a pair that
    does not load is refused with one log line and the old certificate stays. Listeners of the new
    fingerprint (``on_change``) are told, so the Loomi QR and ``loomi.json`` follow it.
    """

    def __init__(self, cert: str, key: str, interval: float = 2.0):
        self.cert, self.key, self.interval = cert, key, interval
        self.context = make_ssl_context(cert, key)
        self.fingerprint = cert_fingerprint(cert)
        self._stamp = self._files_stamp()
        self._listeners: list = []
        self.tasks = TaskSet("tls-reload")

    def _files_stamp(self) -> tuple:
        out = []
        for p in (self.cert, self.key):
            try:
                st = os.stat(p)
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)

    def on_change(self, listener: Any) -> None:
        self._listeners.append(listener)

    def reload(self, why: str = "SIGHUP") -> bool:
        """Load the files again (after checking them); True when the certificate changed."""
        self._stamp = self._files_stamp()
        try:
            check_key_pair(self.cert, self.key)
            assert self.context is not None
            self.context.load_cert_chain(self.cert, self.key, password=_no_password)
            new_fp = cert_fingerprint(self.cert)
        except (TLSError, ssl.SSLError, OSError) as exc:
            msg = exc.message if isinstance(exc, BridgeError) else str(exc)
            log.error("TLS reload (%s) refused, still serving the certificate sha256 %s: %s", why,
                      self.fingerprint, msg)
            return False
        if new_fp == self.fingerprint:
            log.info("TLS reload (%s): same certificate, sha256 %s", why, new_fp)
            return False
        log.warning("TLS certificate reloaded (%s): new sha256 %s (was %s); phones pinning the old one "
                    "must pair again unless a proxy presents the pinned certificate", why, new_fp, self.fingerprint)
        self.fingerprint = new_fp
        for listener in self._listeners:
            try:
                listener(new_fp)
            except Exception:
                log.exception("a TLS reload listener failed")
        return True

    def poll(self) -> bool:
        """One look at the files; a changed stamp reloads them."""
        if self._files_stamp() != self._stamp:
            return self.reload("files changed")
        return False

    def start(self) -> None:
        if self.interval <= 0:
            return

        async def watch() -> None:
            while True:
                await asyncio.sleep(self.interval)
                self.poll()

        self.tasks.spawn(watch(), name="tls-watch")

    async def stop(self) -> None:
        await self.tasks.close()
