"""``agent-bridge loomi pair|devices|revoke``: talk to the running server over loopback.

The commands find the server's Loomi port in ``<data-dir>/run/ports.json`` and
call its loopback-only endpoints with the admin key the server wrote to
``<data-dir>/run/admin.key`` (so only the owner of the data directory can pair,
list or revoke: docs/security.md). ``devices`` and ``revoke`` fall back to the
database when no server is running (``revoke`` then has no socket to close),
holding the data directory's lock for that work (``bridge_core/kit/datadir.py``): a
``serve`` started meanwhile exits at once naming this command's pid (run it
again: the command takes milliseconds), and a server that holds the directory
but does not answer (starting, or without a Loomi front end) is never worked
around behind its back. An offline ``revoke`` removes the device's push subscriptions
and decision tokens with it (revocation.py).
"""

from __future__ import annotations

import argparse
import functools
import datetime
import json
import os
import sys
import hashlib
import http.client
import ssl
from typing import Any, Callable, Optional, TypeVar

from bridge_core.kit import datadir, qr
from bridge_core.kit.remote import undialable_reason
from bridge_core.kit.running import command_line, not_running, server_running
from bridge_core.model.redact import fingerprint
from bridge_core.kit.security import admin_key_path, is_loopback, read_admin_key
from bridge_core.model.terminal import printable

from . import devices as devices_mod
from .revocation import offline_revoke

TIMEOUT = 10.0
T = TypeVar("T")


class NotRunning(Exception):
    pass


class ServerError(Exception):
    pass


def add_parser(subparsers: Any, common_options: Any, build_config: Callable[..., Any]) -> None:
    """``agent-bridge loomi ...``; ``build_config``: the host's (its front ends' parts assembled)."""
    loomi = subparsers.add_parser("loomi", help="Loomi phones: pair a device, list and revoke devices",
                                  description="Loomi phones (Android, paired by a QR code): pair, list, revoke.")
    common_options(loomi)
    sub = loomi.add_subparsers(dest="loomi_command", metavar="COMMAND")

    what = "print a one-time pairing QR code (the server must be running)"
    pair = sub.add_parser("pair", help=what, description=what[0].upper() + what[1:] + ".")
    common_options(pair)
    pair.add_argument("--json", action="store_true", help="print only the QR payload, as one JSON line")
    pair.add_argument("--ttl", type=float, default=None, metavar="SECONDS",
                      help="token lifetime (default 300, or [loomi] pair_ttl)")
    pair.set_defaults(func=functools.partial(cmd_pair, build_config=build_config))

    devs = sub.add_parser("devices", help="list paired devices",
                          description="List the paired devices (from the database when the server is not running).")
    common_options(devs)
    devs.add_argument("--json", action="store_true", help="print a JSON list")
    devs.set_defaults(func=functools.partial(cmd_devices, build_config=build_config))

    revoke = sub.add_parser("revoke", help="revoke a device; its open sockets close at once",
                            description="Revoke a device: its credential, push subscriptions and decision links "
                                        "stop working, and its open sockets close at once.")
    common_options(revoke)
    revoke.add_argument("device_id", metavar="DEVICE_ID")
    revoke.set_defaults(func=functools.partial(cmd_revoke, build_config=build_config))

    def usage(args: argparse.Namespace) -> int:
        loomi.print_help()
        return 2

    loomi.set_defaults(func=usage)


# --- talking to the running server -------------------------------------------------


def _data_dir(args: argparse.Namespace, build_config: Callable[..., Any]) -> str:
    cfg = build_config({"data_dir": getattr(args, "data_dir", None), "config": getattr(args, "config", None)},
                       with_secrets=False)
    return cfg.data_dir


def _endpoint(data_dir: str) -> tuple[int, bool, str]:
    """(port, tls, certificate fingerprint) of the running server's Loomi front end."""
    run = os.path.join(data_dir, "run")
    try:  # written by the Loomi front end itself: knows TLS and the certificate pin
        with open(os.path.join(run, "loomi.json"), "r", encoding="utf-8") as f:
            info = json.load(f)
        if isinstance(info, dict) and isinstance(info.get("port"), int):
            return info["port"], bool(info.get("tls")), str(info.get("fp") or "")
    except (OSError, ValueError):
        pass
    path = os.path.join(run, "ports.json")
    try:
        with open(path, "r", encoding="utf-8") as f:
            ports = json.load(f)
    except (OSError, ValueError):
        raise NotRunning(not_running(data_dir) if not server_running(data_dir)[0] else
                         f"the agent-bridge on {data_dir} has not written {path} yet: it is starting; try again")
    port = ports.get("loomi") if isinstance(ports, dict) else None
    if not isinstance(port, int):
        raise NotRunning(f"the agent-bridge running on {data_dir} has no Loomi front end: restart it with "
                         f"{command_line('serve', data_dir)} --adapters ...,loomi")
    return port, False, ""


