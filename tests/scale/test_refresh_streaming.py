"""A transcript read again from the store after a gap leaves out the saved draft of a run the store has open (chaos
seed 2003: ``transcript_contradicts_client``, a Pheby ``conversation.open`` showing a streaming run's first words
'tok ' as a message where the store ended with 10,668 chars; bridge_core/bridge/transcripts.py ``refresh``).

A node whose delivery passed over numbers the stream lost reads its transcripts in memory again from the store
(bridge_core/scale/gone.py). The stream had lost a run's start: the node did not know the run was streaming, and
took the run's saved draft row (drafts.py) for a message. When the start came back (its node sent it again), the
node's ``conversation.open`` showed both the run and its first words as a message. Now the draft row of a run the
store has open is no message yet, as a transcript's load leaves an active run's unfinished message out, unless a
user's message came after it (the run then ended: one run per conversation). The core's real store (SQLite)."""

from __future__ import annotations

from bridge_core.bridge.sqlite import Store
from bridge_core.bridge.transcripts import Transcripts
from bridge_core.model.state import ConversationState

T = 1_796_560_000.0


def _store(tmp_path, *, user_after: bool = False):
    store = Store(str(tmp_path / "core.db")).open()

    def write(c) -> None:
        c.execute("INSERT INTO conversations(id, name, source, created_at, updated_at) VALUES('c1','t','demo',?,?)",
                  (T, T))  # fmt: skip
        c.execute("INSERT INTO messages(conversation_id, message_id, role, text, ts) VALUES('c1','u-1','user','hi',?)",
                  (T,))  # fmt: skip
        c.execute("INSERT INTO messages(conversation_id, message_id, role, text, ts) VALUES('c1','draft-r1',"
                  "'assistant','Echo: hi',?)", (T + 0.1,))  # fmt: skip
        c.execute("INSERT INTO runs(run_id, conversation_id, status, started_at, finished_at) VALUES"
                  "('r1','c1','completed',?,?)", (T, T + 0.2))  # fmt: skip
        # what the stream lost: the next user's message and the start of a run streaming now (its draft saved)
        c.execute("INSERT INTO messages(conversation_id, message_id, role, text, ts) VALUES('c1','u-2','user',"
                  "'/bench 2667 500',?)", (T + 1,))  # fmt: skip
        c.execute("INSERT INTO runs(run_id, conversation_id, status, started_at) VALUES('r2','c1','running',?)",
                  (T + 1,))  # fmt: skip
        c.execute("INSERT INTO messages(conversation_id, message_id, role, text, ts) VALUES('c1','draft-r2',"
                  "'assistant','tok ',?)", (T + 1.001,))  # fmt: skip
        if user_after:  # its end held back (the store's writer), the next user's message committed
            c.execute("INSERT INTO messages(conversation_id, message_id, role, text, ts) VALUES('c1','u-3','user',"
                      "'next',?)", (T + 3,))  # fmt: skip

    store.write_later(write)
    store.flush()
    return store


def _hot(store) -> tuple[Transcripts, ConversationState]:
    keeper = Transcripts(store)
    conv = ConversationState(conversation_id="c1", name="t", keeper=keeper)
    t = keeper.load(conv)
    while len(t) > 2:  # in memory: what this node had before the gap (the first exchange)
        del t[len(t) - 1]
    return keeper, conv


def test_a_refresh_leaves_a_streaming_runs_draft_out(tmp_path):
    store = _store(tmp_path)
    try:
        keeper, conv = _hot(store)
        assert conv.run is None  # the run's start lost to this node
        assert keeper.refresh() == 1
        assert [m.message_id for m in conv.transcript] == ["u-1", "draft-r1", "u-2"]  # not 'tok ' as a message
    finally:
        store.close()


def test_a_refresh_keeps_a_draft_a_users_message_came_after(tmp_path):
    store = _store(tmp_path, user_after=True)
    try:
        keeper, conv = _hot(store)
        assert keeper.refresh() == 3  # its run has ended (one run per conversation): its row, where it is
        assert [m.message_id for m in conv.transcript] == ["u-1", "draft-r1", "u-2", "draft-r2", "u-3"]
    finally:
        store.close()
