"""lvmh REST (Transport 2) for sessions, decisions and attachments.

Every error is ``{"error": "message"}`` (plus a machine-readable ``code``) with
its status: 400 bad JSON or query values, 401 (the auth middleware), 404
unknown session/approval/clarification/attachment, 409 offline session or
conflicting state, 413 too large; never a 500 for anything a client sends. With several
nodes, a pi session's prompt and abort reach the node its plugin is connected to (relay.py).
Spawn and GitLab routes come from ``spawn.py`` and ``gitlab.py``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web

from bridge_core.model import commands as cmd
from bridge_core.kit.downloads import file_response
from bridge_core.model.errors import Conflict, NotFound

from . import codec, history, listing
from .errors import SessionNotFound, error_response, json_response, rest_error
from .relay import PluginAbort, PluginPrompt
from .request import command_origin, read_json

log = logging.getLogger("agent_bridge.lvmh")

if TYPE_CHECKING:
    from .host import Host


async def list_response(request: web.Request, runs: list) -> web.StreamResponse:
    """The JSON array of the encoded entries ``runs`` (``listing.Listing.encoded``) written piece by piece, each
    waiting for the socket to take it: the body is ``json_response``'s byte for byte, never one copy of it whole."""
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    resp.content_length = codec.json_array_length(runs)
    try:
        await resp.prepare(request)
        if request.method != "HEAD":
            for piece in codec.json_array_pieces(runs):
                await resp.write(piece)
        await resp.write_eof()
    except ConnectionResetError:  # the client went away mid-list (aiohttp's reset error is one): nothing to answer
        log.info("lvmh: a session list's reader went away before its end")
    return resp


