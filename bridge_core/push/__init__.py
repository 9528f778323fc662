"""Push: reaching a person whose client is closed (Web Push, UnifiedPush, ntfy, a signed webhook).

- ``model``: the message, its Topic, the push commands, subscription checks (pure)
- ``state``: when something is pushed, withdrawn, or not (pure)
- ``channels``: each channel as an HTTP request, VAPID keys (no I/O but the key file)
- ``delivery``: per-endpoint bounded, persisted queues and their workers
- ``notifier``: the hub subscriber that ties them together, and the decision tokens

See docs/push.md.
"""

from typing import Any

from .model import Registered, RegisterPush, UnregisterPush

# the parts with I/O (aiohttp, asyncio) load on first use, so a codec that decodes the push commands
# (``model``, pure) stays free of them (pyproject.toml, the "forbidden" contract of the pure front-end modules)
def __getattr__(name: str) -> Any:
    if name in ("Notifier", "PUSH_ORIGIN", "device_owner"):
        from . import notifier

        return getattr(notifier, name)
    if name == "drop_owner_rows":
        from .delivery import drop_owner_rows

        return drop_owner_rows
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Notifier", "PUSH_ORIGIN", "Registered", "RegisterPush", "UnregisterPush", "device_owner",
           "drop_owner_rows"]
