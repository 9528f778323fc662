"""``python -m bench long``: long conversations and many conversations in the web UI (issue 39).

What a reader of a long conversation waits for, measured through the real server (``agent-bridge
serve`` with the lvmh front end, a subprocess) and headless Chromium (the Debian build the browser
tests use), at desktop (1280×800) and phone (390×844) viewports:

- time to open a conversation (page load to its newest message on screen), DOM nodes (elements),
  JS heap after a garbage collection, send → echo (Enter to the demo agent's "Echo: ..." on screen),
  and scrolling to the oldest message (page by page), for conversations of ``--turns`` turns; then,
  with the whole conversation held, back at its newest message, send → echo again;
- bytes each browser receives for one change of the list (a create, a rename, a delete) with
  ``--conversations`` conversations, for the web UI (``ext=list-deltas``) and a spec client;
- the server: time per history page (``GET .../events?before=``, over loopback HTTP) and RSS, empty
  and holding the conversations.

The conversations are written straight into a data dir before its server starts: a fast path this
bench owns (``fill``). Each turn is made of the shared events a demo run publishes (a user message,
a run, a tool call every second turn, an approval asked and answered every tenth, the answer, the
run's end), rendered into lvmh events by the lvmh front end's own ``Renderer`` and encoded by its
codec, so the rows are what the server would have stored; the core's rows (conversation, messages,
runs) are written as the core writes them. Nothing is measured while filling.

"open" is ``performance.now()`` when the newest message is on screen in a fresh page: milliseconds from
the start of that page's navigation (its time origin), in a new browser context of a browser started
once for the whole run. Not in it: the browser's start, the context's creation. In it: the request for
index.html, the scripts' fetch, compile and run, the first history page, the first paint. A send waits
first for the page to be idle (``requestIdleCallback``): what the opening still does after its first
paint (the margin around the screen, highlight.js's grammars) is not counted in the send.

Targets (ratios within one run): opening 10,000 turns ≤ 1.2× opening 50 and ≤ 300 ms; DOM nodes
< 3,000 at every length; send → echo at 10,000 turns ≤ 1.2× at 50; a list change < 2 KB per browser
at 10,000 conversations; a history page < 5 ms at 10,000 turns; RSS with 10,000 conversations of 100
turns ≤ 1.2× an empty server's plus SQLite's page cache.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any, Optional

import orjson

from .proc import BENCH_TOKEN, ROOT, ProcWatch

DESKTOP = (1280, 800)
PHONE = (390, 844)
CHROMIUM = os.environ.get("AGENT_BRIDGE_CHROMIUM", "/usr/bin/chromium")
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync"]
SQLITE_CACHE_KB = 2000  # SQLite's default page cache per connection (PRAGMA cache_size = -2000)
SQLITE_CONNECTIONS = 3  # the store's writer, reader and checkpointer
TARGET_OPEN_RATIO, TARGET_OPEN_MS, TARGET_DOM, TARGET_SEND_RATIO = 1.2, 300.0, 3000, 1.2
TARGET_LIST_BYTES, TARGET_PAGE_MS, TARGET_RSS_RATIO = 2048, 5.0, 1.2
REST_S = 3.0  # after the list changes, the server's RSS is read this much later (at rest) as well as at once


# --- the fill: a fast path the bench owns ---------------------------------------------------------


def turn_events(cid: str, t: int, ts: float) -> list:
    """The shared events of one demo turn ``t`` of ``cid`` at ``ts`` (seconds), in order."""
    from bridge_core.model import events as ev
    from bridge_core.model.ids import draft_message_id

    run = f"{cid[:8]}r{t}"
    draft = draft_message_id(run)
    text = f"question {t} tok{t}x" + " and a few more words" * (t % 4)
    out: list = [ev.UserMessageSent(conversation_id=cid, message_id=f"{cid[:8]}u{t}", text=text, ts=ts),
                 ev.RunStarted(conversation_id=cid, run_id=run, message_id=draft, model="demo-small", provider="demo",
                               ts=ts + 0.01)]
    if t % 2:
        out += [ev.ToolStarted(conversation_id=cid, run_id=run, call_id=f"{run}c", tool_name="grep",
                               args={"pattern": f"tok{t}x", "path": "src/"}, ts=ts + 0.02),
                ev.ToolFinished(conversation_id=cid, run_id=run, call_id=f"{run}c", tool_name="grep", status="completed",
                                duration_ms=12, result_preview=f"src/a{t}.py:1: tok{t}x", ts=ts + 0.03)]
    if t % 10 == 5:
        out += [ev.ApprovalRequested(conversation_id=cid, run_id=run, approval_id=f"{run}a", session_key=cid,
                                     command=f"make deploy-{t}", description="Demo approval for a shell command",
                                     ts=ts + 0.04),
                ev.ApprovalResolved(conversation_id=cid, run_id=run, approval_id=f"{run}a", choice="once",
                                    surface="lvmh", ts=ts + 0.05)]
    out += [ev.MessageCompleted(conversation_id=cid, message_id=draft, text=f"Echo: {text}", run_id=run, ts=ts + 0.06),
            ev.RunFinished(conversation_id=cid, run_id=run, status="completed",
                           usage=ev.Usage(input_tokens=40, output_tokens=12), ts=ts + 0.07)]
    return out


def _conversation_rows(cid: str, name: str, turns: int, start: float, out: dict) -> None:
    """Every row one conversation of ``turns`` turns leaves in the core's and lvmh's tables."""
    from bridge_core.model import events as ev
    from lvmh_adapter import codec
    from lvmh_adapter.render import Renderer

    info = {"id": cid, "name": name, "cwd": "", "model": "demo-small", "provider": "demo", "agent": False,
            "repo": None, "startedAt": int(start * 1000)}
    renderer = Renderer(lambda _cid: info)
    seq = 0
    ts = start
    for t in range(turns):
        ts = start + t * 60.0
        for e in turn_events(cid, t, ts):
            for etype, payload in renderer.render(e):
                seq += 1
                ms = int(e.ts * 1000)
                if etype != "message_update":
                    out["events"].append((cid, seq, ms, etype, codec.event_raw(cid, seq, ms, etype, payload)))
            if type(e) is ev.UserMessageSent or type(e) is ev.MessageCompleted:
                out["messages"].append((cid, e.message_id, "user" if type(e) is ev.UserMessageSent else "assistant",
                                        e.text, e.ts))
            elif type(e) is ev.RunFinished:
                out["runs"].append((e.run_id, cid, "completed", e.ts - 0.07, e.ts, None))
    out["conversations"].append((cid, name, "demo", start, ts, ts))
    out["sessions"].append((cid, orjson.dumps(info).decode(), seq, int(ts * 1000) if turns else None,
                            "bridge", seq, 0))


INSERTS = {
    "conversations": "INSERT INTO conversations(id, name, source, created_at, updated_at, last_active) VALUES(?,?,?,?,?,?)",
    "messages": "INSERT OR REPLACE INTO messages(conversation_id, message_id, role, text, ts) VALUES(?,?,?,?,?)",
    "runs": "INSERT INTO runs(run_id, conversation_id, status, started_at, finished_at, error) VALUES(?,?,?,?,?,?)",
    "sessions": "INSERT INTO sessions(id, info, lastSeq, lastEventAt, source, seqReserved, storedBytes) VALUES(?,?,?,?,?,?,?)",
    "events": "INSERT INTO events(sessionId, seq, ts, type, payload) VALUES(?,?,?,?,?)",
}


def fill(data_dir: str, convs: list[tuple[str, int]], progress: bool = False) -> dict[str, tuple[str, int]]:
    """Write conversations ``[(name, turns)]`` into ``data_dir``'s store; ``{name: (id, last seq)}``."""
    import sqlite3

    from bridge_core.scale.engines import open_store
    from lvmh_adapter.persistence import MIGRATIONS

    store = open_store(None, data_dir).open()
    store.migrate("lvmh", MIGRATIONS)
    path = store.path
    store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    ids: dict[str, tuple[str, int]] = {}
    start = time.time() - 3600 * 24 * 30
    out: dict = {k: [] for k in INSERTS}
    began = time.monotonic()
    for n, (name, turns) in enumerate(convs):
        cid = uuid.uuid4().hex
        _conversation_rows(cid, name, turns, start + n, out)
        ids[name] = (cid, out["sessions"][-1][2])
        if len(out["events"]) >= 200_000 or n == len(convs) - 1:
            conn.execute("BEGIN")
            for table, sql in INSERTS.items():
                conn.executemany(sql, out[table])
                out[table].clear()
            conn.execute("COMMIT")
            if progress:
                print(f"    filled {n + 1:,}/{len(convs):,} conversations ({time.monotonic() - began:.0f} s)", flush=True)
    conn.close()
    return ids


