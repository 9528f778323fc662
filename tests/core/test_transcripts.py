"""Transcripts read from the store on demand, a bounded number kept in memory (bridge/transcripts.py).

Start-up reads the list, not the messages; a transcript dropped from memory and read back is
the one that was dropped; the bound holds whatever a client opens; what cannot be read back
as it is (an active run's, one with writes not yet committed, one Hermes replaced) stays.
"""

from __future__ import annotations

import pytest

from bridge_core.bridge.bridge import Bridge
from bridge_core.bridge.demo import DemoAgent
from bridge_core.bridge.sqlite import Store
from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from tests.pheby.client import PhebyClient
from tests.waiting import until

PHEBY = cmd.Origin(surface="pheby")


class CountingStore(Store):
    """A SQLite store that counts the transcript rows read from it (every read of ``messages``
    returning a role column)."""

    def __init__(self, path: str):
        super().__init__(path)
        self.message_rows = 0

    def query(self, sql, params=()):
        rows = super().query(sql, params)
        if "FROM messages" in sql and "role" in sql:
            self.message_rows += len(rows)
        return rows


async def turn(bridge, text, cid=None):
    events = []
    unsub = bridge.hub.subscribe(lambda s, e: events.append(e))
    res = await bridge.execute(cmd.SendMessage(text=text, conversation_id=cid), PHEBY)
    await until(lambda: any(isinstance(e, ev.RunFinished) and e.run_id == res.run_id for e in events),
                what="the run's end")  # fmt: skip
    unsub()
    return res.conversation_id


def transcript_of(conv):
    return [(m.message_id, m.role, m.text, m.ts) for m in conv.messages]


async def filled(tmp_path, n=6, turns=2):
    """A data dir with ``n`` conversations of ``turns`` turns; what each one's state was."""
    d = str(tmp_path / "d")
    b = Bridge(d, DemoAgent(approval_timeout=None))
    await b.start()
    cids = []
    for i in range(n):
        cid = await turn(b, f"first {i} " + "é" * 300)
        for t in range(1, turns):
            await turn(b, f"turn {t} of {i} " + "é" * 300, cid)
        cids.append(cid)
    before = {cid: (b.conversation(cid).preview, transcript_of(b.conversation(cid))) for cid in cids}
    listed = [c.conversation_id for c in b.list_conversations()]
    await b.stop()
    return d, cids, before, listed


async def test_a_restart_reads_the_list_not_the_messages(tmp_path):
    d, cids, before, listed = await filled(tmp_path)
    store = CountingStore(f"{d}/bridge.db")
    b = Bridge(d, DemoAgent(approval_timeout=None), store=store)
    await b.start()
    try:
        assert store.message_rows == 0  # not one message read at start
        assert all(b.conversation(cid).transcript is None for cid in cids)
        assert [c.conversation_id for c in b.list_conversations()] == listed
        for cid in cids:
            conv = b.conversation(cid)
            assert conv.preview == before[cid][0]
            assert len(conv.preview) == 200  # the last message's first 200 characters (a 2-byte one here)
        # opening one reads that one's messages, and it is the transcript it was before the restart
        snap = await b.execute(cmd.OpenConversation(conversation_id=cids[2], limit=200), PHEBY)
        assert [(m.message_id, m.role, m.text, m.ts) for m in snap.messages] == before[cids[2]][1]
        assert store.message_rows == len(before[cids[2]][1]) == 4
        assert b.transcripts.loads == 1
    finally:
        await b.stop()


async def test_a_run_in_a_cold_conversation_appends_to_its_stored_transcript(tmp_path):
    d, cids, before, _ = await filled(tmp_path, n=2)
    b = Bridge(d, DemoAgent(approval_timeout=None))
    await b.start()
    try:
        await turn(b, "one more", cids[0])
        got = transcript_of(b.conversation(cids[0]))
        assert got[:-2] == before[cids[0]][1]
        assert [m[1:3] for m in got[-2:]] == [("user", "one more"), ("assistant", "Echo: one more")]
    finally:
        await b.stop()
    b = Bridge(d, DemoAgent(approval_timeout=None))
    await b.start()
    try:
        assert transcript_of(b.conversation(cids[0])) == got  # the same after a restart
    finally:
        await b.stop()


async def test_dropped_and_read_back_is_the_same_transcript(tmp_path):
    b = Bridge(str(tmp_path / "d"), DemoAgent(approval_timeout=None), hot_transcripts=2)
    await b.start()
    try:
        cids = [await turn(b, f"hello {i}") for i in range(3)]
        await turn(b, "again", cids[0])
        kept = {cid: transcript_of(b.conversation(cid)) for cid in cids}
        await b.store.synced()  # (a transcript whose writes are still queued is not dropped)
        for cid in cids:  # each one read, the others dropped in turn
            assert transcript_of(b.conversation(cid)) == kept[cid]
            assert len(b.transcripts) <= 2
        assert b.transcripts.dropped >= 2 and b.transcripts.loads >= 2
    finally:
        await b.stop()


