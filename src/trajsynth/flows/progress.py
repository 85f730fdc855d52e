"""Where flows report progress. The CLI installs a sink that drives a rich progress bar;
under a Prefect worker nothing is installed and progress goes to the flow's log.

Besides the per-stage counts (``report``), every assistant turn of every rollout is a
``turns`` event (``tick``): ``TurnReporter`` wraps a rollout's LLM client and ticks after
each assistant reply, so the display moves while a long tree grows, not only when it ends.
A tick's total is 0 (not known ahead: rollouts stop early); the rollout bar carries the ETA.
The sink is a context variable: Prefect's thread task runner copies the context into each
task, so ticks from task threads reach the same sink (a lock guards the shared count).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from trajsynth.schemas import AgentRole, Message

__all__ = ["ProgressEvent", "TurnReporter", "progress_sink", "report", "tick"]

log = logging.getLogger(__name__)

ProgressEvent = tuple[str, int, int, str]  # (stage, done, total, message); total 0: unknown
_sink: ContextVar[Callable[[ProgressEvent], None] | None] = ContextVar(
    "trajsynth_progress", default=None
)
_counts: ContextVar[dict[str, int] | None] = ContextVar("trajsynth_progress_counts", default=None)
_lock = threading.Lock()


@contextmanager
def progress_sink(callback: Callable[[ProgressEvent], None]) -> Iterator[None]:
    token = _sink.set(callback)
    counts = _counts.set({})
    try:
        yield
    finally:
        _counts.reset(counts)
        _sink.reset(token)


def report(stage: str, done: int, total: int, message: str = "") -> None:
    callback = _sink.get()
    if callback is None:
        log.info("%s %d/%d %s", stage, done, total, message)
    else:
        callback((stage, done, total, message))


def tick(stage: str, message: str = "") -> int:
    """One more event of an open-ended ``stage``; returns the count so far (under the sink)."""
    counts = _counts.get()
    if counts is None:
        log.debug("%s %s", stage, message)
        return 0
    with _lock:
        counts[stage] = n = counts.get(stage, 0) + 1
    report(stage, n, 0, message)
    return n


class TurnReporter:
    """An ``LLMClient`` that ticks ``turns`` after each assistant reply; everything else is
    the wrapped client's."""

    def __init__(self, client: Any, label: str) -> None:
        self._client = client
        self._label = label

    async def chat(self, messages: Sequence[Message], *, role: AgentRole, **kwargs: Any) -> Any:
        result = await self._client.chat(messages, role=role, **kwargs)
        if role is AgentRole.ASSISTANT:
            turn = 1 + sum(m.role.value == "assistant" for m in messages)
            tick("turns", f"{self._label} turn {turn}")
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)
