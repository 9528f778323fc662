"""What every part of the Hermes agent source shares: the chats Hermes sees.

A bridge conversation is a Hermes DM chat whose ``chat_id`` is the conversation id, on one
of the platforms this plugin registered (``pheby``, ``loomi``, ``lvmh``). ``Chats`` holds
the platform adapters, the platform each conversation lives on, the active run of each
chat and the gateway objects reached through them; the parts of ``HermesAgent``
(``source.py``) each take it instead of reaching into one another.

The session-key format (Hermes's ``gateway/session.py`` ``build_session_key`` for a DM) is
here once: ``session_key`` builds it, ``chat_from_key`` and ``on_platform`` read it (the
hooks, ``hooks.py``, see only keys).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from bridge_core.model.errors import ConversationNotFound, Unavailable

from .compat import DEFAULT_CURSOR, HermesApi

if TYPE_CHECKING:
    from bridge_core.bridge.bridge import Bridge

    from .runs import HermesRun

SOURCE = "hermes"  # the agent source's name: conversations' and notifications' source
CONTROL_CHAT = "agent-bridge-control"  # chat used for global-scope slash commands


def key_prefix(platform: str) -> str:
    return f"agent:main:{platform}:"


def session_key(platform: str, chat_id: str) -> str:
    """Hermes's session key of a DM chat on ``platform``."""
    return f"{key_prefix(platform)}dm:{chat_id}"


def chat_from_key(key: str, platform: str) -> str:
    """The chat of a DM session key on ``platform`` ('' when the key is not one)."""
    prefix = session_key(platform, "")
    if key.startswith(prefix):
        return key[len(prefix):].split(":", 1)[0]
    return ""


def on_platform(key: str, platforms: tuple[str, ...]) -> bool:
    """Whether a session key belongs to one of ``platforms``."""
    return any(key.startswith(key_prefix(p)) for p in platforms)


def chat_of_event(event: Any) -> str:
    """The chat a Hermes ``MessageEvent`` came from."""
    return str(getattr(getattr(event, "source", None), "chat_id", "") or "")


class Chats:
    def __init__(self, platforms: tuple[str, ...], api: HermesApi):
        if not platforms:
            raise ValueError("at least one platform")
        self.platforms = tuple(platforms)
        self.primary = self.platforms[0]
        self.api = api
        self.bridge: "Bridge" = None  # type: ignore[assignment]  # set when the bridge attaches the source
        self.adapters: dict[str, Any] = {}  # platform -> BasePlatformAdapter (set by the plugin)
        self.runs: dict[tuple[str, str], "HermesRun"] = {}  # (platform, chat_id) -> active run
        self.conv_platform: dict[str, str] = {}
        self.loop: Any = None  # the gateway's event loop, once started
        self.use_stream_hooks = False  # a newer Hermes's on_stream_* hooks carry the text
        self._cursor: Optional[str] = None

    @property
    def cursor(self) -> str:
        """The streaming cursor Hermes appends to a message it is still editing."""
        if self._cursor is None:
            try:
                self._cursor = self.api.streaming_cursor()
            except Exception:
                self._cursor = DEFAULT_CURSOR
        return self._cursor

    def platform_of(self, conversation_id: str) -> str:
        return self.conv_platform.get(conversation_id, self.primary)

    def session_key(self, conversation_id: str) -> str:
        return session_key(self.platform_of(conversation_id), conversation_id)

    def adapter(self, platform: str) -> Any:
        adapter = self.adapters.get(platform)
        if adapter is None:
            raise Unavailable(f"Hermes platform {platform!r} is not connected")
        return adapter

    def runner(self, platform: Optional[str] = None) -> Any:
        """Hermes's ``GatewayRunner`` (it sets ``adapter.gateway_runner``), or None."""
        return getattr(self.adapters.get(platform or self.primary), "gateway_runner", None)

    def session_store(self, platform: str) -> Any:
        return getattr(self.runner(platform), "session_store", None)

    def build_source(self, adapter: Any, chat_id: str, name: Optional[str] = None) -> Any:
        """The ``SessionSource`` of a message the bridge injects into a chat."""
        return adapter.build_source(
            chat_id=chat_id, chat_name=name, chat_type="dm", user_id="agent-bridge", user_name="agent-bridge"
        )

    def run(self, platform: str, chat_id: str) -> Optional["HermesRun"]:
        """The chat's active run (it may have just finished)."""
        return self.runs.get((platform, chat_id))

    def live_run(self, platform: str, chat_id: str) -> Optional["HermesRun"]:
        """The chat's active run while it has not finished: what hook activity is attributed to."""
        run = self.runs.get((platform, chat_id))
        return run if run is not None and not run.finished else None

    def settings_chat(self, conversation_id: Optional[str]) -> tuple[str, str]:
        """Where a setting's slash command goes: the conversation's chat, or the control chat."""
        if conversation_id is None:
            return self.primary, CONTROL_CHAT
        if conversation_id not in self.bridge.conversations:
            raise ConversationNotFound()
        return self.platform_of(conversation_id), conversation_id