# --- the server -------------------------------------------------------------------------------------


class LongServer:
    """``agent-bridge serve --adapters lvmh`` on a data dir filled beforehand."""

    def __init__(self, data_dir: str):
        self.data_dir = data_dir
        portfile = os.path.join(data_dir, "run", "ports.json")
        if os.path.exists(portfile):
            os.remove(portfile)
        env = dict(os.environ, LVMH_TOKEN=BENCH_TOKEN, PYTHONPATH=ROOT)
        began = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "cli", "serve", "--data-dir", data_dir, "--adapters", "lvmh",
                                      "--lvmh-port", "0", "--metrics-port", "0", "--log-level", "WARNING"],
                                     cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        import json

        while not os.path.exists(portfile):
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited: {self.proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)  # the bench waits for the server's ports file
        with open(portfile) as f:
            self.port = json.load(f)["lvmh"]
        self.started_s = time.monotonic() - began
        self.base = f"http://127.0.0.1:{self.port}"
        self.watch = ProcWatch(self.proc.pid)

    def rss_mb(self) -> float:
        return self.watch.rss() / 1e6

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --- in the browser ---------------------------------------------------------------------------------

NEWEST_ON_SCREEN = """(text) => { const els = document.querySelectorAll('#timeline .msg-assistant');
  const el = els[els.length - 1]; if (!el || !el.textContent.includes(text)) return false;
  const r = el.getBoundingClientRect(), b = document.getElementById('timeline-wrap').getBoundingClientRect();
  return r.top < b.bottom && r.bottom > b.top ? performance.now() : false; }"""