class Rest:
    def __init__(self, fe: "Host"):
        self.fe = fe

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/sessions", self.sessions),
            web.get("/api/sessions/{id}", self.session),
            web.get("/api/sessions/{id}/events", self.events),
            web.get("/api/sessions/{id}/search", self.search),
            web.post("/api/sessions/{id}/prompt", self.prompt),
            web.post("/api/sessions/{id}/abort", self.abort),
            web.post("/api/approvals/{id}", self.approval),
            web.post("/api/clarifications/{id}", self.clarification),
            web.get("/api/attachments/{id}", self.attachment),
        ]

    async def not_found(self, request: web.Request) -> web.Response:
        return error_response("Not found", 404, "not_found")

    def _known(self, sid: str) -> str:
        """``plugin`` or ``bridge``; SessionNotFound otherwise."""
        if self.fe.book.plugin_record(sid) is not None:
            return "plugin"
        if self.fe.book.is_bridge_session(sid):
            return "bridge"
        raise SessionNotFound()

    async def _body(self, request: web.Request, allow_empty: bool = False) -> dict:
        return await read_json(request, allow_empty=allow_empty)

    # --- sessions --------------------------------------------------------------------------------------

    async def sessions(self, request: web.Request) -> web.Response:
        """The spec's full list; with ``limit``, ``cursor`` or ``q``, a page of it (listing.py)."""
        query = request.query
        if not listing.wants_page(query):
            return await list_response(request, self.fe.listing.encoded())
        try:
            limit = codec.query_int(query, "limit", listing.PAGE_DEFAULT, 1, listing.PAGE_MAX, clamp_high=True)
            return json_response(self.fe.listing.page(limit, query.get("cursor") or None, query.get("q", "")))
        except Exception as exc:
            return rest_error(exc)

    async def session(self, request: web.Request) -> web.Response:
        view = self.fe.listing.view(request.match_info["id"])
        return json_response(view) if view is not None else rest_error(SessionNotFound())

    async def events(self, request: web.Request) -> web.Response:
        """The spec's forward read (``after``), or a page backward (``before``: history.py)."""
        sid = request.match_info["id"]
        try:
            page = history.page_query(request.query)
            self._known(sid)
        except Exception as exc:
            return rest_error(exc)
        await self.fe.book.log.settle(sid)  # what the stream already showed is readable here
        headers = None
        if page.before is None:
            raws = self.fe.book.log.read(sid, page.after, page.limit)
        else:
            raws, older = history.read_before(self.fe.book.log.store, sid, page.before, page.limit)
            headers = {"X-Lvmh-Older": "true" if older else "false"}
        self.fe.counts.replay_events += len(raws)
        return web.Response(text=codec.json_array(raws), content_type="application/json", headers=headers)

    async def search(self, request: web.Request) -> web.Response:
        """Find in a conversation: the stored events whose text contains ``q`` (history.py)."""
        sid = request.match_info["id"]
        try:
            query = history.search_query(request.query)
            self._known(sid)
        except Exception as exc:
            return rest_error(exc)
        await self.fe.book.log.settle(sid)
        return json_response(await history.search(self.fe.book.log.store, sid, query))

    async def prompt(self, request: web.Request) -> web.Response:
        sid = request.match_info["id"]
        try:
            kind = self._known(sid)
            body = await self._body(request)
            message = codec.body_string(body, "message")
            assert message is not None
            if kind == "plugin":  # to the node its plugin is connected to (relay.py); none: 409 offline
                prompt_id = await self.fe.bridge.execute(PluginPrompt(conversation_id=sid, text=message),
                                                         command_origin(request))  # fmt: skip
                return json_response({"ok": True, "promptId": prompt_id})
            result = await self.fe.bridge.execute(cmd.SendMessage(text=message, conversation_id=sid), command_origin(request))
            return json_response({"ok": True, "runId": result.run_id})
        except Exception as exc:
            return rest_error(exc)

    async def abort(self, request: web.Request) -> web.Response:
        sid = request.match_info["id"]
        try:
            kind = self._known(sid)
            await self._body(request, allow_empty=True)
            if kind == "plugin":  # as a prompt: where its plugin is connected, or 409 offline
                await self.fe.bridge.execute(PluginAbort(conversation_id=sid), command_origin(request))
                return json_response({"ok": True})
            conv = self.fe.bridge.conversations.get(sid)
            if conv is None or conv.run is None:
                raise Conflict("No active run in this session")
            try:
                run_id = await self.fe.bridge.execute(cmd.CancelRun(conversation_id=sid), command_origin(request))
            except NotFound:
                raise Conflict("No active run in this session")
            return json_response({"ok": True, "runId": run_id})
        except Exception as exc:
            return rest_error(exc)

    # --- decisions -------------------------------------------------------------------------------------

    async def approval(self, request: web.Request) -> web.Response:
        approval_id = request.match_info["id"]
        try:
            body = await self._body(request)
            choice = codec.body_string(body, "choice", max_len=32)
            reason = codec.body_string(body, "reason", max_len=2000, required=False, allow_empty=True)
            assert choice is not None
            res = await self.fe.bridge.execute(
                cmd.ResolveApproval(approval_id=approval_id, choice=choice, reason=reason), command_origin(request)
            )
            return json_response({"ok": True, "approvalId": res.approval_id, "choice": res.choice, "accepted": res.accepted})
        except Exception as exc:
            return rest_error(exc)

    async def clarification(self, request: web.Request) -> web.Response:
        clarify_id = request.match_info["id"]
        try:
            body = await self._body(request)
            response = codec.body_string(body, "response", allow_empty=True)
            assert response is not None
            res = await self.fe.bridge.execute(cmd.AnswerClarify(clarify_id=clarify_id, response=response), command_origin(request))
            return json_response({"ok": True, "clarifyId": res.clarify_id, "accepted": res.accepted})
        except Exception as exc:
            return rest_error(exc)

    # --- attachments -----------------------------------------------------------------------------------

    async def attachment(self, request: web.Request) -> web.StreamResponse:
        found = self.fe.bridge.attachments.get(request.match_info["id"])
        if found is None:
            return error_response("Attachment not found", 404, "not_found")
        return file_response(*found)
