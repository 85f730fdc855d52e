"""Where flows report progress. The CLI installs a sink that drives a rich progress bar;
under a Prefect worker nothing is installed and progress goes to the flow's log."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["ProgressEvent", "progress_sink", "report"]

log = logging.getLogger(__name__)

ProgressEvent = tuple[str, int, int, str]  # (stage, done, total, message)
_sink: ContextVar[Callable[[ProgressEvent], None] | None] = ContextVar(
    "trajsynth_progress", default=None
)


@contextmanager
def progress_sink(callback: Callable[[ProgressEvent], None]) -> Iterator[None]:
    token = _sink.set(callback)
    try:
        yield
    finally:
        _sink.reset(token)


def report(stage: str, done: int, total: int, message: str = "") -> None:
    callback = _sink.get()
    if callback is None:
        log.info("%s %d/%d %s", stage, done, total, message)
    else:
        callback((stage, done, total, message))
