"""What this plugin uses of Hermes, behind one facade, found by feature detection.

Hermes 0.19.0 (the release on PyPI) and newer upstream code differ in a few
places (hermes-integration.md §0). Nothing here compares version strings:
each difference is probed (``hasattr``, ``inspect.signature``, membership in
``VALID_HOOKS``) and every Hermes import happens lazily, so this module (and
the agent source built on it) imports without Hermes installed. Unit tests
replace ``HermesApi`` with a fake.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Optional

log = logging.getLogger("agent_bridge.hermes")

STREAM_HOOKS = ("on_stream_start", "on_stream_delta", "on_interim_message", "on_stream_end")
DEFAULT_CURSOR = " \u2589"  # gateway/config.py DEFAULT_STREAMING_CURSOR


def accepts_kwarg(fn: Any, name: str) -> bool:
    """Whether ``fn`` takes keyword ``name`` (explicitly or through ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    if name in params:
        return True
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def has_param(fn: Any, name: str) -> bool:
    """Whether ``fn`` names parameter ``name`` explicitly (``**kwargs`` does not count)."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _get(cfg: Any, *keys: str, default: Any = None) -> Any:
    node = cfg
    for k in keys:
        if not isinstance(node, dict) or k not in node:
            return default
        node = node[k]
    return node


class HermesApi:
    """The real Hermes, imported lazily. One instance per process."""

    # --- feature detection -------------------------------------------------------

    @property
    def stream_hooks(self) -> bool:
        """Upstream's on_stream_* plugin hooks exist (they never fire in 0.19.0)."""
        try:
            from hermes_cli.plugins import VALID_HOOKS
        except Exception:
            return False
        return all(h in VALID_HOOKS for h in STREAM_HOOKS)

    @property
    def approval_request_ids(self) -> bool:
        """``resolve_gateway_approval`` can target one request by id (upstream)."""
        try:
            from tools.approval import resolve_gateway_approval
        except Exception:
            return False
        return has_param(resolve_gateway_approval, "request_id")

    # --- gateway objects -----------------------------------------------------------

    def message_event(self, *, text: str, source: Any, message_id: str, command: bool = False) -> Any:
        try:  # upstream moved MessageEvent; always keyword arguments (fields were inserted)
            from gateway.platforms.event import MessageEvent, MessageType  # type: ignore
        except ImportError:
            from gateway.platforms.base import MessageEvent, MessageType
        return MessageEvent(
            text=text,
            message_type=MessageType.COMMAND if command else MessageType.TEXT,
            source=source,
            message_id=message_id,
        )

    def send_result(self, success: bool = True, message_id: Optional[str] = None, error: Optional[str] = None) -> Any:
        from gateway.platforms.base import SendResult

        return SendResult(success=success, message_id=message_id, error=error)

    def session_env(self, name: str) -> str:
        try:
            from gateway.session_context import get_session_env
        except Exception:
            return ""
        try:
            return get_session_env(name, "") or ""
        except Exception:
            return ""

    # --- decisions -------------------------------------------------------------------

    def resolve_approval(
        self, session_key: str, choice: str, reason: Optional[str] = None, request_id: Optional[str] = None
    ) -> int:
        from tools.approval import resolve_gateway_approval

        kwargs: dict = {}
        if reason:
            kwargs["reason"] = reason
        if request_id is not None and has_param(resolve_gateway_approval, "request_id"):
            kwargs["request_id"] = request_id
        return int(resolve_gateway_approval(session_key, choice, **kwargs) or 0)

    def approval_timeout(self) -> float:
        return float(_get(self.config(), "approvals", "timeout", default=60) or 60)

    def resolve_clarify(self, clarify_id: str, response: str) -> bool:
        from tools.clarify_gateway import resolve_gateway_clarify

        return bool(resolve_gateway_clarify(clarify_id, response))

    # --- yolo --------------------------------------------------------------------------

    def session_yolo(self, session_key: str) -> bool:
        from tools.approval import is_session_yolo_enabled

        return bool(is_session_yolo_enabled(session_key))

    def set_session_yolo(self, session_key: str, enabled: bool) -> None:
        from tools import approval

        (approval.enable_session_yolo if enabled else approval.disable_session_yolo)(session_key)

    def global_yolo(self) -> bool:
        try:
            from tools import approval

            if getattr(approval, "_YOLO_MODE_FROZEN", False):
                return True
        except Exception:
            pass
        return str(_get(self.config(), "approvals", "mode", default="manual")).strip().lower() == "off"

    # --- configuration (config.yaml in HERMES_HOME) ------------------------------------

    def config(self) -> dict:
        try:
            from hermes_cli.config import load_config_readonly as load
        except ImportError:  # pragma: no cover - older layouts
            from hermes_cli.config import load_config as load
        try:
            cfg = load()
        except Exception:
            log.debug("reading the Hermes config failed", exc_info=True)
            return {}
        return cfg if isinstance(cfg, dict) else {}

    def set_config_key(self, dotted: str, value: Any) -> None:
        """Write one key of config.yaml, keeping the rest of the user's file as written."""
        import yaml
        from hermes_cli.config import atomic_config_write, get_config_path

        path = get_config_path()
        data: dict = {}
        if path.exists():
            with open(path, encoding="utf-8") as f:
                data = yaml.safe_load(f) or {}
        node = data
        keys = dotted.split(".")
        for k in keys[:-1]:
            if not isinstance(node.get(k), dict):
                node[k] = {}
            node = node[k]
        node[keys[-1]] = value
        atomic_config_write(path, data)

    def streaming_cursor(self) -> str:
        cur = _get(self.config(), "streaming", "cursor", default=None)
        return cur if isinstance(cur, str) else DEFAULT_CURSOR

    def global_model(self) -> tuple[Optional[str], Optional[str]]:
        model = self.config().get("model")
        if isinstance(model, str):
            return model or None, None
        return _get(model, "default") or None, _get(model, "provider") or None

    def global_reasoning(self) -> Optional[str]:
        effort = _get(self.config(), "agent", "reasoning_effort", default=None)
        if effort in (None, ""):
            return None
        return str(effort).strip().lower()

    def providers(self, current_provider: str, current_model: str) -> list[dict]:
        """Hermes's credential-aware picker data (``list_authenticated_providers``)."""
        from hermes_cli.model_switch import list_authenticated_providers

        cfg = self.config()
        kwargs: dict = {
            "current_provider": current_provider or "",
            "current_base_url": _get(cfg, "model", "base_url", default="") or "",
            "user_providers": cfg.get("providers"),
        }
        try:
            from hermes_cli.config import get_compatible_custom_providers

            kwargs["custom_providers"] = get_compatible_custom_providers(cfg)
        except Exception:
            kwargs["custom_providers"] = cfg.get("custom_providers")
        fn = list_authenticated_providers
        for name, val in (("current_model", current_model or ""), ("max_models", 200)):
            if accepts_kwarg(fn, name):
                kwargs[name] = val
        return list(fn(**kwargs) or [])

    # --- session database (state.db in HERMES_HOME) --------------------------------------

    def session_db(self) -> Any:
        from hermes_state import SessionDB

        return SessionDB()


def parse_effort(value: Any) -> tuple[Optional[str], bool]:
    """Hermes's reasoning config (dict, level string or None) -> (effort, enabled)."""
    if value is None:
        return None, True
    if isinstance(value, dict):
        if value.get("enabled") is False:
            return "none", False
        eff = value.get("effort")
        return (str(eff) if eff else None), True
    text = str(value).strip().lower()
    if text in ("none", "false", "disabled", "off"):
        return "none", False
    return (text or None), True
