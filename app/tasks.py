"""Background asyncio tasks that cannot fail silently.

Why: a task created with ``asyncio.create_task`` and never awaited (or awaited only on some paths)
loses its exception: asyncio prints "Task exception was never retrieved" at garbage collection, if
ever, without the task's purpose. :func:`spawn` names the task and adds a done-callback that logs
the exception a task ended with, with its traceback, at the moment it ends. Awaiting the task
still raises the exception as usual; cancellation is not an error and is not logged.

A foundation module: standard library only, importable from any layer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


def spawn(coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
    """``asyncio.create_task(coro, name=name)``, plus a done-callback logging its exception."""
    task = asyncio.create_task(coro, name=name)
    task.add_done_callback(log_task_exception)
    return task


def log_task_exception(task: asyncio.Task[Any]) -> None:
    """Done-callback: log (ERROR, with traceback) the exception ``task`` ended with, if any."""
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.error("task %r failed: %s: %s", task.get_name(), type(exc).__name__, exc,
                  exc_info=(type(exc), exc, exc.__traceback__))


async def stop(task: asyncio.Task[Any] | None, *, tries: int = 10, wait: float = 0.5) -> None:
    """Cancel ``task`` and wait until it has ended, cancelling again if a cancellation was
    swallowed on the way. Gives up, with a warning, after ``tries`` rounds. Never raises; the
    task's own failure is logged by :func:`spawn`'s callback.

    A swallowed cancellation would keep the server's shutdown waiting forever on a loop that stays
    "cancelling" in its next sleep. The store lets no cancellation through while aiosqlite's
    thread still runs BEGIN or COMMIT (``Database._settle``); the second round here is the
    defence against any other code that swallows one (``asyncio.wait_for`` on Python 3.11 when its
    awaitable finishes at the same moment). ARCHITECTURE.md, "Errors and logs", tells how it was
    found."""
    if task is None:
        return
    for _ in range(tries):
        if task.done():
            return
        task.cancel()
        await asyncio.wait({task}, timeout=wait)
    if not task.done():
        log.warning("task %r did not stop after %d cancellations; leaving it", task.get_name(), tries)
