"""`synth run` against an endpoint that lists its models but never answers a chat request:
the run ends, in bounded time, with one line per failed unit and a summary that names it."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


class _Wedged(http.server.BaseHTTPRequestHandler):
    """GET /v1/models answers (the startup check passes); POST never gets a byte back."""

    protocol_version = "HTTP/1.1"
    release = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = b'{"object":"list","data":[{"id":"m","object":"model"}]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        type(self).release.wait(600)  # holds the connection, says nothing

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def wedged_server() -> Iterator[str]:
    _Wedged.release.clear()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Wedged)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        _Wedged.release.set()
        server.shutdown()
        server.server_close()


@pytest.mark.slow  # a `synth run` process: Prefect's ephemeral API starts (20-60 s)
def test_a_wedged_endpoint_ends_the_run_with_a_clear_summary(
    wedged_server: str, tmp_path: Path, prefect_api: dict[str, str]
) -> None:
    env = {
        **os.environ,
        **prefect_api,
        "SYNTH_RUN__LLM__TIMEOUT_S": "2",
        "SYNTH_RUN__LLM__MAX_RETRIES": "1",
        "SYNTH_STORE_PATH": str(tmp_path / "store.duckdb"),
        "COLUMNS": "200",
    }
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "trajsynth.cli", "run", "--base-url", wedged_server,
         "--tasks", "3", "--clusters", "shop", "--samples", "1", "--rollout", "linear"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=480,
    )  # fmt: skip
    wall = time.monotonic() - began
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    # every request gives up after 2 tries of 2 s (+ backoff), and once two have, the rest
    # are not asked (the endpoint answered nothing): bounded, where a floor-and-double
    # timeout (234 + 469 + ... s per request) took an hour
    assert wall < 240, (wall, out[-3000:])
    flat = " ".join(out.split())  # rich wraps long lines
    # the closing line names the endpoint and the settings that bounded each try (the unit
    # lines above it may show the first give-up or the "not asked" that followed it)
    assert f"error: the LLM endpoint {wedged_server} answered no request:" in flat, out[-3000:]
    assert "([run.llm] timeout_s = 2 s a try, max_retries = 1)" in flat, out[-3000:]
    assert "units failed (infra:" in flat


@pytest.mark.slow  # a `synth run` process, and the startup check's 10 s wait
def test_a_server_that_accepts_and_never_answers_ends_the_run_in_bounded_time(
    tmp_path: Path, prefect_api: dict[str, str]
) -> None:
    """The startup check cannot tell such a socket from a busy server (it goes on), so the
    run's own timeouts must end it: exit 1, bounded, with the summary that names the URL."""
    import socket

    with socket.socket() as silent:  # the kernel accepts into the backlog; nothing replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        env = {
            **os.environ,
            **prefect_api,
            "SYNTH_RUN__LLM__TIMEOUT_S": "2",
            "SYNTH_RUN__LLM__MAX_RETRIES": "1",
            "SYNTH_STORE_PATH": str(tmp_path / "s.duckdb"),
            "COLUMNS": "200",
        }
        began = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "trajsynth.cli", "run", "--base-url", url, "--tasks", "1",
             "--clusters", "shop", "--samples", "1", "--rollout", "linear"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=480,
        )  # fmt: skip
        wall = time.monotonic() - began
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 1 and wall < 240, (proc.returncode, wall, out[-2000:])
    assert f"error: the LLM endpoint {url} answered no request:" in out, out[-2000:]