def _admin_key(data_dir: str) -> str:
    try:
        key = read_admin_key(data_dir)
    except PermissionError:
        raise ServerError(f"cannot read {admin_key_path(data_dir)}: only the owner of the data directory "
                          "may pair, list or revoke devices")
    except OSError as exc:
        raise ServerError(f"cannot read {admin_key_path(data_dir)}: {exc.strerror or exc}")
    if not key:
        raise NotRunning(not_running(data_dir))
    return key


def _loopback_target(data_dir: str) -> str:
    """Where the CLI dials the Loomi port: its bound address when that is a loopback one
    (``--host 127.0.0.2``), else 127.0.0.1 (a wildcard bind includes it). Always on loopback."""
    try:
        with open(os.path.join(data_dir, "run", "loomi.json"), "r", encoding="utf-8") as f:
            host = str(json.load(f).get("host") or "")
    except (OSError, ValueError, AttributeError):
        host = ""
    return host if host and host != "localhost" and is_loopback(host) else "127.0.0.1"


def _call(data_dir: str, method: str, path: str, body: Optional[dict] = None) -> tuple[int, Any]:
    """One request on loopback (never through a proxy) with the admin key; with TLS the
    certificate must match the pin. The ``Host`` is always 127.0.0.1 (the loopback-only rule)."""
    port, tls, fp = _endpoint(data_dir)
    key = _admin_key(data_dir)
    target = _loopback_target(data_dir)
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # verified below against the pinned fingerprint instead
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(target, port, timeout=TIMEOUT, context=ctx)
    else:
        conn = http.client.HTTPConnection(target, port, timeout=TIMEOUT)
    try:
        conn.connect()
        if tls:
            der = conn.sock.getpeercert(binary_form=True)  # type: ignore[union-attr]
            if not fp or not der or hashlib.sha256(der).hexdigest() != fp:
                raise ServerError("the server on 127.0.0.1 does not present the configured certificate")
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data,
                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}",
                              "Host": f"127.0.0.1:{port}"})
        resp = conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw or b"null")
        except ValueError:
            return resp.status, None
    except (OSError, http.client.HTTPException) as exc:
        raise NotRunning(f"agent-bridge is not answering on {target}:{port} ({exc}); `loomi pair` needs the Loomi "
                         "port on loopback: bind --host 0.0.0.0 (or a loopback address), not one LAN address")
    finally:
        conn.close()


def _offline(data_dir: str, role: str, why: NotRunning, work: Callable[[str], T]) -> T:
    """``work(data_dir)`` on the database when no server answered (``why``), under the data
    directory's lock; ``ServerError`` when a live process holds it (nothing read or written)."""
    try:
        owned = datadir.hold(data_dir, role, create=False)
    except FileNotFoundError:  # no data directory: no database either, nothing to guard
        return work(data_dir)
    except datadir.DataDirBusy as exc:
        raise ServerError(f"{exc.message}; it does not answer here ({why})")
    with owned:
        return work(data_dir)


def _error_text(body: Any) -> str:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message", "error"))
    return "unexpected answer"


# --- pair -------------------------------------------------------------------------


render_qr, _write_qr = qr.render_qr, qr.write_qr  # the one renderer (bridge_core/kit/qr.py)


def tls_line(url: str, fp: str) -> str:
    """What ``pair`` says about the transport: never "none" next to a wss:// URL."""
    if not url.startswith("wss://"):
        return "none (plain ws://)"
    if fp:
        return f"wss, certificate pinned (sha256 {fp})"
    return "wss, no pin: the certificate must chain to a public CA"


