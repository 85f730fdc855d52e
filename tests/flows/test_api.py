"""Prefect's ephemeral API started in the background and waited for by us: a start that fails
or takes too long is one line naming what to do, never Prefect's bare traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from trajsynth.flows import api


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api, "_start", None)
    monkeypatch.setattr(api, "_ephemeral", lambda: True)
    monkeypatch.setattr(api, "_start_own_server", lambda: None)  # Prefect's own start


def test_a_start_that_fails_is_one_line(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    class Failing:
        def start(self, timeout: int) -> None:
            raise RuntimeError("Timed out while attempting to connect.\nstdout: ...")

    monkeypatch.setattr(api, "_server", Failing)
    api.start_api()
    with pytest.raises(api.PrefectAPIUnavailable) as caught:
        api.wait_api()
    message = str(caught.value)
    assert "\n" not in message and "Timed out while attempting to connect." in message
    assert "PREFECT_API_URL" in message


def test_a_start_that_hangs_is_reported_after_our_budget(
    fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    release = threading.Event()

    class Hanging:
        def start(self, timeout: int) -> None:
            release.wait(30)

    monkeypatch.setattr(api, "_server", Hanging)
    try:
        with pytest.raises(api.PrefectAPIUnavailable, match="did not start in 0 s"):
            api.wait_api(timeout_s=0.2)
    finally:
        release.set()


def test_a_configured_server_is_left_to_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api, "_start", None)
    # (not through the environment: Prefect fixes its settings when it is first imported)
    monkeypatch.setattr(api, "_ephemeral", lambda: False)
    monkeypatch.setattr(api, "_start_own_server", lambda: None)  # ours said "configured"
    api.wait_api(timeout_s=0.1)  # returns at once: nothing of ours to wait for
    assert not api.api_started()


@pytest.mark.slow
def test_the_real_server_starts_in_the_background_and_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import httpx

    monkeypatch.setattr(api, "_start", None)
    monkeypatch.setattr(api, "_start_own_server", lambda: None)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    api.start_api()
    api.wait_api(timeout_s=180)
    server = api._server()
    assert httpx.get(f"{server.api_url}/health", timeout=10).status_code == 200


_OWN_SERVER_SCRIPT = """
import json, os, sys
from trajsynth.flows import api
assert "prefect" not in sys.modules
api.start_api()
url = os.environ.get("PREFECT_API_URL")
api.wait_api(timeout_s=180)
from prefect.client.orchestration import get_client
with get_client(sync_client=True) as client:
    healthy = client.api_healthcheck() is None
    used = str(client.api_url)
print(json.dumps({"url": url, "used": used, "healthy": healthy,
                  "pid": api._start.own.pid if api._start and api._start.own else None,
                  "server_module": "prefect.server.api.server" in sys.modules}))
"""


def _run_script(script: str, env: dict[str, str]) -> dict:
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_command_that_has_not_imported_prefect_starts_its_own_server_first(
    tmp_path: Path,
) -> None:
    import os

    import psutil

    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    out = _run_script(_OWN_SERVER_SCRIPT, env)
    assert out["url"] and out["url"].startswith("http://127.0.0.1:")
    assert out["used"].rstrip("/") == out["url"] and out["healthy"]
    # Prefect's client talked to it as to a configured server: its server module never loaded
    assert out["server_module"] is False
    assert out["pid"] and not psutil.pid_exists(out["pid"])  # stopped when the command ended


@pytest.mark.slow
def test_a_profile_that_names_an_api_keeps_it(tmp_path: Path) -> None:
    import os

    home = tmp_path / "prefect"
    home.mkdir()
    (home / "profiles.toml").write_text(
        'active = "remote"\n\n[profiles.remote]\nPREFECT_API_URL = "http://127.0.0.1:9/api"\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(home)
    script = (
        "import json, os\nfrom trajsynth.flows import api\napi.start_api()\n"
        "print(json.dumps({'url': os.environ.get('PREFECT_API_URL'), "
        "'started': api.api_started()}))"
    )
    # no server of ours, no environment override: Prefect's client uses the profile's API
    assert _run_script(script, env) == {"url": None, "started": False}


def test_a_launcher_that_says_nothing_leaves_the_start_to_prefect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import subprocess
    import sys

    silent = [sys.executable, "-c", "import time; time.sleep(30)"]
    real_popen = subprocess.Popen
    started: list[subprocess.Popen[str]] = []

    def popen(args: list[str], **kwargs: object) -> subprocess.Popen[str]:
        started.append(real_popen(silent, **kwargs))  # type: ignore[call-overload]
        return started[-1]

    # a launcher that never prints its URL
    monkeypatch.setattr(api.subprocess, "Popen", popen)
    monkeypatch.setattr(api, "_SAY_URL_S", 0.5)
    assert api._start_own_server() is None
    assert started and started[0].poll() is not None  # stopped, not left running


async def test_the_servers_socket_gets_tcp_nodelay_on_each_connection() -> None:
    """uvicorn serves ``listening_socket`` through ``loop.create_server(sock=...)``; asyncio
    sets TCP_NODELAY on what it accepts only when the socket's protocol says TCP (a plain
    ``socket.socket()`` made every kept-alive answer wait ~45 ms for a delayed ACK)."""
    import asyncio
    import socket

    from trajsynth.flows.ephemeral_api import listening_socket

    accepted: list[int] = []

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            accepted.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    sock = listening_socket()
    assert sock.proto == socket.IPPROTO_TCP
    server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
    async with server:
        _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        for _ in range(100):
            if accepted:
                break
            await asyncio.sleep(0.01)
        writer.close()
    assert accepted and accepted[0] != 0
