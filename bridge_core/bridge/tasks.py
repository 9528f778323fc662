"""Background tasks through one helper that keeps a reference and logs failures."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Coroutine

log = logging.getLogger("agent_bridge.tasks")


class TaskSet:
    """Owns background tasks: no orphans, failures logged, all cancelled on close."""

    def __init__(self, name: str = "tasks"):
        self.name = name
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str | None = None) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("%s: background task %s failed", self.name, task.get_name(), exc_info=exc)

    def __len__(self) -> int:
        return len(self._tasks)

    async def close(self, timeout: float = 5.0) -> None:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
