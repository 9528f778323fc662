"""History in pages, newest first, and find-in-conversation, over real HTTP (docs/lvmh.md, "History in pages").

``GET /api/sessions/:id/events?before=<seq>&limit=N`` is the newest N stored events below ``before``,
seq ascending, with ``X-Lvmh-Older`` saying whether more are stored below; ``before=latest`` is the
newest page. ``GET /api/sessions/:id/search?q=`` finds stored events by their text, newest first.
Both serve pi plugin sessions and the bridge's own conversations alike (the query plans are checked
in tests/store/test_history_index.py).
"""

from __future__ import annotations

import json

import aiohttp
import pytest

from bridge_core.model import commands as cmd
from lvmh_adapter import history
from tests.conftest import LVMH_TOKEN
from tests.lvmh.helpers import message
from tests.waiting import until

SID = "01a22693-a4c3-719c-9d1e-000000000039"
N = 600


async def _get(api, path: str, headers=None) -> tuple[int, object, dict]:
    async with api.http.get(api.base + path, headers=api.headers if headers is None else headers) as resp:
        body = await resp.read()
        return resp.status, json.loads(body) if body else None, dict(resp.headers)


async def _filled(api, plugins, n: int = N) -> None:
    """A pi session of ``n`` user messages, ``note 0`` .. ``note n-1`` (seq i+1), all stored."""
    p = plugins(SID)
    await p.connect()
    for i in range(n):
        await p.event("message_end", message=message("user", f"u{i}", f"note {i}" + (" needle" if i % 100 == 7 else "")))

    async def stored():
        status, page, _ = await _get(api, f"/api/sessions/{SID}/events?before=latest&limit=1")
        return status == 200 and page and page[-1]["seq"] == n

    await until(stored, what="every event stored")


async def test_pages_backward_cover_the_history_exactly_once(lvmh, api, plugins):
    await _filled(api, plugins)
    status, newest, headers = await _get(api, f"/api/sessions/{SID}/events?before=latest&limit=250")
    assert status == 200 and headers["X-Lvmh-Older"] == "true"
    assert [e["seq"] for e in newest] == list(range(351, 601))  # the newest 250, oldest first
    pages = [newest]
    while headers["X-Lvmh-Older"] == "true":
        status, page, headers = await _get(api, f"/api/sessions/{SID}/events?before={pages[-1][0]['seq']}&limit=250")
        assert status == 200 and page
        pages.append(page)
    assert [len(p) for p in pages] == [250, 250, 100] and headers["X-Lvmh-Older"] == "false"
    backward = [e for p in reversed(pages) for e in p]
    # the same events, the same texts, as the spec's forward read
    forward = await api.events(SID, after=0) + await api.events(SID, after=1000)
    assert backward == forward
    assert backward[0]["message"]["text"] == "note 0" and backward[-1]["message"]["text"] == "note 599"
    # below the first event: nothing, and nothing older; a page may straddle any seq
    status, page, headers = await _get(api, f"/api/sessions/{SID}/events?before=1")
    assert (status, page, headers["X-Lvmh-Older"]) == (200, [], "false")
    status, page, headers = await _get(api, f"/api/sessions/{SID}/events?before=11&limit=3")
    assert [e["seq"] for e in page] == [8, 9, 10] and headers["X-Lvmh-Older"] == "true"
    # the spec's read is unchanged: no header, the events above `after`
    status, page, headers = await _get(api, f"/api/sessions/{SID}/events?after=598")
    assert [e["seq"] for e in page] == [599, 600] and "X-Lvmh-Older" not in headers