SEND_ECHO = """async (text) => { const ta = document.getElementById('prompt-input');
  while (ta.disabled) await new Promise((r) => setTimeout(r, 20));
  for (let i = 0; i < 2; i++) await new Promise((r) => requestIdleCallback(r, { timeout: 2000 }));
  ta.value = text; const t0 = performance.now();
  ta.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
  return await new Promise((res) => { const tick = () => { const els = document.querySelectorAll('#timeline .msg-assistant');
    const el = els[els.length - 1]; if (el && el.textContent.includes('Echo: ' + text)) res(performance.now() - t0);
    else requestAnimationFrame(tick); }; tick(); }); }"""

TO_THE_OLDEST = """async () => { const a = window.lvmhApp.app; const w = document.getElementById('timeline-wrap'); const t0 = performance.now();
  for (;;) { const st = a.states.get(a.current); w.scrollTop = 0; await new Promise((r) => requestAnimationFrame(r));
    const first = document.querySelector('#timeline > .msg-user');
    if (!st.hasOlder && !st.loadingOlder && !a.renderTimer && first && first.textContent.includes('question 0 tok0x')
        && first.getBoundingClientRect().bottom > w.getBoundingClientRect().top) return [performance.now() - t0, st.items.length]; } }"""

TO_THE_NEWEST = """async () => { const a = window.lvmhApp.app; const w = document.getElementById('timeline-wrap');
  for (;;) { w.scrollTop = w.scrollHeight; await new Promise((r) => requestAnimationFrame(r));
    const st = a.states.get(a.current);
    if (!a.renderTimer && !st.loadingOlder && w.scrollHeight - w.scrollTop - w.clientHeight < 2) return st.items.length; } }"""

