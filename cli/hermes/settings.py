"""The Hermes agent's settings: model, reasoning effort and yolo, read from Hermes and changed through it.

A part of ``HermesAgent`` (``source.py``): reads come from Hermes's session overrides and
``config.yaml`` (``compat.HermesApi``); changes go through the slash commands Hermes
supports (``/model ... --session|--global``, ``/reasoning <level> [--global]``), injected by
``control.Controls``, and are checked by reading the setting back.
"""

from __future__ import annotations

from typing import Any, Optional

from bridge_core.model import events as ev
from bridge_core.bridge.agent import ModelCurrent, ModelsSnapshot, Provider, ReasoningSnapshot, YoloSnapshot
from bridge_core.model.errors import BadRequest

from .chats import Chats
from .compat import parse_effort
from .control import Controls
from .runs import ERROR_MAX


def _clean_reply(text: str) -> str:
    text = (text or "").strip()
    while text and not text[0].isalnum() and text[0] not in "[(\"'":
        text = text[1:]
    return text.strip()[:ERROR_MAX] or "Hermes refused the change"


class HermesSettings:
    """Model, reasoning and yolo, global or per conversation."""

    def __init__(self, chats: Chats, controls: Controls):
        self.chats = chats
        self.controls = controls

    @property
    def api(self) -> Any:
        return self.chats.api

    # --- models -------------------------------------------------------------------------

    def current_model(self, conversation_id: Optional[str]) -> ModelCurrent:
        model, provider = self.api.global_model()
        if conversation_id is not None:
            platform, _ = self.chats.settings_chat(conversation_id)
            overrides = getattr(self.chats.runner(platform), "_session_model_overrides", None) or {}
            ov = overrides.get(self.chats.session_key(conversation_id))
            if isinstance(ov, dict) and ov.get("model"):
                return ModelCurrent(
                    model=ov.get("model"), provider=ov.get("provider") or provider, scope="conversation",
                    conversation_id=conversation_id,
                )
        return ModelCurrent(model=model, provider=provider, scope="global", conversation_id=conversation_id)

    def models(self, conversation_id: Optional[str]) -> ModelsSnapshot:
        cur = self.current_model(conversation_id)
        rows = self.api.providers(cur.provider or "", cur.model or "")
        providers = []
        for row in rows:
            slug = str(row.get("slug") or "")
            models = tuple(str(m) for m in (row.get("models") or []))
            providers.append(
                Provider(
                    slug=slug,
                    name=str(row.get("name") or slug),
                    models=models,
                    is_current=slug == (cur.provider or "") or bool(row.get("is_current")) and not cur.provider,
                    total_models=row.get("total_models") if isinstance(row.get("total_models"), int) else len(models),
                )
            )
        return ModelsSnapshot(
            providers=tuple(providers),
            current_model=cur.model,
            current_provider=cur.provider,
            supported_reasoning_efforts=ev.REASONING_EFFORTS[1:],
            scope=cur.scope,
        )

    async def set_model(self, model: str, provider: Optional[str], conversation_id: Optional[str]) -> ModelCurrent:
        if not model or any(c.isspace() for c in model) or (provider and any(c.isspace() for c in provider)):
            raise BadRequest("model and provider must be single words")
        platform, chat = self.chats.settings_chat(conversation_id)
        cmd = f"/model {model}"
        if provider:
            cmd += f" --provider {provider}"
        cmd += " --session" if conversation_id is not None else " --global"
        reply = await self.controls.send(platform, chat, cmd)
        cur = self.current_model(conversation_id)
        if cur.model != model or (provider and cur.provider != provider):
            raise BadRequest(_clean_reply(reply))
        if conversation_id is None:
            return ModelCurrent(model=cur.model, provider=cur.provider, scope="global", conversation_id=None)
        return cur

    # --- reasoning ---------------------------------------------------------------------------

    def reasoning(self, conversation_id: Optional[str]) -> ReasoningSnapshot:
        if conversation_id is not None:
            platform, _ = self.chats.settings_chat(conversation_id)
            overrides = getattr(self.chats.runner(platform), "_session_reasoning_overrides", None) or {}
            key = self.chats.session_key(conversation_id)
            if key in overrides:
                effort, enabled = parse_effort(overrides[key])
                return ReasoningSnapshot(effort=effort, enabled=enabled, scope="conversation", conversation_id=conversation_id)
        effort, enabled = parse_effort(self.api.global_reasoning())
        return ReasoningSnapshot(effort=effort, enabled=enabled, scope="global", conversation_id=conversation_id)

    async def set_reasoning(self, effort: str, conversation_id: Optional[str]) -> ReasoningSnapshot:
        if effort not in ev.REASONING_EFFORTS:
            raise BadRequest(f"Invalid reasoning effort {effort!r}; one of {', '.join(ev.REASONING_EFFORTS)}")
        platform, chat = self.chats.settings_chat(conversation_id)
        cmd = f"/reasoning {effort}" + (" --global" if conversation_id is None else "")
        reply = await self.controls.send(platform, chat, cmd)
        snap = self.reasoning(conversation_id)
        if snap.effort != effort:
            raise BadRequest(_clean_reply(reply))
        if conversation_id is None:
            return ReasoningSnapshot(effort=snap.effort, enabled=snap.enabled, scope="global", conversation_id=None)
        return snap

    # --- yolo -----------------------------------------------------------------------------------

    def yolo(self, conversation_id: Optional[str]) -> YoloSnapshot:
        if conversation_id is not None:
            self.chats.settings_chat(conversation_id)
            if self.api.session_yolo(self.chats.session_key(conversation_id)):
                return YoloSnapshot(enabled=True, scope="conversation", conversation_id=conversation_id)
        return YoloSnapshot(enabled=self.api.global_yolo(), scope="global", conversation_id=conversation_id)

    async def set_yolo(self, enabled: bool, conversation_id: Optional[str]) -> YoloSnapshot:
        if conversation_id is not None:
            self.chats.settings_chat(conversation_id)
            self.api.set_session_yolo(self.chats.session_key(conversation_id), bool(enabled))
            return YoloSnapshot(enabled=bool(enabled), scope="conversation", conversation_id=conversation_id)
        store = self.chats.bridge.store
        if enabled:
            mode = str((self.api.config().get("approvals") or {}).get("mode", "manual"))
            if mode != "off":
                await store.set_setting("hermes.approvals_mode_before_yolo", mode)
            self.api.set_config_key("approvals.mode", "off")
        else:
            previous = store.get_setting("hermes.approvals_mode_before_yolo") or "manual"
            self.api.set_config_key("approvals.mode", previous if previous != "off" else "manual")
        return YoloSnapshot(enabled=bool(enabled), scope="global", conversation_id=None)