async def test_history_pages_of_a_bridge_conversation(lvmh, api):
    conv = await lvmh.bridge.execute(cmd.CreateConversation(name="Paged"), cmd.LOCAL)
    cid = conv.conversation_id
    for n, text in enumerate(("first words", "/tool grep", "last words"), 1):
        status, _ = await api.post(f"/api/sessions/{cid}/prompt", {"message": text})
        assert status == 200
        await api.wait_events(cid, lambda evs, n=n: sum(e["type"] == "agent_settled" for e in evs) == n)
    everything = await api.events(cid)
    status, newest, headers = await _get(api, f"/api/sessions/{cid}/events?before=latest&limit=5")
    assert newest == everything[-5:] and headers["X-Lvmh-Older"] == "true"
    assert newest[-1]["type"] == "agent_settled"
    status, older, headers = await _get(api, f"/api/sessions/{cid}/events?before={newest[0]['seq']}&limit=1000")
    assert older + newest == everything and headers["X-Lvmh-Older"] == "false"
    # find: the tool's name, the user's words, newest first
    status, found, _ = await _get(api, f"/api/sessions/{cid}/search?q=WORDS")
    assert status == 200 and found["next"] is None
    assert [(h["kind"], h["snippet"]) for h in found["hits"]] == [
        ("message", "Echo: last words"), ("message", "last words"), ("message", "Echo: first words"),
        ("message", "first words")]
    status, found, _ = await _get(api, f"/api/sessions/{cid}/search?q=grep")
    assert "tool" in {h["kind"] for h in found["hits"]} and "message" in {h["kind"] for h in found["hits"]}


async def test_find_in_a_conversation_asks_the_server(lvmh, api, plugins):
    await _filled(api, plugins)
    status, found, _ = await _get(api, f"/api/sessions/{SID}/search?q=NEEDLE")
    assert status == 200 and found["next"] is None
    hits = found["hits"]
    assert [h["seq"] for h in hits] == [508, 408, 308, 208, 108, 8]  # newest first
    first = hits[-1]
    assert (first["type"], first["kind"], first["id"]) == ("message_end", "message", "u7")
    a, b = first["match"]
    assert first["snippet"] == "note 7 needle" and first["snippet"][a:b] == "needle"
    # a page of hits, then the rest from where it stopped
    status, part, _ = await _get(api, f"/api/sessions/{SID}/search?q=needle&limit=4")
    assert [h["seq"] for h in part["hits"]] == [508, 408, 308, 208] and part["next"] == 208
    status, rest, _ = await _get(api, f"/api/sessions/{SID}/search?q=needle&before={part['next']}")
    assert [h["seq"] for h in rest["hits"]] == [108, 8] and rest["next"] is None
    # what SQL or JSON gives a meaning to is plain text here; the keys of the JSON are not searched
    for q in ("%", "_", "note%", '"role"', "role", "\\"):
        status, none, _ = await _get(api, f"/api/sessions/{SID}/search?q={aiohttp.helpers.quote(q, safe='')}")
        assert status == 200 and none["hits"] == [], q
    status, one, _ = await _get(api, f"/api/sessions/{SID}/search?q=note+599")
    assert [h["seq"] for h in one["hits"]] == [600]


async def test_a_long_search_is_read_in_bounded_steps(lvmh, api, plugins, monkeypatch):
    monkeypatch.setattr(history, "CHUNK", 50)
    monkeypatch.setattr(history, "SCAN_BUDGET", 200)
    await _filled(api, plugins)
    status, found, _ = await _get(api, f"/api/sessions/{SID}/search?q=needle")
    # 200 events read, from 600 down to 401: the hits there, and where to go on
    assert [h["seq"] for h in found["hits"]] == [508, 408] and found["next"] == 401
    seen = [h["seq"] for h in found["hits"]]
    while found["next"] is not None:
        status, found, _ = await _get(api, f"/api/sessions/{SID}/search?q=needle&before={found['next']}")
        seen += [h["seq"] for h in found["hits"]]
    assert seen == [508, 408, 308, 208, 108, 8]


@pytest.mark.parametrize("query", ["after=5&before=10", "before=abc", "before=0", "before=-3", "limit=0&before=9",
                                   "before=1e9"])
async def test_bad_page_queries_are_400(lvmh, api, plugins, query):
    await (plugins(SID)).connect()
    status, body, _ = await _get(api, f"/api/sessions/{SID}/events?{query}")
    assert status == 400 and isinstance(body["error"], str), (query, body)


@pytest.mark.parametrize("query", ["", "q=", "q=+++", "q=" + "x" * 201, "q=a&limit=zero", "q=a&before=nope"])
async def test_bad_searches_are_400(lvmh, api, plugins, query):
    await (plugins(SID)).connect()
    status, body, _ = await _get(api, f"/api/sessions/{SID}/search?{query}")
    assert status == 400 and isinstance(body["error"], str), (query, body)


