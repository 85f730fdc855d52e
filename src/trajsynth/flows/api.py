"""Prefect's API for a command: started early, in the background, and waited for by us.

With no ``PREFECT_API_URL`` Prefect starts an ephemeral API server (uvicorn in a subprocess)
the first time a flow needs it, then waits for it, and on a loaded machine that wait ends in
a bare ``RuntimeError`` traceback. ``start_api()`` starts the same server (Prefect's own
``SubprocessASGIServer``, which flows then reuse) on a thread as soon as a command knows it
will run a flow, so its start overlaps the command's other set-up (imports, the embedded LLM
server); ``wait_api()`` waits with our own budget and turns a failure into
``PrefectAPIUnavailable`` with one line that says what to do.

When the command has not imported Prefect yet and nothing in the environment names an API,
``start_api()`` starts the server itself instead (:mod:`trajsynth.flows.ephemeral_api`), before
any Prefect import, and points ``PREFECT_API_URL`` at it: the server then boots while the
command imports, and the command never loads Prefect's server module. ``synth -vv run --tasks
1`` on a warm Prefect home sent its first LLM request at 14.3 s with Prefect's own start (load
0.7) and at 10.3 s with this one (load 0.0; 7.0 s once the embedded LLM was launched early
too).
"""

from __future__ import annotations

import atexit
import logging
import os
import select
import subprocess
import sys
import threading
from typing import Any

from trajsynth.schemas import InfraError
from trajsynth.schemas.health import wait_until_answers

__all__ = ["PrefectAPIUnavailable", "api_started", "start_api", "wait_api"]

log = logging.getLogger(__name__)


class PrefectAPIUnavailable(InfraError):
    """Prefect's API did not answer: the ephemeral server did not start, or the configured
    ``PREFECT_API_URL`` is unreachable."""


class _Start:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.own: subprocess.Popen[str] | None = None  # our own server, when we started one


_start: _Start | None = None
_SAY_URL_S = 60.0
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
        if _start is not None:
            return
        if "prefect" not in sys.modules and not os.environ.get("PREFECT_API_URL"):
            own = _start_own_server()
            if own is not None:
                _start = own
                threading.Thread(
                    target=_wait_own, args=(own, timeout_s), name="prefect-api", daemon=True
                ).start()
                return
        if not _ephemeral():
            return
        _start = _Start()
        threading.Thread(
            target=_run, args=(_start, timeout_s), name="prefect-api", daemon=True
        ).start()


def _start_own_server() -> _Start | None:
    """:mod:`trajsynth.flows.ephemeral_api` started, ``PREFECT_API_URL`` set to it; None when
    Prefect's settings name an API after all (a profile) or the server could not say where."""
    process = subprocess.Popen(
        [sys.executable, "-m", "trajsynth.flows.ephemeral_api"], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    # ~1 s: it reads Prefect's settings first; one that says nothing in a minute is dropped
    said, _, _ = select.select([process.stdout], [], [], _SAY_URL_S)
    url = process.stdout.readline().strip() if said else ""
    if not url.startswith("http"):
        _stop_own(process)  # "configured" (it exits), failed, or silent: Prefect's own path
        return None
    os.environ["PREFECT_API_URL"] = url
    start = _Start()
    start.own = process
    atexit.register(_stop_own, process)
    return start


def _wait_own(start: _Start, timeout_s: float) -> None:
    """Poll our server's health as the other servers' starts do (``wait_until_answers``);
    the outcome is handed to :func:`wait_api`."""
    own = start.own
    assert own is not None
    url = f"{os.environ['PREFECT_API_URL']}/health"
    try:
        if not wait_until_answers(
            url,
            process=own,
            timeout_s=timeout_s,
            exited=lambda code: RuntimeError(f"the server exited with code {code}"),
        ):
            raise TimeoutError(f"{url} did not answer in {timeout_s:.0f} s")
    except BaseException as exc:  # handed to the waiting thread
        start.error = exc
    finally:
        start.done.set()


def _stop_own(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


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
