"""Fakes of the Hermes surfaces the plugin uses, for unit tests without Hermes installed.

They mirror hermes-integration.md §1-§4 (0.19.0) and, where noted, the
upstream (0.21.x) variants that cannot be installed offline.
"""

from __future__ import annotations

import types
from typing import Any, Optional


class FakeSessionDB:
    def __init__(self, rows: Optional[list] = None, messages: Optional[dict] = None):
        self.rows = rows or []
        self.messages = messages or {}
        self.deleted: list[str] = []
        self.titles: dict[str, str] = {}

    def list_sessions_rich(self, source=None, limit=20, min_message_count=0, **kw):
        return [r for r in self.rows if r.get("source") == source and r.get("message_count", 0) >= min_message_count]

    def get_session(self, sid):
        return next((r for r in self.rows if r["id"] == sid), None)

    def get_messages_as_conversation(self, sid, **kw):
        return self.messages.get(sid, [])

    def delete_session(self, sid):
        self.deleted.append(sid)

    def get_session_title(self, sid):
        return self.titles.get(sid)


class FakeApi:
    """Stands in for compat.HermesApi."""

    def __init__(self, *, stream_hooks: bool = False, request_ids: bool = False):
        self.stream_hooks = stream_hooks
        self.approval_request_ids = request_ids
        self.resolved: list[tuple] = []
        self.clarified: list[tuple] = []
        self.clarify_ok = True
        self.yolo_sessions: set[str] = set()
        self.cfg: dict = {"model": {"default": "fake-model", "provider": "custom"}, "agent": {"reasoning_effort": "medium"},
                          "approvals": {"mode": "manual", "timeout": 60}}
        self.db = FakeSessionDB()
        self.pending_counts: dict[str, int] = {}

    def message_event(self, *, text, source, message_id, command=False):
        return types.SimpleNamespace(text=text, source=source, message_id=message_id, command=command)

    def send_result(self, success=True, message_id=None, error=None):
        return types.SimpleNamespace(success=success, message_id=message_id, error=error)

    def session_env(self, name):
        return ""

    def resolve_approval(self, session_key, choice, reason=None, request_id=None):
        self.resolved.append((session_key, choice, reason, request_id))
        return 1

    def approval_timeout(self):
        return float(self.cfg["approvals"]["timeout"])

    def resolve_clarify(self, clarify_id, response):
        self.clarified.append((clarify_id, response))
        return self.clarify_ok

    def session_yolo(self, key):
        return key in self.yolo_sessions

    def set_session_yolo(self, key, enabled):
        (self.yolo_sessions.add if enabled else self.yolo_sessions.discard)(key)

    def global_yolo(self):
        return self.cfg["approvals"].get("mode") == "off"

    def config(self):
        return self.cfg

    def set_config_key(self, dotted, value):
        node = self.cfg
        keys = dotted.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value

    def streaming_cursor(self):
        return " \u2589"

    def global_model(self):
        m = self.cfg["model"]
        return m.get("default"), m.get("provider")

    def global_reasoning(self):
        return self.cfg.get("agent", {}).get("reasoning_effort")

    def providers(self, current_provider, current_model):
        return [{"slug": "custom", "name": "Custom endpoint", "models": ["fake-model", "fake-model-2"], "total_models": 2}]

    def session_db(self):
        return self.db


class FakeRunner:
    def __init__(self) -> None:
        self._session_model_overrides: dict = {}
        self._session_reasoning_overrides: dict = {}
        self._startup_restore_queue: list = []
        self.session_store = types.SimpleNamespace(peek_session_id=lambda key: None, reset_session=lambda key: None)


class FakeAdapter:
    """A platform adapter as the source sees it: build_source + handle_message, plus a runner."""

    def __init__(self, platform: str = "pheby"):
        self.platform_name = platform
        self.gateway_runner = FakeRunner()
        self.handled: list = []
        self.on_command = None  # callable(event) run for slash commands (simulates Hermes's reply)

    def build_source(self, chat_id, chat_name=None, chat_type="dm", user_id=None, user_name=None, **kw):
        return types.SimpleNamespace(chat_id=chat_id, chat_type=chat_type, platform=self.platform_name)

    async def handle_message(self, event):
        self.handled.append(event)
        if event.text.startswith("/") and self.on_command is not None:
            self.on_command(event)
