"""A hostile or failing push endpoint never makes the bridge spin (docs/security.md, "a hostile push
endpoint"): exponential backoff never under 1 s whatever ``Retry-After`` says, its failures
logged at most once a minute, one ``delivery_id`` for every try of one delivery, across a
``kill -9`` too (a real ``agent-bridge serve`` process)."""

from __future__ import annotations

import aiohttp
import pytest

from bridge_core.kit.config import parse_push
from bridge_core.model.errors import ConfigError
from tests.hardening.proc import LVMH_TOKEN, BridgeProcess, count_rows
from tests.push.conftest import WEBHOOK_SECRET
from tests.waiting import until


async def test_a_503_with_retry_after_0_is_retried_with_backoff_logged_once_and_delivered_once(tmp_path, webhook):
    webhook.status, webhook.retry_after = 503, "0"  # "try again right now", forever
    proc = BridgeProcess(str(tmp_path / "bridge"), adapters="pheby,lvmh", config={"push": {
        "run_seconds": 0, "webhook_url": webhook.url, "webhook_secret": WEBHOOK_SECRET}})  # fmt: skip
    proc.start()
    try:
        base = f"http://127.0.0.1:{proc.ports['lvmh']}"
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {LVMH_TOKEN}"}) as http:
            async with http.post(base + "/api/conversations", json={"name": "Flaky hook"}) as r:
                cid = (await r.json())["id"]
            async with http.post(base + f"/api/sessions/{cid}/prompt", json={"message": "hello"}) as r:
                assert r.status == 200
        await until(lambda: len(webhook.attempts) >= 3, timeout=30, what="three refused tries")
        (t1, first), (t2, _), (t3, _) = webhook.attempts[:3]
        assert (first["kind"], first["conversation_id"]) == ("run_finished", cid)
        # never sooner than 1 s after the last try, and doubling: 1 s, then 2 s (the default retry_seconds)
        assert t2 - t1 >= 0.99 and t3 - t2 >= 1.99, (t2 - t1, t3 - t2)
        ids = {m["delivery_id"] for _, m in webhook.attempts}
        assert len(ids) == 1 and len(first["delivery_id"]) == 32, ids  # one delivery, one id on every try
        # three failures in well under a minute: one log line
        assert proc.stderr().count("push: webhook:") == 1, proc.stderr()[-2000:]
        assert "answered 503" in proc.stderr()

        proc.kill9()
        tried = len(webhook.attempts)
        webhook.status, webhook.retry_after = 204, None  # the endpoint recovers while the bridge is down
        proc.start()
        await until(lambda: webhook.received, timeout=30, what="the delivery after the restart")
        await until(lambda: count_rows(proc.db_path(), "SELECT count(*) FROM push_queue") == 0,
                    what="the queue emptied")  # fmt: skip
        assert [m["delivery_id"] for m in webhook.received] == [first["delivery_id"]]  # once, the same id
        assert len(webhook.attempts) == tried + 1
        assert webhook.refused == []
    finally:
        proc.stop()


def test_a_retry_sooner_than_a_second_is_refused_in_the_config():
    with pytest.raises(ConfigError, match="push.retry_seconds must be at least 1"):
        parse_push({"retry_seconds": 0.05})
    with pytest.raises(ConfigError, match="push.retry_max_seconds"):
        parse_push({"retry_seconds": 10, "retry_max_seconds": 5})
    assert parse_push({"retry_seconds": 2}).retry_seconds == 2.0
