"""A second local process on the same data directory (docs/security.md): one process per data directory.

A second ``serve`` on a directory a live process holds exits at once, non-zero, with one line
naming the directory and the holder's pid, having touched nothing of it: the first's Loomi
journal, its ``run/`` files, its admin key, its ports. A holder killed with -9 holds nothing.
The offline ``loomi devices``/``revoke`` hold the directory for their database work (a serve
started meanwhile fails the same way) and never work behind a live server that does not answer.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys

import orjson
import pytest

from tests.pheby.client import PhebyClient
from tests.waiting import until

from .helpers import PHEBY_SECRET, ROOT, bridges, cli, data_dir_state, loomi_hello, pair_device  # noqa: F401

T = 60.0  # an upper bound for a process to end or a state to show, never a timing assertion


def _run(args: list, env: dict) -> subprocess.CompletedProcess:
    """``agent-bridge ARGS`` to its end (killed past ``T``: a serve that did start must not outlive the test)."""
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=T)


def _again(srv) -> list:
    """The running server's own command on the ports it listens on: the same command run twice."""
    args = srv.command()[3:]
    for name, port in srv.ports.items():
        args[args.index(f"--{name}-port") + 1] = str(port)
    return args


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def _deleted_files(pid: int, data_dir: str) -> list:
    """Files under ``data_dir`` that process ``pid`` holds open though they were deleted (Linux /proc)."""
    fd_dir, found = f"/proc/{pid}/fd", []
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith(data_dir) and target.endswith(" (deleted)"):
            found.append(target)
    return found


async def _a_run_completes(port: int) -> None:
    c = await PhebyClient.connect(port, secret=PHEBY_SECRET)
    try:
        cid = await c.create("one owner")
        await c.send({"type": "chat.send", "conversation_id": cid, "text": "still here?", "request_id": "r1"})
        frames = await c.collect_until("run.finished", timeout=T)
        assert frames[-1]["status"] == "completed", frames[-1]
    finally:
        await c.close()


async def _devices(srv) -> list:
    rc, out, err = await cli("loomi", "devices", "--json", "--data-dir", srv.data_dir, env=srv.env)
    assert rc == 0, err
    return orjson.loads(out)


async def test_a_second_serve_exits_at_once_and_the_first_goes_on(bridges):
    srv = bridges("owner")
    first_phone, _ = await pair_device(srv, "first phone")
    await _a_run_completes(srv.ports["pheby"])  # the journal has taken rows
    before = data_dir_state(srv.data_dir)
    assert any(name.startswith("loomi-journal.") for name in before), before
    second = _run(_again(srv), srv.env)
    # the owner is untouched: no journal file deleted or replaced, run/ and its admin key as they were
    assert data_dir_state(srv.data_dir) == before, second.stderr
    assert _deleted_files(srv.proc.pid, srv.data_dir) == [] and srv.alive
    assert second.returncode == 2 and second.stdout == "", second.stderr
    line = _one_line(second.stderr)
    assert line == (f"agent-bridge: the data directory {srv.data_dir} is in use by pid {srv.proc.pid} "
                    "(agent-bridge serve): one process per data directory")
    # and goes on: `loomi pair` and `loomi devices` reach it, a phone pairs, a run completes
    second_phone, _ = await pair_device(srv, "second phone")
    assert sorted(d["device_id"] for d in await _devices(srv)) == sorted([first_phone, second_phone])
    await _a_run_completes(srv.ports["pheby"])
    assert srv.stop() == 0


async def test_a_holder_killed_with_9_holds_nothing(bridges):
    from bridge_core.kit import datadir

    srv = bridges("killed")
    assert datadir.holder(srv.data_dir) == (srv.proc.pid, "agent-bridge serve")
    old_pid = srv.proc.pid
    srv.kill9()
    assert datadir.holder(srv.data_dir) is None  # its record still names it; the lock went with it
    srv.start()  # the next serve takes the directory over
    assert srv.proc.pid != old_pid and datadir.holder_pid(srv.data_dir) == srv.proc.pid
    await _a_run_completes(srv.ports["pheby"])
    assert srv.stop() == 0
    assert datadir.holder(srv.data_dir) is None  # a clean stop lets go as well


