"""lvmh REST for starting and managing the bridge's own conversations (an extension of Transport 2).

The spec's sessions come from pi plugins; the bridge's own agent (demo or Hermes)
needs a way in from the web UI. These routes use the core's commands, and follow
the spec's REST style: JSON bodies, ``{"error": message, "code"}`` with 400
(bad body), 404 (unknown session), 409 (a plugin session: the spec gives the daemon
no way to rename or delete one; it is renamed in pi and ends there), 413 (too long).

| method & path | body → response |
| --- | --- |
| ``GET /api/conversations?q=`` | → sessions whose name, repo or cwd contains ``q`` (case-insensitive), as ``GET /api/sessions`` |
| ``POST /api/conversations`` | ``{name?, model?, provider?, reasoning?}`` → 201 the new session |
| ``PATCH /api/conversations/:id`` | ``{name}`` → the renamed session |
| ``DELETE /api/conversations/:id`` | → ``{ok: true}`` (an active run is cancelled first) |
| ``GET /api/models`` | → ``{providers: [{slug, name, models, current}], currentModel, currentProvider, reasoningEfforts, currentReasoning}`` |
| ``GET /api/agent`` | → ``{name, label, commands: [{command, usage, description}], reasoning}``: the agent new conversations talk to |

Documented in docs/web-ui.md ("REST for conversations").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from aiohttp import web

from bridge_core.model import commands as cmd
from bridge_core.model.errors import BadRequest, BridgeError, Conflict, NotImplementedByAgent
from . import codec
from .listing import needle_of
from .errors import SessionNotFound, json_response, rest_error
from .rest import list_response
from .request import command_origin, read_json  # one Origin and one body reader for every lvmh route

if TYPE_CHECKING:
    from .host import Host

MAX_NAME = 200


def _name(body: dict, required: bool) -> Optional[str]:
    name = codec.body_string(body, "name", max_len=MAX_NAME, required=required)
    return name.strip() if name is not None else None


class Conversations:
    def __init__(self, fe: "Host"):
        self.fe = fe

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/conversations", self.search),
            web.post("/api/conversations", self.create),
            web.patch("/api/conversations/{id}", self.rename),
            web.delete("/api/conversations/{id}", self.delete),
            web.get("/api/models", self.models),
            web.get("/api/agent", self.agent),
        ]

    def _bridge_conversation(self, sid: str) -> str:
        if self.fe.book.is_bridge_session(sid):
            return sid
        if self.fe.book.plugin_record(sid) is not None:
            raise Conflict("This is a pi session: rename it or end it in pi (the daemon cannot)")
        raise SessionNotFound()

    async def search(self, request: web.Request) -> web.Response:
        try:
            needle = needle_of(request.query.get("q", ""))
        except BadRequest as exc:
            return rest_error(exc)
        return await list_response(request, self.fe.listing.encoded(needle))

    async def create(self, request: web.Request) -> web.Response:
        try:
            body = await read_json(request, allow_empty=True)
            name = _name(body, required=False) or None
            model = codec.body_string(body, "model", max_len=200, required=False)
            provider = codec.body_string(body, "provider", max_len=200, required=False)
            reasoning = codec.body_string(body, "reasoning", max_len=32, required=False)
            origin = command_origin(request)
            if model is not None or reasoning is not None:
                self._check_settings(model, provider, reasoning)
            conv = await self.fe.bridge.execute(cmd.CreateConversation(name=name), origin)
            cid = conv.conversation_id
            if model is not None:
                await self.fe.bridge.execute(cmd.SetModel(model=model, provider=provider, conversation_id=cid), origin)
            if reasoning is not None:
                await self.fe.bridge.execute(cmd.SetReasoning(effort=reasoning, conversation_id=cid), origin)
            return json_response(self.fe.listing.view(cid) or {"id": cid}, status=201)
        except Exception as exc:
            return rest_error(exc)

    def _check_settings(self, model: Optional[str], provider: Optional[str], reasoning: Optional[str]) -> None:
        """Refuse an unknown model or effort before anything is created (one request, one outcome)."""
        try:
            snap = self.fe.bridge.default_source.models(None)
        except NotImplementedByAgent:
            raise BadRequest("This agent has no model or reasoning choices")
        if model is not None:
            providers = [p for p in snap.providers if provider is None or p.slug == provider]
            if not any(model in p.models for p in providers):
                raise BadRequest(f"Unknown model {model!r}" + (f" of provider {provider!r}" if provider else ""))
        if reasoning is not None and reasoning not in snap.supported_reasoning_efforts:
            raise BadRequest(f"Unknown reasoning effort {reasoning!r}")

    async def rename(self, request: web.Request) -> web.Response:
        try:
            cid = self._bridge_conversation(request.match_info["id"])
            name = _name(await read_json(request), required=True)
            assert name is not None
            await self.fe.bridge.execute(cmd.RenameConversation(conversation_id=cid, name=name), command_origin(request))
            return json_response(self.fe.listing.view(cid) or {"id": cid, "name": name})
        except Exception as exc:
            return rest_error(exc)

    async def delete(self, request: web.Request) -> web.Response:
        try:
            cid = self._bridge_conversation(request.match_info["id"])
            await self.fe.bridge.execute(cmd.DeleteConversation(conversation_id=cid), command_origin(request))
            return json_response({"ok": True})
        except Exception as exc:
            return rest_error(exc)

    async def models(self, request: web.Request) -> web.Response:
        try:
            origin = command_origin(request)
            try:
                snap = await self.fe.bridge.execute(cmd.ListModels(), origin)
                reasoning = await self.fe.bridge.execute(cmd.CurrentReasoning(), origin)
            except NotImplementedByAgent:
                return json_response({"providers": [], "currentModel": None, "currentProvider": None,
                                      "reasoningEfforts": [], "currentReasoning": None})
            return json_response({
                "providers": [
                    {"slug": p.slug, "name": p.name, "models": list(p.models), "current": p.is_current}
                    for p in snap.providers
                ],
                "currentModel": snap.current_model,
                "currentProvider": snap.current_provider,
                "reasoningEfforts": list(snap.supported_reasoning_efforts),
                "currentReasoning": reasoning.effort,
            })
        except BridgeError as exc:
            return rest_error(exc)

    async def agent(self, request: web.Request) -> web.Response:
        """What the agent of new conversations is and can do: its commands (the web UI's empty state
        lists them) and whether its runs use a reasoning effort (``reasoning: false``: none to offer)."""
        src = self.fe.bridge.default_source
        return json_response({
            "name": src.name,
            "label": src.label,
            "commands": [{"command": c.command, "usage": c.usage, "description": c.description}
                         for c in src.commands()],
            "reasoning": bool(src.uses_reasoning),
        })
