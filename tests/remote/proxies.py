"""Real reverse proxies in front of ``agent-bridge serve``, configured from docs/remote-access.md.

``doc_block(name)`` is the fenced block marked ``remote-access:<name>`` in that page; the
``Nginx`` and ``Caddy`` runners fill in its ports and certificate paths, and run Debian's binary
in the foreground with its own config, pid, log and data files in a temporary directory, on
loopback (the proxy listens on ``PROXY_HOST``, a loopback address that is not a loopback
``Host`` name, like a LAN address). Without the binary the tests skip (``tests/peers.py``), and
fail under CI. Nothing here touches a system service.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from typing import Optional

import pytest

from tests.peers import PROXY_BINARIES, missing_proxy
from tests.waiting import until_sync

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "remote-access.md")
PROXY_HOST = "127.0.0.2"  # where the proxies listen: a "LAN address" the bridge's loopback rules do not trust
FRONT_ENDS = ("pheby", "loomi", "lvmh")
DOC_PORTS = {"pheby": 8620, "loomi": 8621, "lvmh": 8686}  # the bridge ports the page's configs name


def doc_block(name: str) -> str:
    """The body of the fenced block whose info string carries ``remote-access:<name>``."""
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^```[^\n]*\bremote-access:" + re.escape(name) + r"\b[^\n]*\n(.*?)^```", text, re.S | re.M)
    assert m, f"docs/remote-access.md has no block marked remote-access:{name}"
    return m.group(1)


def require(proxy: str) -> str:
    """The proxy's binary; a skip naming the peer when it is missing (a failure under CI)."""
    reason = missing_proxy(proxy)
    if reason:
        pytest.skip(reason)
    return PROXY_BINARIES[proxy]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def upstreams(conf: str, bridge_ports: dict) -> str:
    """The page's bridge ports (127.0.0.1:8620 ...) replaced by the test bridge's."""
    for name, port in DOC_PORTS.items():
        conf = conf.replace(f"127.0.0.1:{port}", f"127.0.0.1:{bridge_ports[name]}")
    return conf