DOM_NODES = "document.getElementsByTagName('*').length"


async def _context(browser: Any, viewport: tuple[int, int]) -> Any:
    ctx = await browser.new_context(viewport={"width": viewport[0], "height": viewport[1]}, service_workers="block")
    await ctx.add_init_script(f"localStorage.setItem('lvmh.token', {BENCH_TOKEN!r});")
    return ctx


async def open_conversation(browser: Any, base: str, cid: str, newest: str, viewport: tuple[int, int],
                            send: Optional[str] = None, oldest: bool = False) -> dict:
    """A fresh page opening ``cid``: time to its newest message on screen, DOM nodes, heap after GC; then a send
    and its echo (``send``), and the scroll to its oldest message (``oldest``)."""
    ctx = await _context(browser, viewport)
    try:
        page = await ctx.new_page()
        await page.goto(f"{base}/#/s/{cid}", wait_until="commit")
        handle = await page.wait_for_function(NEWEST_ON_SCREEN, arg=newest, polling="raf", timeout=120_000)
        out = {"open_ms": await handle.json_value(), "dom": await page.evaluate(DOM_NODES)}
        cdp = await ctx.new_cdp_session(page)
        await cdp.send("HeapProfiler.collectGarbage")
        out["heap_mb"] = (await cdp.send("Runtime.getHeapUsage"))["usedSize"] / 1e6
        if send is not None:
            out["send_ms"] = await page.evaluate(SEND_ECHO, send)
        if oldest:
            out["oldest_s"], out["items"] = await page.evaluate(TO_THE_OLDEST)
            out["oldest_s"] /= 1000
            out["dom_oldest"] = await page.evaluate(DOM_NODES)
            await cdp.send("HeapProfiler.collectGarbage")
            out["heap_oldest_mb"] = (await cdp.send("Runtime.getHeapUsage"))["usedSize"] / 1e6
            if send is not None:  # the whole conversation held: a draw must not cost it all
                await page.evaluate(TO_THE_NEWEST)
                out["send_all_ms"] = await page.evaluate(SEND_ECHO, send + "all")
        return out
    finally:
        await ctx.close()


async def list_change_bytes(browser: Any, base: str) -> dict:
    """Bytes a web UI page and a spec client receive for one create, rename and delete of a conversation."""
    import aiohttp

    ctx = await _context(browser, DESKTOP)
    got: list[int] = []
    spec_got: list[int] = []
    first = asyncio.Event()
    headers = {"Authorization": f"Bearer {BENCH_TOKEN}"}

    def frame(payload: Any) -> None:
        data = payload.encode() if isinstance(payload, str) else payload
        got.append(len(data))
        if b'"type":"session_list"' in data:
            first.set()

    try:
        page = await ctx.new_page()
        page.on("websocket", lambda ws: ws.on("framereceived", frame))
        await page.goto(base + "/")
        await asyncio.wait_for(first.wait(), 120)  # the socket's first frame (the list's first page) is in
        async with aiohttp.ClientSession() as http:
            spec = await http.ws_connect(f"{base.replace('http', 'ws')}/ws?token={BENCH_TOKEN}", max_msg_size=0)
            await spec.receive(timeout=120)  # its first (whole) list
            reader = asyncio.create_task(_count(spec, spec_got))
            out = {}
            for what, method, body in (("create", "POST", {"name": "bench change"}), ("rename", "PATCH", {"name": "renamed"}),
                                       ("delete", "DELETE", None)):
                got.clear()
                spec_got.clear()
                path = "/api/conversations" + ("" if what == "create" else f"/{out['id']}")
                async with http.request(method, base + path, json=body, headers=headers) as resp:
                    answer = await resp.json()
                    out.setdefault("id", answer.get("id"))
                await asyncio.sleep(1.0)  # what the change sends arrives within this (the bench's settle time)
                out[what] = (sum(got), sum(spec_got))
            reader.cancel()
            await spec.close()
        return out
    finally:
        await ctx.close()


