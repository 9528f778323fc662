"""A batch the bus sent again is delivered once (bridge_core/scale/buswrite.py; chaos seed 2000: phones
got two deltas twice around Redis restarts). Redis took the batch and its answer was lost (the
connection went, Redis restarted): the writer sent the batch again. Signed again, with a fresh counter,
the second copy was a new genuine entry, and every node delivered its events twice. Sent as it was
signed, a node that read the first copy drops the second as replayed (busauth.py), and the numbers the
second copy took are no entry a refetch gives back (catchup.py): its writer does not keep a batch it
sent twice. On a real Redis."""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError

from tests.scale.test_bus import Node, redis_bus
from tests.waiting import until


class AnswerLost:
    """The bus's next pipeline runs on Redis, then fails as if its answer had been lost, once."""

    def __init__(self, bus):
        self.hits = 0
        make = bus._r.pipeline

        def pipeline(*args, **kw):
            pipe = make(*args, **kw)
            run = pipe.execute

            async def execute(*a, **k):
                result = await run(*a, **k)
                if self.hits == 0:
                    self.hits += 1
                    raise RedisConnectionError("the answer was lost")
                return result

            pipe.execute = execute
            return pipe

        bus._r.pipeline = pipeline


async def test_a_batch_sent_again_after_its_answer_was_lost_is_delivered_once(redis_server, redis_url):
    a = await Node(redis_bus(redis_url, "a")).start()
    b = await Node(redis_bus(redis_url, "b")).start()
    try:
        lost = AnswerLost(a.bus)
        a.bus.publish({"i": 1})
        await until(lambda: lost.hits == 1 and a.bus.published == 1, what="the batch sent again")
        a.bus.publish({"i": 2})  # after it: once b has this, b has read both copies
        for node in (a, b):
            await until(lambda: any(d == {"i": 2} for _, _, d in node.events), what="the next event")
            assert [d for _, _, d in node.events] == [{"i": 1}, {"i": 2}], node.events
            assert node.bus.dropped["replayed"] == 1
    finally:
        for node in (a, b):
            await node.bus.stop()