class ProxyProcess:
    name = "proxy"

    def __init__(self, base: str):
        self.base = base
        os.makedirs(base, exist_ok=True)
        os.chmod(base, 0o755)
        self.ports = {n: free_port(PROXY_HOST) for n in FRONT_ENDS}
        self.proc: Optional[subprocess.Popen] = None
        self.log_path = os.path.join(base, f"{self.name}.out.log")

    def url(self, name: str) -> str:
        if name == "lvmh":
            return f"https://{PROXY_HOST}:{self.ports[name]}"
        return f"wss://{PROXY_HOST}:{self.ports[name]}/ws"

    def public_url_option(self) -> str:
        return ",".join(f"{n}={self.url(n)}" for n in FRONT_ENDS)

    def _run(self, argv: list, env: Optional[dict] = None) -> None:
        out = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, cwd=self.base, start_new_session=True)
        out.close()

        def up() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.output()[-3000:]}")
            return all(listening(PROXY_HOST, p) for p in self.ports.values())

        until_sync(up, 30, f"{self.name} listening", interval=0.05)

    def output(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class Nginx(ProxyProcess):
    """nginx in the foreground (``daemon off``) with the page's server blocks, a pid file, logs and
    temp paths of its own; ``listen 443 ssl`` becomes one loopback port per front end."""

    name = "nginx"

    def __init__(self, base: str, cert: str, key: str, snippet: Optional[str] = None):
        super().__init__(base)
        self.cert, self.key = cert, key
        self.snippet = snippet if snippet is not None else doc_block("nginx")
        self.access_log = os.path.join(base, "access.log")

    def config(self, bridge_ports: dict) -> str:
        conf = upstreams(self.snippet, bridge_ports)
        for name in FRONT_ENDS:  # the server blocks are in the page's order: pheby, loomi, lvmh
            assert "listen 443 ssl;" in conf
            conf = conf.replace("listen 443 ssl;", f"listen {PROXY_HOST}:{self.ports[name]} ssl;", 1)
        conf = conf.replace("/etc/ssl/agent-bridge/fullchain.pem", self.cert)
        conf = conf.replace("/etc/ssl/agent-bridge/privkey.pem", self.key)
        b = self.base
        user = "user root;\n" if os.geteuid() == 0 else ""  # workers read the test's files in its tmp dirs
        return (f"{user}daemon off;\nworker_processes 1;\npid {b}/nginx.pid;\nerror_log {b}/error.log info;\n"
                "events { worker_connections 1024; }\n"
                f"http {{\n access_log {self.access_log};\n client_body_temp_path {b}/body;\n"
                f" proxy_temp_path {b}/proxy;\n fastcgi_temp_path {b}/fastcgi;\n uwsgi_temp_path {b}/uwsgi;\n"
                f" scgi_temp_path {b}/scgi;\n{conf}\n}}\n")

    def start(self, bridge_ports: dict) -> "Nginx":
        binary = require("nginx")
        path = os.path.join(self.base, "nginx.conf")
        with open(path, "w") as f:
            f.write(self.config(bridge_ports))
        self._run([binary, "-p", self.base, "-e", os.path.join(self.base, "error.log"), "-c", path])
        return self

    def output(self) -> str:
        text = super().output()
        try:
            with open(os.path.join(self.base, "error.log"), errors="replace") as f:
                text += f.read()
        except OSError:
            pass
        return text


class Caddy(ProxyProcess):
    """Caddy in the foreground (``caddy run``) with the page's LAN Caddyfile (``tls internal``), its
    own data directory (so its local CA is the test's), no admin endpoint, nothing installed into a
    trust store, and its HTTP port on loopback."""

    name = "caddy"

    def __init__(self, base: str, block: str = "caddy-lan"):
        super().__init__(base)
        self.block = block
        self.data = os.path.join(base, "data")
        self.http_port = free_port(PROXY_HOST)

    @property
    def root_ca(self) -> str:
        return os.path.join(self.data, "caddy", "pki", "authorities", "local", "root.crt")

    def caddyfile(self, bridge_ports: dict) -> str:
        conf = upstreams(doc_block(self.block), bridge_ports)
        for name, doc_port in zip(FRONT_ENDS, (8443, 8444, 8445)):
            conf = conf.replace(f"https://192.168.1.20:{doc_port}", f"https://{PROXY_HOST}:{self.ports[name]}")
        glob = ("{\n\tadmin off\n\tskip_install_trust\n\tauto_https disable_redirects\n"
                f"\thttp_port {self.http_port}\n\tdefault_bind {PROXY_HOST}\n}}\n\n")
        return glob + conf

    def env(self) -> dict:
        return dict(os.environ, HOME=self.base, XDG_DATA_HOME=self.data, XDG_CONFIG_HOME=os.path.join(self.base, "config"))

    def start(self, bridge_ports: dict) -> "Caddy":
        binary = require("caddy")
        path = os.path.join(self.base, "Caddyfile")
        with open(path, "w") as f:
            f.write(self.caddyfile(bridge_ports))
        self._run([binary, "run", "--config", path, "--adapter", "caddyfile"], env=self.env())
        until_sync(lambda: os.path.exists(self.root_ca), 20, "Caddy's local CA")
        return self

    def adapt(self, text: str) -> subprocess.CompletedProcess:
        """``caddy adapt``: parse a Caddyfile into Caddy's JSON config (no listener, no certificate)."""
        binary = require("caddy")
        path = os.path.join(self.base, "adapt.Caddyfile")
        with open(path, "w") as f:
            f.write(text)
        return subprocess.run([binary, "adapt", "--config", path, "--adapter", "caddyfile", "--validate"],
                              capture_output=True, text=True, timeout=60, env=self.env())


__all__ = ["Caddy", "Nginx", "PROXY_HOST", "doc_block", "free_port", "require"]
