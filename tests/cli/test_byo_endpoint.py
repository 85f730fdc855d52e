"""Bring your own endpoint: `synth run` against llama-cpp-python's own OpenAI-compatible
server (not ours: the stock ``chatml-function-calling`` chat format), started by the test.

That server renders the conversation with a Jinja template that reads ``message.content`` of
every message, so an assistant tool-call message without ``content`` got a 500 and the run
stored nothing. Here the run must store trajectories and count no infrastructure failure,
and `synth doctor --base-url` must say what the endpoint does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from trajsynth.llm.embedded import free_port, gguf_path
from trajsynth.store import Store

pytestmark = [pytest.mark.llm, pytest.mark.slow]


@pytest.fixture(scope="module")
def stock_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's server as docs/endpoints.md tells a user to start it: 4,096 tokens
    of context. Its handler generates a call's arguments with no ``max_tokens`` (to the end
    of the context), so the context is what bounds a turn: 8,192 let one turn run ~5,600
    tokens. A path that outgrows 4,096 ends as ``context_limit``; the default 2,048 fits no
    first turn."""
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "llama_cpp.server",
                "--model",
                str(gguf_path()),
                "--chat_format",
                "chatml-function-calling",
                "--model_alias",
                "smol",
                "--n_ctx",
                "4096",
                # the server's default is half the cores (one here) and no prompt cache; a
                # user on a 2-core machine gives it both, and every turn repeats its prefix
                "--n_threads",
                str(os.cpu_count() or 1),
                "--n_threads_batch",
                str(os.cpu_count() or 1),
                "--cache",
                "true",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],  # fmt: skip
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{base_url}/models", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "llama_cpp.server did not start in 180 s"
            time.sleep(1)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            # on SIGTERM it waits for the request it is computing, which may run to the end
            # of the context
            proc.kill()
            proc.wait(timeout=30)


def _env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SYNTH_SANDBOX__KIND": "local",
        "PREFECT_HOME": str(home / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    }


@pytest.mark.skipif(
    os.environ.get("SYNTH_BYO_RUN") != "1",
    reason="opt-in (SYNTH_BYO_RUN=1): the stock chatml-function-calling handler generates a "
    "call's arguments to the end of the context (max_tokens is not passed on); a turn that "
    "runs away takes minutes on 2 cores; on 2026-11-28, on 2 cores at load 12-14, one "
    "linear rollout did not finish in 25 minutes (a 2x2 tree run took 24.5)",
)
def test_a_run_against_llama_cpp_python_s_own_server_stores_trajectories(
    stock_server: str, tmp_path: Path
) -> None:
    store_path = tmp_path / "s.duckdb"
    # what docs/endpoints.md tells a user of this server to set: after tool results ask for
    # words ("none"), which its handler bounds by max_tokens; under "auto" it does not
    (tmp_path / "synth.toml").write_text('[run]\nassistant_tool_choice_after_tool = "none"\n')
    began = time.monotonic()
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "trajsynth.cli",
            "run",
            "--base-url",
            stock_server,
            "--model",
            "smol",
            "--tasks",
            "1",
            "--clusters",
            "shop",
            "--samples",
            "1",
            "--rollout",
            "linear",
            "--store",
            str(store_path),
            "--status-every",
            "30",
        ],  # fmt: skip
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=3600,  # minutes per request on a loaded 2-core machine
    )
    wall = time.monotonic() - began
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    store = Store(store_path)
    summary = json.loads(store.query("SELECT summary FROM runs")[0]["summary"])
    judged = store.query(
        "SELECT count(*) AS n, count(*) FILTER (WHERE passed) AS passed FROM verdicts"
    )[0]
    stops = store.query("SELECT termination, count(*) AS n FROM trajectories GROUP BY 1")
    print(  # the figures the report quotes (pytest -s)
        f"BYO llama_cpp.server: {summary['trajectories']} trajectories, {judged['n']} judged, "
        f"{judged['passed']} passed, failed units {summary.get('failed_units')}, stops "
        f"{ {r['termination']: r['n'] for r in stops} }, wall {wall:.0f} s, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    assert summary["trajectories"] > 0
    assert not summary.get("failed_units"), summary.get("failed_unit_errors")
    assert "infra" not in summary.get("failures_by_class", {})
    assert "500" not in ran.stderr


def test_doctor_says_what_the_stock_server_does(stock_server: str, tmp_path: Path) -> None:
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "trajsynth.cli",
            "doctor",
            "--base-url",
            stock_server,
            "--model",
            "smol",
            "--json",
        ],  # fmt: skip
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=900,
    )
    checks = {c["check"]: c for c in json.loads(ran.stdout)}
    assert list(checks) == [
        "reachable", "chat", "tool calls", "tool_choice", "logprobs", "n", "max_tokens"
    ]  # fmt: skip
    assert checks["reachable"]["ok"] and checks["chat"]["ok"]
    # the stock handler refuses tool_choice="required" (500); doctor says so and what to do
    assert "'required' refused" in checks["tool_choice"]["detail"]
    assert "assistant_tool_choice" in checks["tool_choice"]["run_does"]
    # its handler decodes a call's arguments with no max_tokens: doctor names what bounds it
    assert not checks["max_tokens"]["ok"] and "--n_ctx" in checks["max_tokens"]["run_does"]
    assert all(c["run_does"] for c in checks.values())
    assert ran.returncode == (0 if all(c["ok"] for c in checks.values() if c["required"]) else 1)
