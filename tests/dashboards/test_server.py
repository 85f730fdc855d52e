"""Waiting for the dashboard server (``dashboards.server.wait_until_ready``, polled through
tenacity): ready as soon as the health endpoint answers, a clear error when the process
exits first or nothing answers in time."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from trajsynth.dashboards import free_port, wait_until_ready
from trajsynth.schemas import InfraError


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path == "/_stcore/health" else 404)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:  # quiet: no request lines in the test log
        pass


@pytest.fixture
def healthy() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_ready_as_soon_as_the_health_endpoint_answers(healthy: str) -> None:
    started = time.monotonic()
    wait_until_ready(healthy, timeout_s=10)
    assert time.monotonic() - started < 5  # the first poll answers: no waiting out the limit


def test_nothing_answering_is_an_infra_error_after_the_limit() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(InfraError, match=r"did not answer within 1 s"):
        wait_until_ready(url, timeout_s=1.0)
    assert time.monotonic() - started >= 1.0


def test_a_process_that_exits_first_is_named_with_its_code() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    with pytest.raises(InfraError, match="exited with code 3"):
        wait_until_ready(f"http://127.0.0.1:{free_port()}", timeout_s=30, process=proc)
