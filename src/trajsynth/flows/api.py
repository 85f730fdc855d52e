"""Prefect's API for a command: started early, in the background, and waited for by us.

With no ``PREFECT_API_URL`` Prefect starts an ephemeral API server (uvicorn in a subprocess)
the first time a flow needs it, then waits for it, and on a loaded machine that wait ends in
a bare ``RuntimeError`` traceback. ``start_api()`` starts the same server (Prefect's own
``SubprocessASGIServer``, which flows then reuse) on a thread as soon as a command knows it
will run a flow, so its start overlaps the command's other set-up (imports, the embedded LLM
server); ``wait_api()`` waits with our own budget and turns a failure into
``PrefectAPIUnavailable`` with one line that says what to do.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from trajsynth.schemas import InfraError

__all__ = ["PrefectAPIUnavailable", "api_started", "start_api", "wait_api"]

log = logging.getLogger(__name__)


class PrefectAPIUnavailable(InfraError):
    """Prefect's API did not answer: the ephemeral server did not start, or the configured
    ``PREFECT_API_URL`` is unreachable."""


class _Start:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None


_start: _Start | None = None
_lock = threading.Lock()


def _ephemeral() -> bool:
    import os

    from prefect.settings import PREFECT_API_URL

    # the environment first: Prefect's settings context is fixed when prefect is imported
    return not (os.environ.get("PREFECT_API_URL") or PREFECT_API_URL.value())


def _server() -> Any:
    """Prefect's process-wide ephemeral server object (the one its clients reuse)."""
    from prefect.server.api.server import SubprocessASGIServer

    return SubprocessASGIServer()


def _run(start: _Start, timeout_s: float) -> None:
    try:
        _server().start(timeout=int(timeout_s))
    except BaseException as exc:  # handed to the waiting thread
        start.error = exc
    finally:
        start.done.set()


def start_api(timeout_s: float = 180.0) -> None:
    """Start the ephemeral API server on a thread (once); a no-op with ``PREFECT_API_URL`` set."""
    global _start
    with _lock:
        if _start is not None or not _ephemeral():
            return
        _start = _Start()
        threading.Thread(
            target=_run, args=(_start, timeout_s), name="prefect-api", daemon=True
        ).start()


def api_started() -> bool:
    """Whether a start is under way or done (for tests and the progress line)."""
    return _start is not None


def wait_api(timeout_s: float = 180.0) -> None:
    """Block until the API answers; ``PrefectAPIUnavailable`` with one line when it does not."""
    start_api(timeout_s)
    if _start is None:  # a configured server: Prefect's client reports its own errors
        return
    if not _start.done.wait(timeout_s):
        raise PrefectAPIUnavailable(
            f"Prefect's ephemeral API did not start in {timeout_s:.0f} s (a loaded machine?): "
            "retry, raise PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, or run "
            "`prefect server start` and set PREFECT_API_URL"
        )
    if _start.error is not None:
        first = str(_start.error).strip().splitlines()[0][:300] if str(_start.error) else ""
        raise PrefectAPIUnavailable(
            f"Prefect's ephemeral API failed to start: {type(_start.error).__name__}: {first} "
            "(retry, or run `prefect server start` and set PREFECT_API_URL)"
        ) from _start.error