async def _count(ws: Any, into: list) -> None:
    async for msg in ws:
        into.append(len(msg.data) if isinstance(msg.data, (bytes, str)) else 0)


async def history_page_ms(base: str, cid: str, seqs: int, n: int = 60) -> float:
    """Median time of ``GET .../events?before=<seq>&limit=200`` at seqs spread over the conversation (loopback HTTP)."""
    import aiohttp

    headers = {"Authorization": f"Bearer {BENCH_TOKEN}"}
    times = []
    async with aiohttp.ClientSession() as http:
        for i in range(n + 5):
            before = "latest" if i % 3 == 0 else str(max(2, seqs * ((i * 37) % 100) // 100))
            t0 = time.perf_counter()
            async with http.get(f"{base}/api/sessions/{cid}/events?before={before}&limit=200", headers=headers) as resp:
                await resp.read()
            if i >= 5:  # the first few warm the connection
                times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


# --- the runs ----------------------------------------------------------------------------------------


async def run_sizes(browser: Any, turns: list[int], rounds: int, oldest: bool) -> dict:
    """Conversations of ``turns`` turns in one server: the page's figures at both viewports, and the server's."""
    data = tempfile.mkdtemp(prefix="bench-long-")
    try:
        began = time.monotonic()
        ids = fill(data, [(f"long {n}", n) for n in turns])
        print(f"  filled {', '.join(f'{n:,}' for n in turns)} turns in {time.monotonic() - began:.1f} s", flush=True)
        srv = LongServer(data)
        try:
            newest = {n: f"tok{n - 1}x" for n in turns}
            got: dict = {(n, vp): [] for n in turns for vp in (DESKTOP, PHONE)}
            for r in range(rounds):
                for vp in (DESKTOP, PHONE):
                    for n in turns:  # sizes alternate within a round: the machine's drift hits them alike
                        ping = f"ping{r}x{vp[0]}x{n}"
                        res = await open_conversation(browser, srv.base, ids[f"long {n}"][0], newest[n], vp, send=ping,
                                                      oldest=oldest and r == 0)
                        newest[n] = f"Echo: {ping}"
                        got[(n, vp)].append(res)
                        print(f"    round {r + 1} {vp[0]}x{vp[1]} {n:>6} turns: " + ", ".join(
                            f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in res.items()), flush=True)
            pages = {n: await history_page_ms(srv.base, *ids[f"long {n}"]) for n in turns}
            return {"got": got, "pages": pages, "rss_mb": srv.rss_mb()}
        finally:
            srv.stop()
    finally:
        shutil.rmtree(data, ignore_errors=True)


async def _serve_list(browser: Any, data: str, label: str, out: dict, changes: bool) -> None:
    """Start a server on ``data``, load the web UI's list once (and change the list): its RSS and start time."""
    srv = LongServer(data)
    try:
        ctx = await _context(browser, DESKTOP)
        page = await ctx.new_page()
        await page.goto(srv.base + "/")
        await page.wait_for_function("() => document.getElementById('conn').textContent.includes('live')", timeout=120_000)
        out[f"dom_{label}"] = await page.evaluate(DOM_NODES)
        await ctx.close()
        out[f"rss_{label}_list"] = srv.rss_mb()  # before a spec client takes the whole list (four times, below)
        if changes:
            out["changes"] = await list_change_bytes(browser, srv.base)
            out[f"rss_{label}_sent"] = srv.rss_mb()  # right after: the last whole list may still be on its way
            await asyncio.sleep(REST_S)  # the server at rest (its encoded list is let go within a second)
        out[f"rss_{label}"] = srv.rss_mb()
        out[f"start_{label}"] = srv.started_s
    finally:
        srv.stop()


async def run_list(browser: Any, conversations: int, turns: int) -> dict:
    """An empty server's RSS, then ``conversations`` conversations of ``turns`` turns: RSS, bytes per list change;
    and the RSS again with the core's transcripts (its ``messages`` rows) left out, to tell its share."""
    import sqlite3

    out: dict = {}
    for label, count in (("empty", 0), ("full", conversations)):
        data = tempfile.mkdtemp(prefix="bench-list-")
        try:
            began = time.monotonic()
            fill(data, [(f"chat {i:05d}", turns) for i in range(count)], progress=count > 0)
            if count:
                print(f"  filled {count:,} conversations of {turns} turns in {time.monotonic() - began:.0f} s", flush=True)
                out["db_mb"] = sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data)
                                   if ".db" in f) / 1e6
            await _serve_list(browser, data, label, out, changes=count > 0)
            if count:
                db = [os.path.join(data, f) for f in os.listdir(data) if f.endswith(".db")][0]
                with sqlite3.connect(db) as conn:
                    conn.execute("DELETE FROM messages")
                await _serve_list(browser, data, "lvmh", out, changes=False)
        finally:
            shutil.rmtree(data, ignore_errors=True)
    return out


