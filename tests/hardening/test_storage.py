"""Disk full and a read-only data directory.

The data directory is a small tmpfs mounted for the test (root only; skipped
otherwise). A full disk mid-run: new turns are refused with a clear
``unavailable`` error on every surface (Pheby maps it to its ``not_found``
code, with the same message), the server keeps serving, and once space is
free again turns work and are kept; the database never corrupts. A
read-only data directory at start: exit 2 with a one-line reason.

A data directory that turns read-only *while* the server runs cannot be
made here: Linux refuses ``mount -o remount,ro`` while SQLite holds the file
open for writing (EBUSY), so that case is covered by "full" (the same
SQLite error path) and "read-only at start".
"""

from __future__ import annotations

import os
import sqlite3
import subprocess

import pytest

from tests.waiting import until, until_sync

from .clients import LoomiClient, PhebyClient, lvmh_api
from .proc import count_rows, wait_rows
from .summary import SUMMARY

pytestmark = pytest.mark.hardening


def _mount_tmpfs(path: str, size: str) -> None:
    os.makedirs(path, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", path],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")


def _umount(path: str) -> None:
    try:  # busy while the stopped server's files are still being released
        until_sync(lambda: subprocess.run(["umount", path], capture_output=True).returncode == 0, 4, "umount",
                   interval=0.2)
    except AssertionError:
        pass


def integrity(path: str) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def fill(path: str) -> int:
    """Write a filler file until the filesystem is full; its size."""
    n = 0
    # unbuffered: a buffered file keeps the tail of a short write and fails again when closed
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                written = f.write(b"\0" * 65536)
                if not written:
                    break
                n += written
        except OSError:
            pass
    return n


async def test_disk_full_mid_run(bridge_factory):
    srv = bridge_factory("diskfull", start=False)
    _mount_tmpfs(srv.data_dir, "4m")
    try:
        await _disk_full(srv)
    finally:
        srv.stop()
        _umount(srv.data_dir)


async def _disk_full(srv) -> None:
    ports = srv.start()
    pheby = await PhebyClient.connect(ports["pheby"])
    device, loomi = await LoomiClient.pair(ports["loomi"])
    cid = await pheby.create("disk full")
    kept = []
    for i in range(3):
        done = await pheby.run(cid, f"before {i}")
        assert done[-1]["status"] == "completed"
        kept += [f"before {i}", f"Echo: before {i}"]

    # durability follows delivery by a few milliseconds (the store is never on the hot path): what
    # is queued when the disk fills fails with its batch, so fill it once those turns are on disk
    await wait_rows(srv.db_path(), "SELECT count(*) FROM messages WHERE conversation_id=?", (cid,), len(kept))
    filler = os.path.join(srv.data_dir, "filler")
    fill(filler)
    SUMMARY.fault("disk full")
    # keep talking: within a few turns (the first may run before a write has failed) sends are refused
    refused = None
    accepted_while_full = 0
    for i in range(30):
        rid = f"full{i}"
        await pheby.send({"type": "chat.send", "conversation_id": cid, "text": f"while full {i} " + "z" * 4000,
                          "request_id": rid})
        frames = await pheby.until(lambda f: (f.get("request_id") == rid and f["type"] == "error")
                                   or (f["type"] == "run.finished" and f["conversation_id"] == cid), 30)
        if frames[-1]["type"] == "error":
            refused = frames[-1]
            break
        accepted_while_full += 1
        # this turn's writes were tried: committed, or the server logged the failed commit
        await until(lambda: "store commit failed" in srv.stderr() or "store write failed" in srv.stderr()
                    or count_rows(srv.db_path(), "SELECT count(*) FROM messages WHERE conversation_id=? AND text LIKE ?",
                                  (cid, f"while full {i} %")) >= 1, 30, "the turn's writes tried")
    assert refused is not None, "a full disk was never reported"
    assert "cannot save" in refused["error"]["message"], refused
    ack = await loomi.request("session.send", {"task_id": cid, "text": "from loomi while full"})
    assert ack["type"] == "error" and ack["payload"]["code"] == "unavailable", ack
    assert "cannot save" in ack["payload"]["message"]
    api = lvmh_api(ports["lvmh"])
    try:
        status, body = await api.post(f"/api/sessions/{cid}/prompt", {"message": "from the web while full"})
        assert status == 503 and "cannot save" in body["error"], (status, body)
        # reads still work
        status, sessions = await api.get("/api/sessions")
        assert status == 200 and any(s["id"] == cid for s in sessions)
    finally:
        await api.close()
    hist = await pheby.open(cid)
    assert hist["run"] is None

    # space again: turns work and are kept
    os.unlink(filler)
    done = await pheby.run(cid, "after the disk had room again")
    assert done[-1]["status"] == "completed"
    kept += ["after the disk had room again", "Echo: after the disk had room again"]
    await pheby.close()
    await loomi.close()
    assert srv.stop() == 0
    assert integrity(srv.db_path()) == "ok"
    SUMMARY.note(f"disk full: {accepted_while_full} turn(s) ran before a failed write was seen (not kept); "
                 f"then refused with 'unavailable' on Pheby, Loomi and lvmh (503)")

    # the restart sees everything that was written before and after
    ports = srv.start()
    pheby = await PhebyClient.connect(ports["pheby"])
    texts = [m["text"] for m in (await pheby.open(cid))["messages"]]
    missing = [t for t in kept if t not in texts]
    SUMMARY.events(len(kept), len(missing))
    assert not missing, missing
    await pheby.close()
    out = srv.all_output()
    assert "Traceback" not in out, out[out.find("Traceback") - 500: out.find("Traceback") + 2000]


async def test_read_only_data_dir_at_start(bridge_factory):
    srv = bridge_factory("readonly", start=False)
    _mount_tmpfs(srv.data_dir, "8m")
    try:
        srv.start()
        assert srv.stop() == 0
        r = subprocess.run(["mount", "-o", "remount,ro", srv.data_dir], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        rc = srv.run_to_exit()
        err = srv.stderr().strip()
        assert rc == 2, err
        assert "Traceback" not in err
        assert err.splitlines()[-1].startswith("agent-bridge: cannot open the database in"), err
        SUMMARY.fault("read-only data directory at start")
        subprocess.run(["mount", "-o", "remount,rw", srv.data_dir], check=True)
        assert integrity(srv.db_path()) == "ok"
    finally:
        _umount(srv.data_dir)
