"""Shared pieces of the real-pi tests: pi's offline environment, ``pi --mode rpc``, waiting, checks.

- :func:`pi_environment`: a temporary ``PI_CODING_AGENT_DIR`` whose ``models.json`` points the
  ``fake`` provider at a :class:`tests.fakes.fake_openai.FakeOpenAI`, a ``HOME``, a project folder,
  and the environment (offline, no telemetry, node 22 first on PATH, the lvmh settings).
- :func:`pi_args` / :func:`start_rpc`: pi with only the lvmh extension loaded; :class:`Rpc` drives
  ``pi --mode rpc`` over stdin/stdout (JSONL) and keeps every event pi prints.
- :func:`wait_until`, :func:`check_envelopes`, :func:`mirrored`: waiting and the exact facts the
  tests assert about what the extension sends.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

from tests.pi.conftest import EXTENSION_DIR
from tests.waiting import until

MODEL = "fake/fake-model"


def models_json(base_url: str) -> dict:
    """pi's ``models.json`` with one OpenAI-compatible provider ``fake`` (model ``fake-model``)."""
    return {"providers": {"fake": {
        "baseUrl": base_url, "api": "openai-completions", "apiKey": "fake-key",
        "models": [{"id": "fake-model", "reasoning": False, "input": ["text"], "contextWindow": 32000,
                    "maxTokens": 1024, "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}}]}}}


@dataclass
class PiEnv:
    env: dict
    cwd: str  # the project folder pi runs in
    log: Path  # the extension's log (LVMH_LOG)
    agent_dir: Path  # PI_CODING_AGENT_DIR
    home: Path

    def log_text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


def pi_environment(tmp_path: Path, node: str, llm_base_url: str, lvmh_url: str, token: str, *,
                   agent: bool = True, repo: Optional[str] = "group/project", **extra: str) -> PiEnv:
    """Everything pi needs to run offline against the fake model and the given daemon URL."""
    agent_dir = tmp_path / "agent"
    agent_dir.mkdir(exist_ok=True)
    (agent_dir / "models.json").write_text(json.dumps(models_json(llm_base_url)))
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    log = tmp_path / "lvmh-agent.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LVMH_", "PI_", "OPENAI", "ANTHROPIC"))}
    env.update(
        PATH=os.path.dirname(node) + os.pathsep + os.environ.get("PATH", ""),
        HOME=str(home), PI_CODING_AGENT_DIR=str(agent_dir),
        PI_OFFLINE="1", PI_SKIP_VERSION_CHECK="1", PI_TELEMETRY="0",
        LVMH_URL=lvmh_url, LVMH_TOKEN=token, LVMH_LOG=str(log),
    )
    if agent:
        env["LVMH_AGENT"] = "1"
    if repo is not None:
        env["LVMH_REPO"] = repo
    env.update(extra)
    return PiEnv(env=env, cwd=str(project), log=log, agent_dir=agent_dir, home=home)


def pi_args(pi_cli: str, *extra: str, extension: str = EXTENSION_DIR, persist: bool = False) -> list[str]:
    """pi with discovery off and only the lvmh extension; ``persist=False`` adds ``--no-session``."""
    args = [pi_cli, "--no-extensions", "-e", extension, "--model", MODEL]
    if not persist:
        args.append("--no-session")
    return args + ["--no-skills", "--no-prompt-templates", "--no-context-files", *extra]


async def wait_until(pred: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
                     interval: float = 0.02, detail: Optional[Callable[[], Any]] = None) -> Any:
    """tests.waiting.until, with ``detail()`` (e.g. a log) added to the message on a timeout."""
    try:
        return await until(pred, timeout, what, interval)
    except AssertionError as e:
        if detail is None:
            raise
        raise AssertionError(f"{e}: {detail()}") from None


class Rpc:
    """``pi --mode rpc`` on stdin/stdout (JSONL): commands with responses, and every event pi prints."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.records: list[dict] = []
        self._reader = asyncio.create_task(self._read())
        self._n = 0

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                return
            try:
                self.records.append(json.loads(line))
            except ValueError:
                pass

    def events(self, *types: str) -> list[dict]:
        """pi's own session events (not command responses), optionally of these types."""
        return [r for r in self.records if r.get("type") != "response" and (not types or r.get("type") in types)]

    async def command(self, type_: str, timeout: float = 30, **fields: Any) -> dict:
        self._n += 1
        rid = f"r{self._n}"
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"id": rid, "type": type_, **fields}) + "\n").encode())
        await self.proc.stdin.drain()
        try:
            return await until(lambda: next((r for r in self.records if r.get("type") == "response" and r.get("id") == rid),
                                            None), timeout, f"the response to {type_}", interval=0.02)
        except AssertionError:
            raise AssertionError(f"no response to {type_}") from None

    async def settled(self, count: int, timeout: float = 60) -> list[dict]:
        """Wait until pi has reported ``count`` agent_settled events in all; returns them."""
        return await wait_until(lambda: (lambda s: s if len(s) >= count else None)(self.events("agent_settled")),
                                timeout, f"pi's agent_settled #{count}",
                                detail=lambda: [r.get("type") for r in self.events()][-20:])

    async def close(self, timeout: float = 30) -> Optional[int]:
        """Close stdin (pi quits: session_shutdown, the extension's bye) and wait for the exit code."""
        assert self.proc.stdin is not None
        if not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        finally:
            await self.kill()
        return self.proc.returncode

    def pause(self) -> None:
        """SIGSTOP pi (its process group): it keeps its state and sockets but does nothing."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.proc.pid, signal.SIGCONT)

    async def kill(self) -> None:
        if self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            await self.proc.wait()
        self._reader.cancel()


async def start_rpc(pi_cli: str, pi_env: PiEnv, *extra: str, persist: bool = False,
                    extension: str = EXTENSION_DIR) -> Rpc:
    proc = await asyncio.create_subprocess_exec(
        *pi_args(pi_cli, "--mode", "rpc", *extra, extension=extension, persist=persist),
        cwd=pi_env.cwd, env=pi_env.env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True)  # its own process group: pause() and kill() reach pi's children too
    return Rpc(proc)


def check_envelopes(frames: list[dict], sid: str) -> None:
    """Every frame is the spec's envelope for ``sid``; seqs strictly ascending from 1."""
    for f in frames:
        assert f["v"] == 1 and f["sessionId"] == sid and isinstance(f["ts"], int), f
    seqs = [f["seq"] for f in frames]
    assert seqs == sorted(set(seqs)) and seqs[0] == 1, seqs


