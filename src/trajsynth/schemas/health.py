"""Waiting for a server this process started to answer: one poll for every server we start.

It lives on the bottom floor because every floor that starts a server (agents: the embedded
LLM; flows: Prefect's API; dashboards: Streamlit) may import it.
"""

from __future__ import annotations

import operator
import subprocess
from collections.abc import Callable

import httpx
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

__all__ = ["wait_until_answers"]


def wait_until_answers(
    url: str,
    *,
    process: subprocess.Popen[bytes] | subprocess.Popen[str] | None,
    timeout_s: float,
    exited: Callable[[int], BaseException],
    interval_s: float = 0.1,
    request_timeout_s: float = 5.0,
) -> bool:
    """GET ``url`` every ``interval_s`` until it answers 200 (True) or ``timeout_s`` passes
    (False); if ``process`` exits first, raise ``exited(its exit code)``."""

    def answers(http: httpx.Client) -> bool:
        if process is not None and process.poll() is not None:
            # raised, not retried: tenacity retries only a False result
            raise exited(process.returncode)
        try:
            return http.get(url).status_code == 200
        except httpx.TransportError:
            return False

    poll = Retrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(interval_s),
        retry=retry_if_result(operator.not_),
        retry_error_callback=lambda _state: False,  # out of time: the caller says so
    )
    with httpx.Client(timeout=request_timeout_s) as http:
        return bool(poll(answers, http))
