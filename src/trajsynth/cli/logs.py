"""Where the CLI's log lines go, and which libraries may speak.

Our own loggers speak at INFO (``-q``: warnings only; ``-vv``: debug). Libraries (httpx logs
one line per HTTP request, openai, docker, Prefect) speak only of warnings unless ``-v``:
their INFO lines would bury the progress. Importing Prefect configures logging anew, so a
command that imports it calls ``quiet_libraries()`` again afterwards.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from rich.console import Console
from rich.logging import RichHandler

__all__ = ["configure", "logs_to", "quiet_libraries"]

_NOISY = (
    "httpx",
    "httpx2",  # the openai SDK's own fork of httpx logs under this name
    "httpcore",
    "httpcore2",
    "openai",
    "docker",
    "urllib3",
    "mcp",
    "prefect",
    "asyncio",
    "sentence_transformers",
    "transformers",
    "huggingface_hub",
)
_verbose = 0


def configure(console: Console, *, verbose: int, quiet: bool) -> None:
    """The root logger through ``console`` at the level the flags ask for."""
    global _verbose
    _verbose = verbose
    level = logging.WARNING if quiet else (logging.DEBUG if verbose > 1 else logging.INFO)
    logging.basicConfig(
        level=level,
        format="%(message)s",
        handlers=[RichHandler(console=console, show_path=False, rich_tracebacks=False)],
        force=True,
    )
    quiet_libraries()


def quiet_libraries() -> None:
    """Library loggers at WARNING, or at the root's level under ``-v``."""
    root = logging.getLogger().level
    level = min(root, logging.INFO) if _verbose else max(root, logging.WARNING)
    for noisy in _NOISY:
        logging.getLogger(noisy).setLevel(level)
    if not _verbose:  # the embedder's "Loading weights" bars, once per load
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


@contextlib.contextmanager
def logs_to(console: Console) -> Iterator[None]:
    """Log lines through ``console`` while inside: rich prints them above its live bars (a
    line written through another console breaks the live display, which then redraws)."""
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, RichHandler)]
    before = [h.console for h in handlers]
    for h in handlers:
        h.console = console
    try:
        yield
    finally:
        for h, c in zip(handlers, before, strict=True):
            h.console = c
