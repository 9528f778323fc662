"""The spawn worker (``lvmh_adapter/worker/index.mjs``) run directly with Node 22 and pi 1.6.0.

No Docker engine runs here, so the container's ``/bridge`` is rebuilt in tmp_path the way
``lvmh_adapter/worker/Dockerfile`` lays it out (``index.mjs``, ``pi_extension/``, pi in
``node_modules``) and started with the environment ``lvmh_adapter/spawn.py`` gives the container
(``LVMH_URL``, ``LVMH_TOKEN``, ``LVMH_SESSION_ID``, ``LVMH_REPO``; the workspace and the session dir
are the container's ``/workspace`` and ``/pi-sessions``, moved into tmp_path), against the real bridge
and the fake model. Started before the daemon listens, it waits; then it registers the daemon-chosen
session (agent: true, the repo), a REST prompt runs a turn in the workspace, SIGTERM ends it with
``bye``, and a restarted worker resumes the same session (its history, seqs after the daemon's).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import uuid

import pytest

from lvmh_adapter import spawn
from tests.conftest import LVMH_TOKEN
from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCall, last_role, last_user_text
from tests.lvmh.helpers import Api
from tests.pi.conftest import EXTENSION_DIR, ROOT
from tests.pi.helpers import check_envelopes, pi_environment, wait_until

pytestmark = pytest.mark.pi

WORKER_DIR = os.path.join(ROOT, "lvmh_adapter", "worker")


def responder(body: dict) -> Reply:
    if last_role(body) == "tool":
        return Reply(text="Done.")
    text = last_user_text(body)
    if "where" in text:
        return Reply(text="Checking.", tool_calls=[ToolCall("bash", {"command": "pwd"})])
    return Reply(text=f"Reply to: {text}")


@pytest.fixture
def llm():
    with FakeOpenAI(responder=responder) as fake:
        yield fake


@pytest.fixture
def bridge_dir(tmp_path, pi_modules):
    """The image's /bridge: index.mjs, the extension (without its tests), pi's node_modules."""
    root = tmp_path / "bridge"
    root.mkdir()
    shutil.copy(os.path.join(WORKER_DIR, "index.mjs"), root / "index.mjs")
    shutil.copytree(EXTENSION_DIR, root / "pi_extension", ignore=shutil.ignore_patterns("test"))
    (root / "node_modules").symlink_to(pi_modules, target_is_directory=True)
    return root


class Worker:
    def __init__(self, proc: asyncio.subprocess.Process, out) -> None:
        self.proc = proc
        self.out = out

    @classmethod
    async def start(cls, node: str, bridge_dir, env: dict, out_path) -> "Worker":
        out = open(out_path, "ab")
        # like the container: `node /bridge/index.mjs`, started from elsewhere than the workspace
        proc = await asyncio.create_subprocess_exec(
            node, str(bridge_dir / "index.mjs"), cwd=str(bridge_dir), env=env,
            stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
        return cls(proc, out)

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout)
            finally:
                await self.kill()
        return self.proc.returncode

    async def kill(self) -> None:
        if self.proc.returncode is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            await self.proc.wait()
        self.out.close()


def test_worker_paths_agree_with_spawn():
    """What spawn.py runs and mounts is what the worker and its Dockerfile use."""
    dockerfile = open(os.path.join(WORKER_DIR, "Dockerfile"), encoding="utf-8").read()
    index = open(os.path.join(WORKER_DIR, "index.mjs"), encoding="utf-8").read()
    assert spawn.WORKER_CMD == ["node", "/bridge/index.mjs"]
    assert 'CMD ["node", "/bridge/index.mjs"]' in dockerfile
    assert "COPY worker/index.mjs /bridge/index.mjs" in dockerfile
    assert "COPY pi_extension/ /bridge/pi_extension/" in dockerfile
    assert "@earendil-works/pi-coding-agent@1.6.0" in dockerfile
    assert '"/workspace"' in index and '"/pi-sessions"' in index and 'join(here, "pi_extension")' in index
    for var in ("LVMH_SESSION_ID", "LVMH_WORKSPACE", "PI_CODING_AGENT_SESSION_DIR", "PI_CODING_AGENT_DIR"):
        assert var in index
    # the image runs as root: spawn's models.json target is where pi reads it (~/.pi/agent)
    assert spawn.MODELS_JSON_TARGET == "/root/.pi/agent/models.json" and "USER " not in dockerfile
    # a missing image is built from the folder the package ships
    manager = spawn.SpawnManager(_Cfg(), None)
    ctx = manager._build_context_dir()
    assert ctx is not None and os.path.samefile(ctx, os.path.join(ROOT, "lvmh_adapter"))
    assert manager.worker_dockerfile == "worker/Dockerfile"


class _Cfg:
    @staticmethod
    def frontend(name):
        from lvmh_adapter.config import LvmhSettings

        return LvmhSettings(docker_url="http://127.0.0.1:9")

    @staticmethod
    def secret(name):
        return "x"

    @staticmethod
    def section(name):
        return {}


async def test_worker_registers_runs_stops_and_resumes(node22, bridge_dir, llm, service_factory, tmp_path,
                                                       unused_tcp_port):
    port = unused_tcp_port
    sid = str(uuid.uuid4())  # chosen by the daemon before the container starts (spawn.py)
    penv = pi_environment(tmp_path, node22, llm.base_url, f"ws://127.0.0.1:{port}/agent/ws", LVMH_TOKEN,
                          agent=False, repo="group/project")
    workspace = penv.cwd
    sessions = tmp_path / "pi-sessions"
    env = dict(penv.env, LVMH_SESSION_ID=sid, LVMH_WORKSPACE=workspace,
               PI_CODING_AGENT_SESSION_DIR=str(sessions), LVMH_BACKOFF_BASE_MS="50", LVMH_BACKOFF_MAX_MS="300")
    assert "LVMH_AGENT" not in env  # the worker says agent: true by itself
    out_path = tmp_path / "worker.out"
    # the daemon is not up yet: the worker starts anyway and waits (the extension keeps retrying)
    worker = await Worker.start(node22, bridge_dir, env, out_path)
    api = Api(port)
    try:
        await wait_until(lambda: "cannot reach" in penv.log_text(), 60, "a first failed connection",
                         interval=0.05, detail=lambda: out_path.read_text())
        assert worker.proc.returncode is None
        await service_factory(adapters=("lvmh",), lvmh_port=port)

        async def online():
            status, listed = await api.get("/api/sessions")
            assert status == 200
            return next((s for s in listed if s["id"] == sid and s["online"]), None)

        view = await wait_until(online, 60, "the worker's session online", interval=0.05,
                                detail=lambda: out_path.read_text())
        assert view["agent"] is True and view["repo"] == "group/project" and view["cwd"] == workspace
        assert view["model"] == "fake-model" and view["provider"] == "fake"  # pi's own choice: models.json

        status, body = await api.post(f"/api/sessions/{sid}/prompt", {"message": "where are you?"})
        assert status == 200 and body["ok"] is True
        evs = await api.wait_events(sid, lambda e: bool(e) and e[-1]["type"] == "agent_settled", timeout=60)
        check_envelopes(evs, sid)
        users = [e["message"]["text"] for e in evs if e["type"] == "message_end" and e["message"]["role"] == "user"]
        assert users == ["where are you?"]
        end = next(e for e in evs if e["type"] == "tool_execution_end")
        assert end["toolName"] == "bash" and end["resultPreview"] == workspace + "\n"  # runs in LVMH_WORKSPACE
        final = [e["message"] for e in evs if e["type"] == "message_end"][-1]
        assert final["role"] == "assistant" and final["text"] == "Done."
        assert any(sid in f.name for f in sessions.iterdir())  # pi's session file, under the daemon's id

        # docker stop: SIGTERM ends the session like pi's own quit
        assert await worker.stop() == 0
        evs = await api.wait_events(sid, lambda e: e[-1]["type"] == "bye", timeout=15)
        last = evs[-1]["seq"]
        status, listed = await api.get("/api/sessions")
        assert next(s for s in listed if s["id"] == sid)["online"] is False

        # the container starts again: the same session, its history, seqs after the daemon's
        worker = await Worker.start(node22, bridge_dir, env, out_path)
        await wait_until(online, 60, "the resumed session online", interval=0.05, detail=lambda: out_path.read_text())
        status, _ = await api.post(f"/api/sessions/{sid}/prompt", {"message": "again"})
        assert status == 200
        evs = await api.wait_events(sid, lambda e: e[-1]["type"] == "agent_settled" and e[-1]["seq"] > last,
                                    timeout=60)
        check_envelopes(evs, sid)
        assert [e for e in evs if e["seq"] > last][0]["seq"] == last + 1
        sent = [(m["role"], m.get("content")) for m in llm.requests[-1]["messages"] if m["role"] == "user"]
        assert [last_user_text({"messages": [{"role": r, "content": c}]}) for r, c in sent] == [
            "where are you?", "again"]
        assert await worker.stop() == 0
    finally:
        await worker.kill()
        await api.close()
    out = out_path.read_text()
    assert f"session {sid} in {workspace}, model fake/fake-model, waiting for prompts" in out
    assert f"resuming session {sid}" in out
    assert LVMH_TOKEN not in out and LVMH_TOKEN not in penv.log_text()
