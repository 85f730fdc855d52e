"""Telling the caller, while it lasts, that a request to the LLM is taking long.

``OpenAILLMClient`` watches each try of a request: once it has waited ``FIRST_NOTICE_S`` for
the reply, it hands a ``Waiting`` notice to the listener every ``NOTICE_EVERY_S`` until the
reply comes or the try is given up, then one last notice with ``done`` set (so a display can
clear the line). The listener is whatever the caller installed with ``wait_listener`` (the
flows install one that feeds the progress display); with none, the notices go to this
module's log, at most one every ``LOG_EVERY_S``, so a stuck endpoint is never silent.

The listener is a context variable: event loops, asyncio tasks and Prefect's task threads
copy the context, so requests made under ``with wait_listener(...)`` reach it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = [
    "FIRST_NOTICE_S",
    "LOG_EVERY_S",
    "NOTICE_EVERY_S",
    "Waiting",
    "wait_listener",
    "watch_reply",
]

log = logging.getLogger(__name__)

FIRST_NOTICE_S = 5.0
NOTICE_EVERY_S = 1.0
LOG_EVERY_S = 30.0


@dataclass(frozen=True)
class Waiting:
    """One notice: who waits on which server, for how long, and on which try."""

    role: str
    base_url: str
    waited_s: float
    attempt: int
    attempts: int
    timeout_s: float
    done: bool = False

    def line(self) -> str:
        """``waiting for the assistant's reply, 42 s (try 1 of 4; retried at 60 s)``"""
        last = "given up" if self.attempt >= self.attempts else "retried"
        return (
            f"waiting for the {self.role}'s reply, {self.waited_s:.0f} s (try {self.attempt} "
            f"of {self.attempts}; {last} at {_seconds(self.timeout_s)} s) from {self.base_url}"
        )


def _seconds(value: float) -> str:
    """Whole seconds, or the value itself below ten (a 0.4 s timeout is not "0 s")."""
    return f"{value:.0f}" if value >= 10 else f"{value:g}"


Listener = Callable[[Waiting], None]
_listener: ContextVar[Listener | None] = ContextVar("trajsynth_llm_wait", default=None)


@contextlib.contextmanager
def wait_listener(listener: Listener | None) -> Iterator[None]:
    """Notices of requests made inside go to ``listener`` (``None``: to the log)."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def _logger() -> Listener:
    last = [float("-inf")]

    def to_log(notice: Waiting) -> None:
        if notice.done or notice.waited_s - last[0] < LOG_EVERY_S:
            return
        last[0] = notice.waited_s
        log.warning("%s", notice.line())

    return to_log


@contextlib.asynccontextmanager
async def watch_reply(
    *, role: str, base_url: str, attempt: int, attempts: int, timeout_s: float
) -> AsyncIterator[None]:
    """Notices for one try while the block runs (see the module doc)."""
    listener = _listener.get() or _logger()
    start = time.monotonic()
    spoke = False

    def notice(done: bool) -> Waiting:
        return Waiting(role, base_url, time.monotonic() - start, attempt, attempts, timeout_s, done)

    async def tick() -> None:
        nonlocal spoke
        await asyncio.sleep(FIRST_NOTICE_S)
        while True:
            spoke = True
            listener(notice(False))
            await asyncio.sleep(NOTICE_EVERY_S)

    ticker = asyncio.ensure_future(tick())
    try:
        yield
    finally:
        ticker.cancel()  # it stops at its sleep: no notice after this one
        if spoke:
            listener(notice(True))
