"""Another account on the machine reads nothing of the bridge's (docs/security.md, "Secrets"), over
real sockets against ``agent-bridge serve`` (a subprocess) started under umask 022.

The attack of the issue: the data directory pre-existed 0755 with ``attachments/`` 0755, so the
attachment files (0644) were readable by every account. Now every directory the bridge owns is 0700
and every file it writes 0600, whatever was there: the database and its WAL, attachments, Loomi's
journal, secrets, the admin key and the run files; a file an earlier version left 0644 loses its
group and other bits too. The legitimate path beside it: the owner reads the files, the attachment
downloads, the bridge starts again on its own directory.
"""

from __future__ import annotations

import os
import stat
import sys

import aiohttp

from tests.hardening.clients import PhebyClient
from tests.hardening.proc import PHEBY_SECRET, BridgeProcess

OLD_ATTACHMENT = "0123456789abcdef0123456789abcdef"  # a file an earlier version wrote 0644


class Umask022Bridge(BridgeProcess):
    """``serve`` under the common umask 022 (new files 0644, directories 0755 unless the bridge says otherwise)."""

    def command(self) -> list:
        umask = "import os, sys; os.umask(0o022); os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
        return [sys.executable, "-c", umask, *super().command()[1:]]


def modes(root: str) -> dict:
    """Every directory and file under ``root`` (``root`` included): relative path -> permission bits."""
    out = {".": stat.S_IMODE(os.stat(root).st_mode)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = stat.S_IMODE(os.lstat(path).st_mode)
    return out


def widen(data_dir: str) -> None:
    """The data directory as the issue found it: 0755 directories, a 0644 attachment and secret."""
    for sub in ("", "attachments", "secrets", "run"):
        os.makedirs(os.path.join(data_dir, sub), exist_ok=True)
        os.chmod(os.path.join(data_dir, sub), 0o755)
    for rel, data in ((f"attachments/{OLD_ATTACHMENT}", b"old attachment\n"), ("secrets/old_secret", b"s3cret\n")):
        with open(os.path.join(data_dir, rel), "wb") as f:
            f.write(data)
        os.chmod(os.path.join(data_dir, rel), 0o644)


async def attach(port: int) -> dict:
    """The demo agent's /attach in a new conversation: the attachment's frame."""
    c = await PhebyClient.connect(port)
    try:
        cid = await c.create("files")
        await c.send({"type": "chat.send", "conversation_id": cid, "text": "/attach", "request_id": "a1"})
        frames = await c.until(lambda f: f.get("type") == "run.finished" and f.get("conversation_id") == cid)
        [added] = [f for f in frames if f.get("type") == "attachment.added"]
        return added["attachment"]
    finally:
        await c.close()


async def test_every_file_the_bridge_writes_is_owner_only_whatever_was_there(tmp_path):
    srv = Umask022Bridge(str(tmp_path), adapters="pheby,loomi,lvmh", env={"LVMH_TOKEN": ""})  # lvmh_token generated
    widen(srv.data_dir)
    srv.start()
    try:
        att = await attach(srv.ports["pheby"])
        # the legitimate path: the attachment downloads, the owner reads every file
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{srv.ports['pheby']}{att['download_path']}",
                                headers={"Authorization": f"Bearer {PHEBY_SECRET}"}) as r:
                assert r.status == 200 and await r.read() == b"demo attachment\n"
        found = modes(srv.data_dir)
        for name in ("bridge.db", "bridge.db-wal", f"attachments/{att['attachment_id']}", "secrets/lvmh_token",
                     "loomi-journal.1", "run/admin.key", "run/ports.json", "node_id"):
            assert name in found, sorted(found)
        with open(os.path.join(srv.data_dir, "attachments", att["attachment_id"]), "rb") as f:
            assert f.read() == b"demo attachment\n"
        wrong = {path: oct(mode) for path, mode in found.items()
                 if mode != (0o700 if os.path.isdir(os.path.join(srv.data_dir, path)) else 0o600)}
        assert wrong == {}, wrong
    finally:
        assert srv.stop() == 0, srv.stderr()[-2000:]
    srv.start()  # and it starts again on its own owner-only directory
    try:
        assert (await attach(srv.ports["pheby"]))["size"] == 16
    finally:
        assert srv.stop() == 0
