"""What reaches the admin's terminal, over real processes: `agent-bridge serve` and its CLI.

``--store 'postgresql://...?password=...'`` printed the password in the start banner and in
"cannot reach the store": every password form is masked now (``user:***@``, ``password=***``),
while the URL itself still connects (docs/security.md, "Secrets").
"""

from __future__ import annotations

import pytest

from tests.engines import Postgres, free_port, pg_missing
from tests.hardening.clients import PhebyClient
from tests.hardening.proc import BridgeProcess

SECRET = "hunter2-store-password"


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