async def test_offline_revoke_holds_the_directory_and_a_serve_meanwhile_fails_cleanly(bridges):
    from bridge_core.kit import datadir

    srv = bridges("offline")
    device_id, credential = await pair_device(srv, "to revoke")
    assert srv.stop() == 0
    db = sqlite3.connect(srv.db_path(), isolation_level=None)
    db.execute("BEGIN IMMEDIATE")  # SQLite's write lock, here: the revoke waits inside its database work
    revoke = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cli", "loomi", "revoke", device_id, "--data-dir", srv.data_dir, cwd=ROOT, env=srv.env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        found = await until(lambda: datadir.holder(srv.data_dir), T, "the offline revoke holding the directory")
        assert found == (revoke.pid, "loomi revoke")
        meanwhile = _run(srv.command()[3:], srv.env)
        assert meanwhile.returncode == 2, meanwhile.stderr
        assert _one_line(meanwhile.stderr) == (f"agent-bridge: the data directory {srv.data_dir} is in use by pid "
                                               f"{revoke.pid} (loomi revoke): one process per data directory")
        assert revoke.returncode is None  # still at its work: the serve failed, it did not wait
    finally:
        db.execute("ROLLBACK")
        db.close()
    out, err = await asyncio.wait_for(revoke.communicate(), T)
    assert revoke.returncode == 0 and out.decode().strip() == f"revoked device {device_id}", err
    assert datadir.holder(srv.data_dir) is None
    srv.start()  # the next serve takes the directory; the device stays revoked
    first, close = await loomi_hello(srv.ports["loomi"], {"device_id": device_id, "credential": credential})
    assert first["type"] == "error" and first["payload"]["code"] == "unauthorized", (first, close)


async def test_offline_commands_never_work_behind_a_live_server(bridges):
    """A serve without a Loomi front end holds the directory: devices and revoke say so and touch nothing."""
    srv = bridges("pheby-only", adapters="pheby")
    for args in (("devices",), ("devices", "--json"), ("revoke", "dev-1")):
        rc, out, err = await cli("loomi", *args, "--data-dir", srv.data_dir, env=srv.env)
        assert rc == 1 and out == "", (args, out, err)
        line = _one_line(err)
        assert f"in use by pid {srv.proc.pid} (agent-bridge serve)" in line and "no Loomi front end" in line, line
    assert srv.alive and srv.stop() == 0


def test_the_lock_is_exclusive_names_its_holder_and_trusts_no_record(tmp_path):
    from bridge_core.kit import datadir
    from bridge_core.model.errors import ConfigError

    d = str(tmp_path / "d")
    assert datadir.holder(d) is None and not os.path.exists(d)  # asking creates nothing
    with datadir.hold(d, "agent-bridge serve") as owned:
        assert owned.held
        assert os.stat(d).st_mode & 0o777 == 0o700 and os.stat(datadir.lock_path(d)).st_mode & 0o777 == 0o600
        assert datadir.holder(d) == (os.getpid(), "agent-bridge serve")
        with pytest.raises(datadir.DataDirBusy) as busy:  # another descriptor, even in this process
            datadir.hold(d, "hermes gateway")
        assert isinstance(busy.value, ConfigError)  # one line and exit 2 from `agent-bridge`
        assert busy.value.code == "data_dir_busy" and busy.value.pid == os.getpid()
        assert busy.value.message == (f"the data directory {d} is in use by pid {os.getpid()} (agent-bridge serve): "
                                      "one process per data directory")
        assert datadir.holder(d) == (os.getpid(), "agent-bridge serve")  # the loser changed nothing
    assert not owned.held and datadir.holder(d) is None
    with open(datadir.lock_path(d)) as f:
        assert f.read() == ""
    with open(datadir.lock_path(d), "w") as f:  # a record nobody holds (a crash's): it decides nothing
        f.write(f"{os.getpid()} a holder that died\n")
    with datadir.hold(d, "agent-bridge serve"):
        assert datadir.holder_pid(d) == os.getpid()
    # a link planted where the lock file goes is not followed (the directory is its owner's, 0700)
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    os.unlink(datadir.lock_path(d))
    os.symlink(target, datadir.lock_path(d))
    with pytest.raises(ConfigError, match="cannot use the data directory"):
        datadir.hold(d)
    assert target.read_text() == "keep"