# --- what the extension mirrors of pi's own event stream ---------------------------------------------

MIRRORED = ("agent_start", "message_start", "message_end", "tool_execution_start", "tool_execution_update",
            "tool_execution_end", "agent_end", "agent_settled")


def _text(content: Union[str, list, None]) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def mirrored(pi_events: list[dict]) -> list[tuple]:
    """(type, role) of the persisted lvmh events the extension makes of pi's events, in order.

    The extension forwards everything in MIRRORED except pi's empty ``system`` message, and turns
    each assistant ``text_delta`` into an unpersisted ``message_update`` (see ``text_deltas``).
    """
    out = []
    for e in pi_events:
        t = e.get("type")
        if t not in MIRRORED:
            continue
        role = None
        if t in ("message_start", "message_end"):
            m = e.get("message") or {}
            role = m.get("role")
            if role == "system" and not _text(m.get("content")):
                continue
        out.append((t, role))
    return out


def text_deltas(pi_events: list[dict]) -> int:
    """How many ``message_update`` numbers the extension used: one per assistant text delta."""
    return sum(1 for e in pi_events if e.get("type") == "message_update"
               and (e.get("assistantMessageEvent") or {}).get("type") == "text_delta"
               and (e.get("message") or {}).get("role", "assistant") == "assistant")


def persisted_shape(events: list[dict]) -> list[tuple]:
    """(type, role) of persisted lvmh events, comparable with :func:`mirrored`."""
    return [(e["type"], (e.get("message") or {}).get("role") if e["type"] in ("message_start", "message_end")
             else None) for e in events]


def gaps_inside_assistant_messages(events: list[dict]) -> list[int]:
    """The seqs missing between persisted events; asserts each lies inside an assistant message
    (between its ``message_start`` and ``message_end``), where the extension numbers its deltas."""
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)), f"seqs not strictly ascending: {seqs}"
    missing = []
    for prev, nxt in zip(events, events[1:]):
        if nxt["seq"] == prev["seq"] + 1:
            continue
        inside = (prev["type"] == "message_start" and prev["message"]["role"] == "assistant"
                  and nxt["type"] == "message_end" and nxt["message"]["role"] == "assistant"
                  and nxt["message"]["id"] == prev["message"]["id"])
        assert inside, f"gap {prev['seq']}..{nxt['seq']} outside an assistant message: {prev['type']} -> {nxt['type']}"
        missing.extend(range(prev["seq"] + 1, nxt["seq"]))
    return missing

