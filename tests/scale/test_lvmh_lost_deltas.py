"""A browser that got a message's start gets its whole text in ``message_update``s before its end, even
when the stream lost the message's deltas on the way to its node (issue 41, chaos seed 2003
``deltas_incomplete``: browser-1 on n2 got a message's ``message_start`` and its ``message_end`` of 70 chars,
none of its deltas; lvmh_adapter/book.py ``_fill``).

Several nodes: a Redis restart can lose entries for good (their writer killed before a reader refetched
them). What the node's deltas fell short of the completion goes out as one more ``message_update``,
under the last seq below the completion's (never stored: the stored events stay the same on every node).
Here the node's front end never gets the run's text deltas, as if the stream had lost them.
"""

from __future__ import annotations

from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from tests.lvmh.helpers import Api, Browser
from tests.scale.test_cluster import _nodes


def _assistant(events: list, etype: str) -> list:
    return [e for e in events if e["type"] == etype and e["message"]["role"] == "assistant"]


async def test_a_browser_gets_the_text_its_node_lost_the_deltas_of(service_factory, engines, tmp_path):
    (a,) = await _nodes(service_factory, engines, tmp_path, "a", adapters=("lvmh",))
    book = a.frontends["lvmh"].book
    api, browser = Api(a.ports["lvmh"]), await Browser(a.ports["lvmh"]).open()
    try:
        conv = await a.bridge.execute(cmd.CreateConversation(name="deltas lost"), cmd.LOCAL)
        sid = conv.conversation_id
        await browser.subscribe(sid)
        on_event = book.on_event

        def lossy(n, e):  # the stream lost this conversation's text deltas on their way here
            if not (type(e) is ev.TextDelta and e.conversation_id == sid):
                on_event(n, e)

        subs = a.bridge.hub._subs
        subs[subs.index(on_event)] = lossy  # (the front end's subscriber: its book's on_event)
        status, _ = await api.post(f"/api/sessions/{sid}/prompt", {"message": "hello lost deltas"})
        assert status == 200
        got = await browser.events_until(sid, lambda e: e["type"] == "agent_settled", timeout=10)
        start, end = _assistant(got, "message_start"), _assistant(got, "message_end")
        assert len(start) == len(end) == 1 and start[0]["message"]["id"] == end[0]["message"]["id"], got
        text = end[0]["message"]["text"]
        assert text.startswith("Echo: hello lost deltas"), text
        updates = [e for e in got if e["type"] == "message_update"]
        assert "".join(e["delta"] for e in updates) == text, [e["type"] for e in got]
        seqs = [e["seq"] for e in got]
        assert seqs == sorted(set(seqs)), seqs
        await book.log.aflush()
        stored = await api.events(sid)  # the filler is never stored: the stored events are every node's
        assert [e for e in got if e["type"] != "message_update"] == [e for e in stored if e["seq"] >= seqs[0]]
    finally:
        await browser.close()
        await api.close()
