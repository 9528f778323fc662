"""Signed bus entries (docs/scale-out.md "Signed entries"): the cluster key, the MAC every
entry carries, and the checks a node makes before it applies one. Pure: no I/O.

Whoever can write to Redis can add stream entries. A node applies only what a node of its
bridge signed, once, in its sender's order, while that node is live:

- **The cluster key** (``derive_key``): HKDF-SHA256 from the shared ``PHEBY_SECRET`` and
  ``LVMH_TOKEN``, or from ``AGENT_BRIDGE_CLUSTER_KEY`` (``[bus] key``) when that is set.
- **The MAC** (``Signer``): every entry has ``h``, a header (JSON: the version, the key of
  the stream it is for, the sender node, the sender's epoch, its counter, its clock in ms),
  ``b``, the whole payload (a batch of events and relays, or one command), and ``m``,
  HMAC-SHA256 under the cluster key over ``len(h) || h || b``. The stream's key binds the
  entry to its stream: moved to another node's inbox, or from an inbox into the events
  stream, it fails. The epoch (random, new at every start) and the counter (one more per
  entry) make every entry a node signs unique.
- **Replays** (``Verifier.check``): per (stream, sender, epoch) the counter must go up, so
  an entry added again (an ``XADD`` of the same fields) is dropped, and so is one held back
  and let through after a later one of its sender. An entry signed more than ``WINDOW_MS``
  before Redis took it (an entry id is Redis's clock in ms) is dropped: a copy can only be
  added within that window of its original, and a starting node reads ``LEARN_BACK``
  seconds of each stream before the point it delivers from, for the counters only, so the
  original is always among what it has seen.
- **Not live** (``LiveNodes``): the sender's epoch must be the one its liveness key holds
  (confirmed within ``grace``): an entry of a node the cluster takes for gone, or of an
  earlier run of a node, is dropped.

What is dropped is counted by reason (``Verifier.dropped``) and logged at most once a
minute per reason, naming no secret; the key itself only ever appears as a fingerprint.
The cluster-wide number ``n`` is not under the MAC: Redis gives it in the append script,
after the entry was signed (bridge_core/scale/redisbus.py says what a reader does about it).
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import itertools
import logging
import time
from typing import Any, Callable, Optional

import orjson
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

log = logging.getLogger("agent_bridge.bus")

VERSION = "ab1"
WINDOW_MS = 10_000  # an entry reaches Redis at most this long after it was signed (queueing, a clock behind Redis's)
AHEAD_MS = 5_000  # an entry is signed at most this long after Redis's clock (a clock ahead of Redis's)
LEARN_BACK = (WINDOW_MS + AHEAD_MS) / 1000  # seconds of a stream a starting node reads for counters only
LOG_EVERY = 60.0  # seconds between two log lines of one drop reason
KEEP_SENDERS = 4096  # (stream, node, epoch) counters kept (the oldest forgotten first)
ASK_EVERY = 0.5  # seconds between two look-ups of one node's liveness key (LiveNodes.may_ask)
KEY_BYTES = 32
_SALT = b"agent-bridge cluster key v1"

WHY = {
    "unsigned": "no MAC: not written by a node of this bridge",
    "bad_mac": "a MAC that does not verify: forged, or signed under another key (do the nodes share "
               "PHEBY_SECRET and LVMH_TOKEN, or AGENT_BRIDGE_CLUSTER_KEY?)",
    "unreadable": "signed, but unreadable",
    "wrong_stream": "signed for another stream (moved there)",
    "stale": f"signed more than {WINDOW_MS // 1000} s before Redis took it (re-added late, or the sender's clock "
             "is behind)",
    "early": f"signed more than {AHEAD_MS // 1000} s after Redis's clock (the sender's clock is ahead)",
    "replayed": "seen already, or older than an entry of its sender already seen (re-added)",
    "not_live": "from a node that is not live (gone, or an earlier run of it)",
    "renumbered": "numbered at or below a number already delivered",
}


def derive_key(pheby_secret: str, lvmh_token: str, explicit: str = "") -> bytes:
    """The cluster key: HKDF-SHA256 of ``explicit`` when given, else of both shared secrets."""
    if explicit:
        material, info = explicit.encode("utf-8"), b"explicit"
    else:
        if not pheby_secret or not lvmh_token:
            raise ValueError("the cluster key needs PHEBY_SECRET and LVMH_TOKEN, or AGENT_BRIDGE_CLUSTER_KEY")
        a, b = pheby_secret.encode("utf-8"), lvmh_token.encode("utf-8")
        material, info = len(a).to_bytes(4, "big") + a + b, b"pheby_secret+lvmh_token"
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=_SALT, info=info).derive(material)


def fingerprint(key: bytes) -> str:
    """What may be printed of a key: 8 hex digits that tell two keys apart."""
    return hashlib.sha256(b"agent-bridge cluster key fingerprint\0" + key).hexdigest()[:8]


def entry_mac(key: bytes, h: bytes, payload: bytes) -> bytes:
    return hmac.digest(key, len(h).to_bytes(4, "big") + h + payload, "sha256")


def genuine(key: bytes, stream: str, entry_id: Any, fields: dict) -> bool:
    """Is ``fields`` a genuine entry of ``stream`` (its MAC, its header naming that stream, its time
    Redis's), read without noting its counter (``RedisBus.newest`` reads old entries back; applying
    an entry is ``Verifier.check``'s)."""
    h, payload, mac = fields.get(b"h"), fields.get(b"b"), fields.get(b"m")
    if not (type(h) is bytes and type(payload) is bytes and type(mac) is bytes):
        return False
    if not hmac.compare_digest(entry_mac(key, h, payload), mac):
        return False
    try:
        version, where, _node, _epoch, _counter, ts = orjson.loads(h)
    except (ValueError, TypeError):
        return False
    ms = entry_ms(entry_id)
    return version == VERSION and where == stream and type(ts) is int and ms - WINDOW_MS <= ts <= ms + AHEAD_MS


def entry_ms(entry_id: Any) -> int:
    """The milliseconds of a stream entry id (``b"1700000000000-3"``): Redis's clock when it took it."""
    raw = entry_id if isinstance(entry_id, bytes) else str(entry_id).encode()
    return int(raw.partition(b"-")[0])


def entry_order(entry_id: Any) -> tuple[int, int]:
    """A stream entry id as (ms, seq), for comparing two of them."""
    raw = entry_id if isinstance(entry_id, bytes) else str(entry_id).encode()
    ms, _, seq = raw.partition(b"-")
    return int(ms), int(seq or 0)


class Signer:
    """One node's signature on what it writes: ``sign(stream, payload)`` -> the ``h`` and ``m`` fields."""

    __slots__ = ("key", "node", "epoch", "_counter", "_clock")

    def __init__(self, key: bytes, node: str, epoch: str, clock: Callable[[], float] = time.time):
        self.key, self.node, self.epoch = key, node, epoch
        self._counter = itertools.count(1)
        self._clock = clock

    def sign(self, stream: str, payload: bytes) -> tuple[bytes, bytes]:
        h = orjson.dumps([VERSION, stream, self.node, self.epoch, next(self._counter), int(self._clock() * 1000)])
        return h, entry_mac(self.key, h, payload)


class Verifier:
    """The MAC, stream, window and replay checks of every entry a node reads; drops counted."""

    def __init__(self, key: bytes, clock: Callable[[], float] = time.monotonic):
        self.key = key
        self.dropped: collections.Counter = collections.Counter()
        self._last: collections.OrderedDict = collections.OrderedDict()  # (stream, node, epoch) -> counter
        self._logged: dict[str, float] = {}
        self._clock = clock

    def check(self, stream: str, entry_id: Any, fields: dict) -> Optional[tuple[str, str]]:
        """``(node, epoch)`` of a genuine entry of ``stream`` not seen before (its counter noted), else
        None (dropped and counted). ``fields``: the entry as redis-py gives it (bytes keys)."""
        h, payload, mac = fields.get(b"h"), fields.get(b"b"), fields.get(b"m")
        if not (type(h) is bytes and type(payload) is bytes and type(mac) is bytes):
            return self.drop("unsigned", _claimed(fields.get(b"h") or fields.get(b"node") or fields.get(b"c") or b""))
        if not hmac.compare_digest(entry_mac(self.key, h, payload), mac):
            return self.drop("bad_mac", _claimed(h))
        try:
            version, where, node, epoch, counter, ts = orjson.loads(h)
            ok = version == VERSION and type(node) is str and type(epoch) is str and type(counter) is int \
                and type(ts) is int  # fmt: skip
        except (ValueError, TypeError):
            ok = False
        if not ok:
            return self.drop("unreadable")
        if where != stream:
            return self.drop("wrong_stream", _from(node))
        ms = entry_ms(entry_id)
        if ts < ms - WINDOW_MS:
            return self.drop("stale", _from(node))
        if ts > ms + AHEAD_MS:
            return self.drop("early", _from(node))
        sender = (stream, node, epoch)
        if counter <= self._last.get(sender, 0):
            return self.drop("replayed", _from(node))
        self._last[sender] = counter
        self._last.move_to_end(sender)
        if len(self._last) > KEEP_SENDERS:
            self._last.popitem(last=False)
        return node, epoch

    def drop(self, reason: str, who: str = "") -> None:
        """Count a dropped entry (``who``: whence, as a phrase); a log line at most once a minute per
        reason, naming no secret."""
        self.dropped[reason] += 1
        now = self._clock()
        last = self._logged.get(reason)
        if last is None or now - last >= LOG_EVERY:
            self._logged[reason] = now
            log.warning("bus: dropped an entry%s: %s (%d %s so far)", f" {who}" if who else "",
                        WHY.get(reason, reason), self.dropped[reason], reason)  # fmt: skip
        return None


def _claimed(raw: Any) -> str:
    """Who an entry that failed its MAC says it is from (never trusted), for the log line."""
    name: Any = None
    try:
        data = orjson.loads(raw)
        if isinstance(data, list) and len(data) > 2:
            name = data[2]
        elif isinstance(data, dict):
            name = data.get("from")
    except (ValueError, TypeError):
        name = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else None
    return f"claiming to be from {str(name)[:40]!r}" if name else ""


def _from(node: str) -> str:
    return f"from node {node[:64]!r}"


class LiveNodes:
    """Which (node, epoch) this node last saw in the liveness keys, and when (loop time).

    A node counts as live while its epoch was confirmed within ``grace`` seconds (the bus
    reads every key at every beat): a node's last entries, read just after it stopped, still
    count; a node gone for longer does not."""

    def __init__(self, grace: float):
        self.grace = grace
        self._confirmed: dict[str, tuple[str, float]] = {}
        self._asked: dict[str, float] = {}

    def confirm(self, node: str, epoch: str, now: float) -> None:
        self._confirmed[node] = (epoch, now)

    def known(self, node: str, epoch: str, now: float) -> bool:
        rec = self._confirmed.get(node)
        return rec is not None and rec[0] == epoch and now - rec[1] <= self.grace

    def recent(self, now: float) -> list[str]:
        """The nodes confirmed live within ``grace`` (those whose keys a loss of Redis's took count)."""
        return [node for node, (_, at) in self._confirmed.items() if now - at <= self.grace]

    def may_ask(self, node: str, now: float) -> bool:
        """Whether to look ``node``'s key up now (at most once per ``ASK_EVERY`` per node)."""
        last = self._asked.get(node)
        if last is not None and now - last < ASK_EVERY:
            return False
        self._asked[node] = now
        return True
