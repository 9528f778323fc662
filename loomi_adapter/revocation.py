"""A revoked device gets nothing and answers nothing (docs/security.md, "a revoked phone").

A revoke, with the server running or not and on whichever node, removes everything the
device was given:

- its credential (the device row: ``Registry.revoke``, or ``offline_revoke`` with no server);
- its push subscriptions, what was queued for them, and every decision URL already sent to
  them (their tokens are deleted in the store, which alone decides a token: each answers 410
  and changes nothing, on every node): ``Notifier.forget_owner``, or the same statements
  offline (``bridge_core.push.drop_owner_rows``);
- its sockets: closed at once on this node (``error revoked``, close 4004) and, with several
  nodes, on every other node as soon as the relay reaches it (``RELAY``), not at the next
  heartbeat. The heartbeat's look at the store stays as the fallback (a relay lost with a
  node restarting).

At start, what push still holds for a device the store no longer has (revoked while no server
could hear it, or by a version that left its subscriptions) is dropped (``drop_orphans``).
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any, Optional, Protocol

from bridge_core.model.errors import BridgeError
from bridge_core.push import device_owner, drop_owner_rows

from .devices import Device, Registry, _offline_connect
from .errors import Revoked

log = logging.getLogger("agent_bridge.loomi")

RELAY = "loomi"  # its relays between nodes (bridge_core/scale/cluster.py): {"t": "revoked", "d": device_id}


class RevokingFrontEnd(Protocol):
    """What revocations use of the Loomi front end (``server.LoomiFrontEnd``)."""

    bridge: Any
    registry: Registry

    def _kick(self, conn: Any, exc: BridgeError) -> None: ...  # close a socket with the error's frame


class Revocations:
    def __init__(self, fe: RevokingFrontEnd):
        self.fe = fe

    async def prepare(self) -> None:
        """Once the registry is loaded: hear other nodes' revokes; drop what push keeps for gone devices."""
        bridge = self.fe.bridge
        if bridge.cluster is not None:
            bridge.cluster.add_relay(RELAY, self._relayed)
        if bridge.push is not None:
            await bridge.push.drop_gone_devices(self.fe.registry.device_ids)

    async def revoke(self, device_id: str) -> Optional[Device]:
        """Forget a device everywhere; None when there is no such device. Its credential and what push
        gave it are gone from the store before its sockets close and before this returns."""
        fe = self.fe
        d = await fe.registry.revoke(device_id)
        if d is None:
            return None
        log.info("loomi: device %s revoked", device_id)
        if fe.bridge.push is not None:
            await fe.bridge.push.forget_owner(device_owner(device_id))
        self._close(d)
        if fe.bridge.cluster is not None:  # after the store: a node told it finds the device gone there too
            fe.bridge.cluster.relay(RELAY, {"t": "revoked", "d": device_id})
        return d

    def _relayed(self, node: str, data: Any) -> None:
        """Another node revoked a device: close its sockets here, forget it in this node's memory."""
        if not isinstance(data, dict) or data.get("t") != "revoked" or not isinstance(data.get("d"), str):
            return
        device_id = data["d"]
        reg = self.fe.registry
        d = reg.devices.pop(device_id, None)
        if self.fe.bridge.push is not None:
            self.fe.bridge.push.forget_owner_here(device_owner(device_id))
        if d is not None:
            reg.detach(d)
            log.info("loomi: device %s revoked on node %s", device_id, node)
            self._close(d)

    def _close(self, d: Device) -> None:
        if d.conn is not None:
            self.fe._kick(d.conn, Revoked())


# --- with no server running (agent-bridge loomi revoke, the CLI's fallback) -----------------------


def offline_revoke(data_dir: str, device_id: str) -> bool:
    """Revoke in the data directory's database: the device row and, in the same transaction, what push
    gave it (its subscriptions, their queue, its decision tokens). False when there is no such device."""
    conn = _offline_connect(data_dir)
    if conn is None:
        return False
    try:
        conn.execute("BEGIN IMMEDIATE")
        gone = conn.execute("DELETE FROM loomi_devices WHERE device_id=?", (device_id,)).rowcount > 0
        if gone:  # its replay rows go at the server's next start (the table may not exist yet)
            _drop_push_rows(conn, device_id)
        conn.execute("COMMIT")
        return gone
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.close()


def _drop_push_rows(conn: sqlite3.Connection, device_id: str) -> None:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'push_%'")}
    if not {"push_subscriptions", "push_queue", "push_tokens"} <= tables:
        return  # no push yet in this database: nothing was given
    columns = {r[1] for r in conn.execute("PRAGMA table_info(push_tokens)")}
    drop_owner_rows(conn, device_owner(device_id), tokens="owner" in columns)