# --- the report ---------------------------------------------------------------------------------------


def _med(values: list) -> float:
    return statistics.median(values) if values else float("nan")


def _spread(values: list) -> str:
    return f"{_med(values):.0f} [{min(values):.0f}..{max(values):.0f}]" if values else "n/a"


def report_sizes(res: dict, turns: list[int]) -> bool:
    got, ok = res["got"], True
    base, top = turns[0], turns[-1]
    print(f"\nConversations of {', '.join(f'{n:,}' for n in turns)} turns (median [min..max] over rounds)")
    print(f"{'figure':<34}" + "".join(f"{n:>18,}" for n in turns) + "   target")
    for vp, label in ((DESKTOP, "desktop"), (PHONE, "phone")):
        rows = [("open, ms", "open_ms", _spread), ("DOM nodes", "dom", lambda v: f"{max(v):,}"),
                ("JS heap after GC, MB", "heap_mb", lambda v: f"{_med(v):.1f}"), ("send → echo, ms", "send_ms", _spread),
                ("scroll to the oldest, s", "oldest_s", lambda v: f"{_med(v):.1f}" if v else "-"),
                ("send → echo, all held, ms", "send_all_ms", lambda v: f"{_med(v):.0f}" if v else "-"),
                ("JS heap after GC there, MB", "heap_oldest_mb", lambda v: f"{_med(v):.1f}" if v else "-")]
        for name, key, fmt in rows:
            cells = [fmt([x[key] for x in got[(n, vp)] if key in x]) for n in turns]
            target = ""
            if key == "open_ms":
                ratio = _med([x[key] for x in got[(top, vp)]]) / _med([x[key] for x in got[(base, vp)]])
                good = ratio <= TARGET_OPEN_RATIO and _med([x[key] for x in got[(top, vp)]]) <= TARGET_OPEN_MS
                target = f"{top:,}/{base}: {ratio:.2f} (≤ {TARGET_OPEN_RATIO}, ≤ {TARGET_OPEN_MS:.0f} ms) {'ok' if good else 'MISS'}"
                ok &= good
            elif key == "dom":
                worst = max(x[k] for n in turns for x in got[(n, vp)] for k in ("dom", "dom_oldest") if k in x)
                good = worst < TARGET_DOM
                target = f"max {worst:,} (< {TARGET_DOM:,}, at the oldest too) {'ok' if good else 'MISS'}"
                ok &= good
            elif key == "send_ms":
                ratio = _med([x[key] for x in got[(top, vp)]]) / _med([x[key] for x in got[(base, vp)]])
                good = ratio <= TARGET_SEND_RATIO
                target = f"{top:,}/{base}: {ratio:.2f} (≤ {TARGET_SEND_RATIO}) {'ok' if good else 'MISS'}"
                ok &= good
            print(f"{label + ' ' + name:<34}" + "".join(f"{c:>18}" for c in cells) + f"   {target}")
    pages = res["pages"]
    good = pages[top] < TARGET_PAGE_MS
    ok &= good
    print(f"{'history page (200 events), ms':<34}" + "".join(f"{pages[n]:>18.2f}" for n in turns)
          + f"   < {TARGET_PAGE_MS:g} at {top:,} {'ok' if good else 'MISS'}")
    return ok