async def test_what_the_store_cannot_give_back_stays_in_memory(tmp_path):
    b = Bridge(str(tmp_path / "d"), DemoAgent(approval_timeout=None), hot_transcripts=1)
    await b.start()
    try:
        running = await b.execute(cmd.SendMessage(text="/slow 30"), PHEBY)
        busy = b.conversation(running.conversation_id)
        await until(lambda: busy.run is not None and busy.run.text, what="the slow run's first words")
        held = b.create_conversation("Hermes's own")
        held.messages.clear()  # replaced from outside (the Hermes source adopting its sessions)
        held.messages.extend([ev.Message(message_id="h1", role="user", text="from hermes", ts=1.0)])
        await turn(b, "a third")
        # over the bound of 1, but neither the running one nor the replaced one can be read back as it is
        assert busy.transcript is not None and held.transcript is not None
        assert [m.text for m in held.messages] == ["from hermes"]
        await b.execute(cmd.CancelRun(conversation_id=busy.conversation_id), PHEBY)
    finally:
        await b.stop()


async def test_a_transcript_whose_writes_are_queued_is_not_dropped(tmp_path):
    b = Bridge(str(tmp_path / "d"), DemoAgent(approval_timeout=None), hot_transcripts=1)
    await b.start()
    try:
        first = await turn(b, "first")
        b.store.processed -= 10**6  # as if none of its writes had committed yet
        try:
            await turn(b, "second")
            assert b.conversation(first).transcript is not None
        finally:
            b.store.processed += 10**6
        await b.store.synced()
        await turn(b, "third")  # now it can go
        assert b.conversation(first).transcript is None
        assert [m.text for m in b.conversation(first).messages] == ["first", "Echo: first"]
    finally:
        await b.stop()


# --- over a real socket -------------------------------------------------------------------------


@pytest.fixture
async def pheby(service_factory):
    return await service_factory(adapters=("pheby",))


async def chat(client, text, cid=None):
    cid = cid or await client.create()
    await client.send({"type": "chat.send", "conversation_id": cid, "text": text, "request_id": "s"})
    await client.collect_until("run.finished", conversation_id=cid)
    return cid


async def open_frame(client, cid, limit=200):
    return await client.request({"type": "conversation.open", "conversation_id": cid, "limit": limit, "request_id": "o"},
                                "conversation.history")  # fmt: skip


async def test_pheby_open_after_the_transcript_was_dropped_gives_the_same_frame(pheby):
    bridge = pheby.bridge
    bridge.transcripts.max_conversations = 1
    a = await PhebyClient.connect(pheby.ports["pheby"])
    cid = await chat(a, "hello there")
    await chat(a, "and again", cid)
    first = await open_frame(a, cid)
    assert [m["text"] for m in first["messages"]] == ["hello there", "Echo: hello there", "and again", "Echo: and again"]
    await bridge.store.synced()
    other = await chat(a, "elsewhere")
    assert bridge.conversation(cid).transcript is None  # dropped: the other one is in use
    loads = bridge.transcripts.loads
    assert await open_frame(a, cid) == first
    assert bridge.transcripts.loads == loads + 1 and bridge.conversation(other).transcript is None


async def test_opening_every_conversation_holds_no_more_than_the_bound(pheby):
    """An attacker holding the Pheby secret opens conversation after conversation (and creates
    more): the transcripts in memory never pass the bound; each one opened is still whole."""
    bridge = pheby.bridge
    a = await PhebyClient.connect(pheby.ports["pheby"])
    texts = [f"conversation {i} " + "x" * 2000 for i in range(8)]
    cids = [await chat(a, text) for text in texts]
    await bridge.store.synced()
    bridge.transcripts.max_conversations = 3
    bridge.transcripts.max_bytes = 3 * 4600  # about two of these transcripts (2 messages of 2 KB each)
    for _ in range(2):
        for i, cid in enumerate(cids):
            frame = await open_frame(a, cid)
            assert [m["text"] for m in frame["messages"]] == [texts[i], "Echo: " + texts[i]]
            assert len(bridge.transcripts) <= 3 and bridge.transcripts.bytes <= bridge.transcripts.max_bytes
    held = [c for c in bridge.conversations.values() if c.transcript is not None]
    assert len(held) <= 3


def test_a_state_at_rest_holds_no_tables_until_something_is_put_in_them():
    from bridge_core.model.state import ConversationState

    conv = ConversationState(conversation_id="c", name="n")
    assert conv.transcript is None and conv.keeper is None
    assert not conv.approvals and list(conv.tools.values()) == [] and conv.status == "idle"  # reading makes none
    assert (conv._tools, conv._approvals, conv._clarifications, conv._attachments) == (None, None, None, None)
    first, second = conv.approvals, conv.approvals  # two handed out before anything was put in
    first["a1"] = 1
    second["a2"] = 2  # goes to the table the first write made
    assert conv.approvals == {"a1": 1, "a2": 2} and conv.status == "waiting"
    del conv.approvals["a1"], conv.approvals["a2"]
    assert conv.status == "idle"
    assert [m.text for m in conv.messages] == [] and conv.transcript is not None  # no keeper: made empty, kept


async def test_a_state_put_in_without_a_keeper_is_bounded_too(tmp_path):
    """The cluster makes the state of a conversation another node created and puts it in the
    bridge's conversations: it gets the bridge's keeper, its transcript empty, and can be dropped."""
    from bridge_core.model.state import ConversationState

    b = Bridge(str(tmp_path / "d"), DemoAgent(approval_timeout=None), hot_transcripts=1)
    await b.start()
    try:
        remote = ConversationState(conversation_id="r" * 32, name="made elsewhere")
        b.conversations[remote.conversation_id] = remote
        assert remote.keeper is b.transcripts and remote.conversation_id in b.transcripts
        assert list(remote.messages) == []
        await turn(b, "here")
        await b.store.synced()
        await turn(b, "and here")
        assert remote.transcript is None and len(b.transcripts) == 1
    finally:
        await b.stop()
