"""Push: reaching a person whose client is closed (Web Push, UnifiedPush, ntfy, a signed webhook).

- ``model``: the message, its Topic, the push commands, subscription checks (pure)
- ``state``: when something is pushed, withdrawn, or not (pure)
- ``channels``: each channel as an HTTP request, VAPID keys (no I/O but the key file)
- ``delivery``: per-endpoint bounded, persisted queues and their workers
- ``notifier``: the hub subscriber that ties them together, and the decision tokens

See docs/push.md.
"""

from .delivery import drop_owner_rows
from .model import Registered, RegisterPush, UnregisterPush
from .notifier import PUSH_ORIGIN, Notifier, device_owner

__all__ = ["Notifier", "PUSH_ORIGIN", "Registered", "RegisterPush", "UnregisterPush", "device_owner",
           "drop_owner_rows"]