def cmd_pair(args: argparse.Namespace, build_config: Callable[..., Any]) -> int:
    data_dir = _data_dir(args, build_config)
    if not server_running(data_dir)[0]:  # a killed server's run/ files are no server (bridge_core/kit/running.py)
        print(f"agent-bridge: {not_running(data_dir)}", file=sys.stderr)
        return 1
    body = {} if args.ttl is None else {"ttl": args.ttl}
    try:
        status, answer = _call(data_dir, "POST", "/internal/pair/new", body)
    except (NotRunning, ServerError) as exc:
        print(f"agent-bridge: {exc}", file=sys.stderr)
        return 1
    if status != 200 or not isinstance(answer, dict) or "payload" not in answer:
        print(f"agent-bridge: pairing refused: {_error_text(answer)}", file=sys.stderr)
        return 1
    p = answer["payload"]
    payload = {"v": p["v"], "url": p["url"], "token": p["token"], "name": p["name"], "fp": p["fp"]}
    line = json.dumps(payload, separators=(",", ":"))
    if args.json:
        print(line, flush=True)
        return 0
    _write_qr(render_qr(line), sys.stdout)
    ttl = answer.get("ttl")
    print("Scan this code with the Loomi app to pair a device.")
    print(f"  server:  {payload['url']}")
    print(f"  name:    {payload['name']}")
    print(f"  tls:     {tls_line(payload['url'], payload['fp'])}")
    reason = undialable_reason(payload["url"])
    if reason:
        print(f"agent-bridge: warning: a phone cannot dial {payload['url']} ({reason}); serve with --public-url "
              "loomi=wss://<a name phones reach>/ws (docs/remote-access.md)", file=sys.stderr)
    print(f"  expires: in {ttl:g} s; single use (token {fingerprint(payload['token'])})" if isinstance(ttl, (int, float))
          else f"  single use (token {fingerprint(payload['token'])})")
    sys.stdout.flush()
    return 0


# --- devices / revoke -------------------------------------------------------------------


def _when(ts: Optional[float]) -> str:
    if not ts:
        return "-"
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def cmd_devices(args: argparse.Namespace, build_config: Callable[..., Any]) -> int:
    data_dir = _data_dir(args, build_config)
    note = None
    try:
        status, answer = _call(data_dir, "GET", "/internal/devices")
        if status != 200 or not isinstance(answer, dict):
            print(f"agent-bridge: {_error_text(answer)}", file=sys.stderr)
            return 1
        items = answer["devices"]
    except ServerError as exc:
        print(f"agent-bridge: {exc}", file=sys.stderr)
        return 1
    except NotRunning as why:
        try:
            items = _offline(data_dir, "loomi devices", why, devices_mod.offline_list)
        except ServerError as exc:
            print(f"agent-bridge: {exc}", file=sys.stderr)
            return 1
        note = "agent-bridge is not running: devices read from the database, none online"
    keys = ("device_id", "name", "model", "os", "app_version", "paired_at", "last_seen", "online")
    items = [{k: d.get(k) for k in keys} for d in items]
    if args.json:
        print(json.dumps(items), flush=True)
        return 0
    if note:
        print(note, file=sys.stderr)
    if not items:
        print("no paired devices (pair one with `agent-bridge loomi pair`)")
        return 0
    rows = [("DEVICE ID", "NAME / MODEL", "PAIRED", "LAST SEEN", "ONLINE")]
    for d in items:
        # the phone chose its name and model: never an escape sequence into the admin's terminal
        label = printable(" / ".join(dict.fromkeys(str(x) for x in (d["name"], d["model"]) if x))) or "-"
        rows.append((d["device_id"], label, _when(d["paired_at"]), _when(d["last_seen"]),
                     "yes" if d["online"] else "no"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


def cmd_revoke(args: argparse.Namespace, build_config: Callable[..., Any]) -> int:
    data_dir = _data_dir(args, build_config)
    device_id = args.device_id
    try:
        status, answer = _call(data_dir, "POST", "/internal/devices/revoke", {"device_id": device_id})
        if status == 404:
            revoked = False
        elif status != 200:
            print(f"agent-bridge: {_error_text(answer)}", file=sys.stderr)
            return 1
        else:
            revoked = True
    except ServerError as exc:
        print(f"agent-bridge: {exc}", file=sys.stderr)
        return 1
    except NotRunning as why:
        try:
            revoked = _offline(data_dir, "loomi revoke", why, lambda d: offline_revoke(d, device_id))
        except ServerError as exc:
            print(f"agent-bridge: {exc}", file=sys.stderr)
            return 1
    if not revoked:
        print(f"agent-bridge: no paired device {device_id}", file=sys.stderr)
        return 1
    print(f"revoked device {device_id}")
    return 0
