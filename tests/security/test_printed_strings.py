"""What reaches the admin's terminal, over real processes: `agent-bridge serve` and its CLI.

Two holes of the issue (docs/security.md, "Secrets" and "Output"):
- ``--store 'postgresql://...?password=...'`` printed the password in the start banner and in
  "cannot reach the store": every password form is masked now (``user:***@``, ``password=***``),
  while the URL itself still connects;
- ``agent-bridge loomi devices`` printed a device's name raw, escape sequences included, so a
  phone could forge rows in the admin's terminal: control characters are stripped, and a normal
  name (accents and all) prints unchanged.
"""

from __future__ import annotations

import re
import subprocess
import sys

import orjson
import pytest

from tests.engines import Postgres, free_port, pg_missing
from tests.hardening.clients import PhebyClient
from tests.hardening.proc import BridgeProcess

from .helpers import bridges, cli, loomi_hello  # noqa: F401

SECRET = "hunter2-store-password"
# C0 (ESC, BEL, CR, BS), DEL, C1 (CSI, OSC) and the bidirectional overrides: none may reach a terminal
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def postgres():
    reason = pg_missing()
    if reason:
        pytest.skip(reason)
    pg = Postgres().start()
    yield pg
    pg.stop()


def _serve_exit(tmp_path, *args) -> tuple[int, str]:
    proc = BridgeProcess(str(tmp_path / "p"), adapters="pheby", extra_args=list(args))
    rc = proc.run_to_exit(timeout=60)
    return rc, proc.all_output()


def test_an_unreachable_store_never_prints_its_password(tmp_path):
    pytest.importorskip("psycopg")
    port = free_port()
    rc, out = _serve_exit(tmp_path, "--store", f"postgresql://bridge@127.0.0.1:{port}/bridge?password={SECRET}")
    lines = out.strip().splitlines()
    assert rc != 0
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"agent-bridge: cannot reach the store postgresql://bridge@127.0.0.1:{port}/bridge"
                               "?password=***: "), lines
    assert "hunter2" not in out


@pytest.mark.parametrize("form", ["query", "userinfo"])
async def test_a_store_url_with_a_password_works_and_prints_masked(postgres, tmp_path, form):
    """The legitimate path: the URL connects (a conversation is stored and read back), and
    neither the banner nor a DEBUG log shows the password."""
    db = postgres.new_database()  # postgresql://postgres@127.0.0.1:PORT/NAME (trust: a password is accepted)
    if form == "query":
        url, shown = f"{db}?password={SECRET}&application_name=bridge", f"{db}?password=***&application_name=bridge"
    else:
        url, shown = db.replace("postgres@", f"postgres:{SECRET}@"), db.replace("postgres@", "postgres:***@")
    srv = BridgeProcess(str(tmp_path), adapters="pheby", extra_args=["--store", url], log_level="DEBUG")
    srv.start()
    try:
        c = await PhebyClient.connect(srv.ports["pheby"])
        try:
            cid = await c.create("masked")
            await c.run(cid, "stored in PostgreSQL")
            history = await c.open(cid)
            assert [m["text"] for m in history["messages"]] == ["stored in PostgreSQL", "Echo: stored in PostgreSQL"]
        finally:
            await c.close()
    finally:
        assert srv.stop() == 0
    out = srv.all_output()
    assert f"store {shown}, bus in-process" in out, out[-2000:]
    assert SECRET not in out


async def _pair(srv, info: dict) -> str:
    rc, out, err = await cli("loomi", "pair", "--json", "--data-dir", srv.data_dir, env=srv.env)
    assert rc == 0, err
    first, _ = await loomi_hello(srv.ports["loomi"], {"token": orjson.loads(out)["token"], "device_info": info})
    assert first is not None and first["type"] == "hello.ok", first
    return first["payload"]["device_id"]


async def test_a_device_name_cannot_drive_the_admins_terminal(bridges):  # noqa: F811
    srv = bridges("names", adapters="loomi")
    evil = "Pixel\x1b[2K\r\x1b[1A\x1b]0;owned\x07\x08\x7f 9\u009b31m\u009d8;;x\u202eevil"
    bad = await _pair(srv, {"name": evil, "model": "Pixel 8\x1b[31m", "os": "Android 15"})
    good = await _pair(srv, {"name": "Émile’s phone 日本", "model": "Pixel 7a"})
    listings = []
    for _ in ("running", "stopped"):  # from the server, then from the database when none runs
        rc, out, err = await cli("loomi", "devices", "--data-dir", srv.data_dir, env=srv.env)
        assert rc == 0, err
        listings.append(out)
        srv.stop()
    for out in listings:
        assert not CONTROL.search(out), repr(out)
        rows = out.splitlines()
        assert len(rows) == 3, rows  # the header and one row per device: no forged row
        [bad_row] = [r for r in rows if r.startswith(bad)]
        assert "Pixel[2K [1A]0;owned 9" in bad_row and "/ Pixel 8[31m" in bad_row
        [good_row] = [r for r in rows if r.startswith(good)]
        assert "Émile’s phone 日本 / Pixel 7a" in good_row  # a normal name prints unchanged
    # the machine-readable listing keeps the names as the phones sent them (JSON-escaped)
    srv.start()
    rc, out, _ = await cli("loomi", "devices", "--json", "--data-dir", srv.data_dir, env=srv.env)
    assert rc == 0 and {d["name"] for d in orjson.loads(out)} == {evil, "Émile’s phone 日本"}
    assert not CONTROL.search(out)


def test_a_log_line_quoting_a_request_path_stays_one_line(tmp_path):
    """A client-chosen string in a log line (a refused request's path) cannot drive the terminal."""
    srv = BridgeProcess(str(tmp_path), adapters="lvmh")
    srv.start()
    try:
        path = "/api/x%1b%5b2K%0d%1b%5d0;owned%07%0aFAKE%20line"
        r = subprocess.run([sys.executable, "-c", "import sys, urllib.request\n"
                            "try: urllib.request.urlopen(sys.argv[1])\nexcept Exception as e: print(e)",
                            f"http://127.0.0.1:{srv.ports['lvmh']}{path}"], capture_output=True, text=True, timeout=30)
        assert "401" in r.stdout, r
    finally:
        assert srv.stop() == 0
    err = srv.stderr()
    [line] = [ln for ln in err.splitlines() if "refused an unauthenticated request" in ln]
    assert "/api/x[2K ]0;owned FAKE line from" in line, line
    assert not CONTROL.search(err) and "\nFAKE" not in err

