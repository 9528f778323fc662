"""The core's reads of conversations (store.BaseStore: conversation_list, transcript, message_text),
the same on SQLite and PostgreSQL, and a bridge on each engine that reads only the list at start.
"""

from __future__ import annotations

from bridge_core.bridge.bridge import Bridge
from bridge_core.bridge.demo import DemoAgent
from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from tests.waiting import until

MESSAGE = "INSERT OR REPLACE INTO messages(conversation_id, message_id, role, text, ts) VALUES(?,?,?,?,?)"
CONV = "INSERT INTO conversations(id, name, source, created_at, updated_at, last_active, session_id) VALUES(?,?,?,?,?,?,?)"


async def test_the_list_with_each_last_message_as_preview(open_store):
    s = open_store()
    await s.write(lambda c: c.executemany(CONV, [("a", "A", "demo", 1.0, 2.0, 3.0, None),
                                                 ("b", "B", "hermes", 4.0, 5.0, None, "sess")]))  # fmt: skip
    long = "ü" * 150 + "😀" * 100  # characters, not bytes, as Python's text[:200]
    rows = [("a", "m1", "user", "first", 1.0), ("a", "m2", "assistant", long, 2.0), ("a", "m3", "user", "x", 3.0)]
    for row in rows:
        await s.write(lambda c, row=row: c.execute(MESSAGE, row))
    await s.write(lambda c: c.execute(MESSAGE, ("a", "m2", "assistant", long, 4.0)))  # replaced: now the last
    got = sorted(s.conversation_list())
    assert got == [("a", "A", "demo", 1.0, 2.0, 3.0, None, long[:200]),
                   ("b", "B", "hermes", 4.0, 5.0, None, "sess", None)]  # fmt: skip


async def test_a_transcript_is_its_last_messages_in_insertion_order(open_store):
    s = open_store()
    for i in range(10):
        await s.write(lambda c, i=i: c.execute(MESSAGE, ("a", f"m{i}", "user", f"t{i}", float(i))))
    await s.write(lambda c: c.execute(MESSAGE, ("b", "other", "user", "no", 0.0)))
    await s.write(lambda c: c.execute(MESSAGE, ("a", "m3", "assistant", "t3 final", 11.0)))
    assert s.transcript("a", 4) == [("m7", "user", "t7", 7.0), ("m8", "user", "t8", 8.0), ("m9", "user", "t9", 9.0),
                                    ("m3", "assistant", "t3 final", 11.0)]  # fmt: skip
    assert [r[0] for r in s.transcript("a", 100)] == ["m0", "m1", "m2", "m4", "m5", "m6", "m7", "m8", "m9", "m3"]
    assert s.transcript("nobody", 10) == []
    assert s.message_text("a", "m3") == "t3 final" and s.message_text("a", "zz") is None


async def test_a_bridge_on_either_engine_reads_transcripts_on_demand(open_store, tmp_path):
    origin = cmd.Origin(surface="pheby")

    async def turn(b, text, cid=None):
        events = []
        unsub = b.hub.subscribe(lambda s, e: events.append(e))
        res = await b.execute(cmd.SendMessage(text=text, conversation_id=cid), origin)
        await until(lambda: any(isinstance(e, ev.RunFinished) for e in events), what="the run's end")
        unsub()
        return res.conversation_id

    b = Bridge(str(tmp_path / "one"), DemoAgent(approval_timeout=None), store=open_store(tmp_path / "one"))
    await b.start()
    cids = [await turn(b, f"hello {i}") for i in range(3)]
    await turn(b, "again", cids[1])
    before = {cid: [(m.message_id, m.text, m.ts) for m in b.conversation(cid).messages] for cid in cids}
    await b.stop()

    b2 = Bridge(str(tmp_path / "two"), DemoAgent(approval_timeout=None), store=open_store(tmp_path / "one"))
    await b2.start()
    try:
        assert sorted(b2.conversations) == sorted(cids)
        assert all(c.transcript is None for c in b2.conversations.values())
        assert b2.conversation(cids[1]).preview == "Echo: again"
        for cid in cids:
            assert [(m.message_id, m.text, m.ts) for m in b2.conversation(cid).messages] == before[cid]
        assert b2.transcripts.loads == 3
    finally:
        await b2.stop()