def report_list(res: dict, conversations: int, turns: int) -> bool:
    print(f"\n{conversations:,} conversations of {turns} turns (one run)")
    ok = True
    for what in ("create", "rename", "delete"):
        web, spec = res["changes"][what]
        good = web < TARGET_LIST_BYTES
        ok &= good
        print(f"  bytes per browser for a {what:<7}: web UI {web:>8,}   spec client (whole list) {spec:>11,}"
              f"   target < {TARGET_LIST_BYTES:,} {'ok' if good else 'MISS'}")
    cache = SQLITE_CACHE_KB * SQLITE_CONNECTIONS / 1000
    bound = TARGET_RSS_RATIO * res["rss_empty"] + cache
    good = res["rss_full"] <= bound
    ok &= good
    print(f"  server RSS: empty {res['rss_empty']:.1f} MB, with them {res['rss_full']:.1f} MB at rest, {REST_S:g} s after a spec"
          f" client's 4 whole lists (bound {TARGET_RSS_RATIO} × empty + {cache:.0f} MB page cache = {bound:.1f})"
          f" {'ok' if good else 'MISS'}; {res['rss_full_sent']:.1f} MB right after them")
    listed = res["rss_full_list"]
    print(f"  server RSS with them, the web UI's list loaded, before a spec client's whole lists: {listed:.1f} MB "
          f"({'within' if listed <= bound else 'over'} the bound)")
    print(f"  server RSS with them but the core's transcripts (messages rows) left out: {res['rss_lvmh']:.1f} MB "
          f"({'within' if res['rss_lvmh'] <= bound else 'over'} the bound)")
    print(f"  server start: empty {res['start_empty']:.1f} s, with them {res['start_full']:.1f} s; store {res['db_mb']:,.0f} MB;"
          f" DOM nodes of the list page: {res['dom_empty']:,} empty, {res['dom_full']:,} with them")
    return ok


async def run_all(args: Any) -> bool:
    from playwright.async_api import async_playwright

    turns = [int(x) for x in args.turns.split(",") if x.strip()]
    ok = True
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True)
        try:
            if turns:
                ok &= report_sizes(await run_sizes(browser, turns, args.rounds, not args.no_oldest), turns)
            if args.conversations:
                ok &= report_list(await run_list(browser, args.conversations, args.list_turns), args.conversations,
                                  args.list_turns)
        finally:
            await browser.close()
    return ok


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench long", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", default="50,100,1000,10000", help="sizes of the conversations opened (the first is the base)")
    p.add_argument("--conversations", type=int, default=10_000, help="conversations in the list (0: none)")
    p.add_argument("--list-turns", type=int, default=100, help="turns of each conversation of the list")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-oldest", action="store_true", help="skip scrolling each conversation to its oldest message")
    p.add_argument("--quick", action="store_true", help="50,100,1000 turns, 1,000 conversations of 20 turns, one round")
    args = p.parse_args(argv)
    if args.quick:
        args.turns, args.conversations, args.list_turns, args.rounds = "50,100,1000", 1000, 20, 1
    print(f"bench long  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  {os.cpu_count()} cores  "
          f"turns={args.turns} conversations={args.conversations:,}x{args.list_turns} rounds={args.rounds}", flush=True)
    ok = asyncio.run(run_all(args))
    print(f"\nall targets met: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