async def test_who_may_page_and_search(lvmh, api, plugins):
    """The user's token from this origin reads pages and finds; a worker's credential (even for this very
    session), a wrong token, none, or a foreign Origin read nothing; an unknown session is a 404."""
    await _filled(api, plugins, 20)
    worker = await lvmh.frontends["lvmh"].workers.issue(SID)
    paths = [f"/api/sessions/{SID}/events?before=latest", f"/api/sessions/{SID}/search?q=note",
             f"/api/sessions/{SID}", "/api/sessions?limit=5"]
    for path in paths:
        for headers, refused in (({}, 401), ({"Authorization": "Bearer wrong-token-wrong-token"}, 401),
                                 ({"Authorization": f"Bearer {worker}"}, 403),
                                 ({"Authorization": f"Bearer {LVMH_TOKEN}", "Origin": "https://evil.example"}, 403)):
            status, body, _ = await _get(api, path, headers=headers)
            assert status == refused and "note" not in json.dumps(body), (path, headers, status)
        status, body, _ = await _get(api, path)
        assert status == 200, (path, body)
    for path in ("/api/sessions/nope/events?before=latest", "/api/sessions/nope/search?q=note", "/api/sessions/nope"):
        status, body, _ = await _get(api, path)
        assert status == 404 and body["code"] == "not_found", path


async def test_pages_and_search_after_a_restart(service_factory, tmp_path):
    """What was stored pages and is found the same after the daemon restarts."""
    from tests.lvmh.helpers import Api, FakePlugin

    svc = await service_factory(adapters=("lvmh",))
    api = Api(svc.ports["lvmh"])
    p = FakePlugin(svc.ports["lvmh"], SID)
    try:
        await _filled(api, lambda sid: p, 120)
        status, before, _ = await _get(api, f"/api/sessions/{SID}/events?before=latest&limit=50")
    finally:
        await p.close()
        await api.close()
    await svc.stop()
    again = await service_factory(adapters=("lvmh",), data_dir=tmp_path)
    api = Api(again.ports["lvmh"])
    try:
        status, after, headers = await _get(api, f"/api/sessions/{SID}/events?before=latest&limit=50")
        assert status == 200 and after == before and headers["X-Lvmh-Older"] == "true"
        status, found, _ = await _get(api, f"/api/sessions/{SID}/search?q=needle")
        assert [h["seq"] for h in found["hits"]] == [108, 8]
    finally:
        await api.close()


async def test_the_bench_fill_stores_what_the_server_stores(service_factory, tmp_path):
    """bench/long.py writes long conversations straight into a data dir (its fast path): a server started on
    it reads them as its own (pages, search), numbers new events above them, and a turn it stores itself has
    the same events as a filled turn of the same kind."""
    from bench.long import fill
    from tests.lvmh.helpers import Api

    data = tmp_path / "data"
    [(cid, last)] = fill(str(data), [("filled", 30)]).values()
    svc = await service_factory(adapters=("lvmh",), data_dir=tmp_path)
    api = Api(svc.ports["lvmh"])
    try:
        assert svc.bridge.conversations[cid].name == "filled"
        status, page, headers = await _get(api, f"/api/sessions/{cid}/events?before=latest&limit=1000")
        assert [e["seq"] for e in page] == list(range(1, last + 1)) and headers["X-Lvmh-Older"] == "false"
        status, found, _ = await _get(api, f"/api/sessions/{cid}/search?q=tok29x")
        assert [h["kind"] for h in found["hits"]] == ["message", "tool", "tool", "message"]  # newest first
        filled_turn = [e["type"] for e in page if e["seq"] > [x["seq"] for x in page if x["type"] == "agent_settled"][-3]]
        filled_turn = filled_turn[:filled_turn.index("agent_settled") + 1]  # turn 28: no tool, no approval
        status, _ = await api.post(f"/api/sessions/{cid}/prompt", {"message": "hello"})
        assert status == 200
        evs = await api.wait_events(cid, lambda e: sum(x["type"] == "agent_settled" for x in e) == 31)
        live = [e for e in evs if e["seq"] > last]
        assert live[0]["seq"] > last  # numbered above the filled ones
        assert [e["type"] for e in live] == filled_turn
    finally:
        await api.close()
