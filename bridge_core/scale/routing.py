"""Commands between nodes: a command about a run goes to the node running it (docs/scale-out.md).

``Router.route`` names the node that must carry out a command: cancel, pause, an approval or a
clarification's answer, deleting a conversation with a run go to the node running the run
(``Cluster.runs``, the node that asked for a decision: ``Cluster.deciders``); a message into
a session hosted elsewhere (a pi session: the node its plugin is connected to) is asked of
every node (``_SCATTER``), and so is a front end's command that runs where its session is
hosted (``add_hosted``). ``bus.send`` carries the command; the owner executes it (first
answer wins there) and answers with the result or the error tree's code; no answer within
``ASK_TIMEOUT`` is ``unavailable``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

import attrs
import cattrs

from ..bridge.bridge import Bridge
from ..bridge.handlers import SendResult
from ..bridge.tasks import TaskSet
from ..model import commands as cmd
from ..model import events as ev
from ..model.errors import BridgeError, Unavailable
from ..model.ids import new_id
from ..model.serialize import from_dict, to_dict
from ..model.state import ConversationState
from .bus import Bus

log = logging.getLogger("agent_bridge.cluster")

ASK_TIMEOUT = 15.0  # a command sent to another node: no answer in this long is `unavailable`
ACK_WAIT = 1.0  # s a command's answer waits for what it published to be on the bus (Redis away: no longer)
NOT_HERE = "not_here"  # a node asked to run a message in a session it does not host

# the commands another node may have to carry out, by name
ROUTED: dict[str, type] = {c.__name__: c for c in (
    cmd.CancelRun, cmd.PauseRun, cmd.ResolveApproval, cmd.AnswerClarify, cmd.DeleteConversation, cmd.SendMessage,
    cmd.ResumeRun)}  # fmt: skip
_SCATTER = "*"  # route(): ask every other node (the one hosting the session runs it)

_CONV = cattrs.Converter()


def _error_classes() -> dict[str, type]:
    """code -> the most specific BridgeError class with that code (a reply's error, rebuilt)."""
    out: dict[str, type] = {}
    todo = [BridgeError]
    while todo:
        c = todo.pop(0)
        out[c.code] = c
        todo.extend(c.__subclasses__())
    return out


def rebuild_error(code: str, message: str) -> BridgeError:
    cls = _error_classes().get(code, BridgeError)
    try:
        err = cls(message)
    except TypeError:
        err = BridgeError(message, code=code)
    if err.code != code:
        err = BridgeError(message, code=code)
    return err


def encode_result(result: Any) -> dict:
    if isinstance(result, str):
        return {"str": result}
    if isinstance(result, SendResult):
        return {"send": attrs.asdict(result)}
    if type(result) in ev.EVENT_TYPES:
        return {"event": to_dict(result)}
    return {}


def decode_result(data: dict) -> Any:
    if "str" in data:
        return data["str"]
    if "send" in data:
        return SendResult(**data["send"])
    if "event" in data:
        return from_dict(data["event"])
    return None


class Router:
    def __init__(self, bridge: Bridge, bus: Bus, node_id: str, runs: dict, deciders: dict, tasks: TaskSet):
        self.bridge = bridge
        self.bus = bus
        self.node_id = node_id
        self.runs = runs  # run_id -> (its node, conversation_id): other nodes' runs (the cluster's table)
        self.deciders = deciders  # pending approval/clarify id -> the node that asked (the cluster's table)
        self.tasks = tasks
        self._waiting: dict[str, asyncio.Future] = {}  # commands sent to other nodes, by request id
        self._hosted: dict[str, type] = {}  # front ends' commands run where the session is hosted, by name

    def stop(self) -> None:
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(Unavailable("This node is stopping"))

    def add_hosted(self, cls: type) -> None:
        """``cls`` (an attrs command with a ``conversation_id``, a ``Bridge.extensions`` handler on every
        node) runs on the node whose source hosts the conversation; none: this node's own answer."""
        self._hosted[cls.__name__] = cls

    def _route_hosted(self, command: Any) -> Optional[str]:
        return None if self._hosts(command) else _SCATTER

    def route(self, command: Any) -> Optional[str]:
        """The node that must carry out ``command`` (None: this one; ``_SCATTER``: whichever hosts it)."""
        bridge = self.bridge
        t = type(command)
        if t.__name__ in self._hosted:
            return self._route_hosted(command)
        conv: Optional[ConversationState] = None
        if t is cmd.ResolveApproval or t is cmd.AnswerClarify:
            did = command.approval_id if t is cmd.ResolveApproval else command.clarify_id
            node = self.deciders.get(did)
            return node if node != self.node_id else None
        if t is cmd.CancelRun:
            if command.conversation_id is not None:
                conv = bridge.conversations.get(command.conversation_id)
            elif command.run_id is not None:
                conv = self._conversation_running(command.run_id)
        elif t is cmd.PauseRun:
            conv = self._conversation_running(command.run_id)
        elif t is cmd.DeleteConversation:
            conv = bridge.conversations.get(command.conversation_id)
        elif t is cmd.SendMessage or t is cmd.ResumeRun:
            cid = command.conversation_id
            if cid is None and t is cmd.ResumeRun:
                cid = next((c.conversation_id for c in bridge.conversations.values()
                            if c.last_run_id == command.run_id), None)  # fmt: skip
            conv = bridge.conversations.get(cid) if cid is not None else None
            if conv is not None and conv.run is None and not bridge.source_for(conv).is_online(conv):
                return _SCATTER  # a session hosted elsewhere (a pi plugin connected to another node)
            return None
        else:
            return None
        if conv is None or conv.run is None:
            return None
        owner = self.runs.get(conv.run.run_id)
        return owner[0] if owner is not None and owner[0] != self.node_id else None

    def _conversation_running(self, run_id: str) -> Optional[ConversationState]:
        convs = self.bridge.conversations.values()
        return next((c for c in convs if c.run is not None and c.run.run_id == run_id), None)

    async def execute(self, command: Any, origin: cmd.Origin) -> Any:
        """``command`` where it belongs, once this node read the bus up to where it ends (what any node
        acknowledged is folded here first: catchup.py); carried out here, answered once what it
        published is on the bus (then any node that reads it has it)."""
        await self.bus.caught_up()
        node = self.route(command)
        if node is None:
            result = await self.bridge.execute_here(command, origin)
            await self.bus.flush(ACK_WAIT, warn=False)
            return result
        if node == _SCATTER:
            return await self._scatter(command, origin)
        return await self.ask(node, command, origin)

    async def ask(self, node: str, command: Any, origin: cmd.Origin, *, hosted: bool = False) -> Any:
        """``command`` carried out by ``node``: its result, or its error (``unavailable`` when it is gone)."""
        if node not in await self.bus.live_nodes():
            raise Unavailable(f"Node {node}, which runs this, is gone; its runs are closed shortly")
        rid = new_id()
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        self.bus.send(node, {"t": "req", "id": rid, "cmd": type(command).__name__, "args": _CONV.unstructure(command),
                             "origin": _CONV.unstructure(origin), "hosted": hosted})  # fmt: skip
        try:
            reply = await asyncio.wait_for(fut, ASK_TIMEOUT)
        except asyncio.TimeoutError:
            raise Unavailable(f"Node {node} did not answer") from None
        finally:
            self._waiting.pop(rid, None)
        err = reply.get("err")
        if err is not None:
            raise rebuild_error(str(err.get("code")), str(err.get("message")))
        return decode_result(reply.get("ok") or {})

    async def _scatter(self, command: Any, origin: cmd.Origin) -> Any:
        """A message into a session this node does not host: the node hosting it runs it (if any)."""
        others = [n for n in await self.bus.live_nodes() if n != self.node_id]
        results = await asyncio.gather(*(self.ask(n, command, origin, hosted=True) for n in others),
                                       return_exceptions=True)  # fmt: skip
        errors = []
        for r in results:
            if not isinstance(r, BaseException):
                return r
            if not (isinstance(r, BridgeError) and r.code == NOT_HERE):
                errors.append(r)
        if errors:
            raise errors[0]
        return await self.bridge.execute_here(command, origin)  # nobody hosts it: this node's own answer

    def on_command(self, sender: str, data: Any) -> None:
        if not isinstance(data, dict):
            return
        if data.get("t") == "res":
            fut = self._waiting.get(data.get("id"))
            if fut is not None and not fut.done():
                fut.set_result(data)
        elif data.get("t") == "req":
            self.tasks.spawn(self._answer(sender, data), name="cluster-answer")

    async def _answer(self, sender: str, data: dict) -> None:
        reply: dict = {"t": "res", "id": data.get("id")}
        try:
            cls = ROUTED.get(data.get("cmd")) or self._hosted.get(data.get("cmd"))  # type: ignore[arg-type]
            if cls is None:
                raise BridgeError("Unknown command", code="bad_request")
            command = _CONV.structure(data.get("args"), cls)
            origin = _CONV.structure(data.get("origin"), cmd.Origin)
            await self.bus.caught_up()  # (the asker read the bus to its end; this node may be behind it)
            if data.get("hosted") and not self._hosts(command):
                raise BridgeError("Not hosted here", code=NOT_HERE)
            reply["ok"] = encode_result(await self.bridge.execute_here(command, origin))
            await self.bus.flush(ACK_WAIT, warn=False)
        except BridgeError as exc:
            reply["err"] = {"code": exc.code, "message": exc.message}
        except Exception:
            log.exception("cluster: a command from %s failed", sender)
            reply["err"] = {"code": "internal_error", "message": "Internal error"}
        self.bus.send(sender, reply)

    def _hosts(self, command: Any) -> bool:
        bridge = self.bridge
        conv = bridge.conversations.get(getattr(command, "conversation_id", None) or "")
        return conv is not None and bridge.source_for(conv).is_online(conv)
