"""Scheduled deployments for real: a Prefect server on loopback, `synth deploy` registers the
project's deployments (cron schedules and all), `synth serve` serves them, two triggered
`grow-dataset` runs complete and the store grows by one run (the next seed) each time, then
the `export` deployment writes the datasets."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fakes.llm_server import FakeLLMServer
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId
from prefect.deployments import run_deployment
from prefect.settings import PREFECT_API_URL, temporary_settings

from trajsynth.store import Store

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PROJECT = REPO / "prefect.yaml"
SYNTH = [sys.executable, "-m", "trajsynth.cli"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prefect_env(home: Path, api_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS="2",
        COLUMNS="200",
    )
    if api_url:
        env["PREFECT_API_URL"] = api_url
    return env


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)


@pytest.fixture(scope="module")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("prefect_home")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    log = (home / "server.log").open("w")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "prefect"), "server", "start",
         "--host", "127.0.0.1", "--port", str(port)],
        env=_prefect_env(home, None),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (home / "server.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the Prefect server did not start in 180 s"
            time.sleep(0.5)
        yield url
    finally:
        _stop(proc)
        log.close()


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def _project(tmp_path: Path, llm: FakeLLMServer) -> Path:
    (tmp_path / "synth.toml").write_text(
        f"""
store_path = "{tmp_path / "data" / "synth.duckdb"}"
cache_dir = "{tmp_path / "data" / "cache"}"
clusters_dir = "{tmp_path / "data" / "clusters"}"
[llm]
base_url = "{llm.base_url}"
model = "fake"
cache = false
[run]
tasks = 3
samples = 1
clusters = ["shop"]
[sandbox]
kind = "local"
"""
    )
    return tmp_path / "data" / "synth.duckdb"


def test_deploy_serve_and_run_grows_the_store(
    tmp_path: Path, prefect_api: str, llm: FakeLLMServer
) -> None:
    store_path = _project(tmp_path, llm)
    env = _prefect_env(tmp_path / "client_home", prefect_api)
    env["SYNTH_LLM__API_KEY"] = "sk-never-in-prefect-7"
    # from a folder that is not the checkout: the packaged definitions
    deployed = subprocess.run(
        [*SYNTH, "deploy"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    assert "grow-dataset/grow-dataset" in deployed.stdout
    assert "export-stage/export" in deployed.stdout

    with temporary_settings({PREFECT_API_URL: prefect_api}):
        with get_client(sync_client=True) as client:
            deployment = client.read_deployment_by_name("grow-dataset/grow-dataset")
            assert [s.schedule.cron for s in deployment.schedules] == ["0 3 * * *"]
            assert deployment.parameters["store_path"] == str(store_path)
            assert deployment.parameters["config"]["tasks"] == 3
            assert "api_key" not in deployment.parameters
            assert "sk-never" not in deployment.model_dump_json()
            # the server's scheduler turns the cron into scheduled runs at 03:00 UTC
            deadline = time.monotonic() + 60
            scheduled = []
            while not scheduled and time.monotonic() < deadline:
                scheduled = client.read_flow_runs(
                    deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id]))
                )
                time.sleep(1)
            assert scheduled, "the cron schedule made no scheduled run"
            assert all(r.state_type.value == "SCHEDULED" for r in scheduled)
            assert {
                (r.expected_start_time.hour, r.expected_start_time.minute) for r in scheduled
            } == {(3, 0)}

        serve_log = (tmp_path / "serve.log").open("w")
        server = subprocess.Popen(
            [*SYNTH, "serve"],
            cwd=tmp_path,
            env=env,
            stdout=serve_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            seeds = []
            for _ in range(2):
                flow_run = run_deployment("grow-dataset/grow-dataset", timeout=300, poll_interval=1)
                log_text = (tmp_path / "serve.log").read_text()[-4000:]
                assert flow_run.state is not None and flow_run.state.is_completed(), log_text
                runs = Store(store_path).query(
                    "SELECT run_id, state, config->>'seed' AS seed FROM runs ORDER BY seed"
                )
                seeds = [(r["state"], int(r["seed"])) for r in runs]
            exported = run_deployment("export-stage/export", timeout=300, poll_interval=1)
            log_text = (tmp_path / "serve.log").read_text()[-4000:]
            assert exported.state is not None and exported.state.is_completed(), log_text
        finally:
            _stop(server)
            serve_log.close()

    # for workers instead of `synth serve`: the same deployment into a (new) process work pool,
    # read from the repo's prefect.yaml (kept for `prefect deploy` users)
    pooled = subprocess.run(
        [*SYNTH, "deploy", "--project", str(PROJECT), "--name", "export", "--work-pool", "tsp"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pooled.returncode == 0, pooled.stdout + pooled.stderr
    with temporary_settings({PREFECT_API_URL: prefect_api}), get_client(sync_client=True) as c:
        assert c.read_work_pool("tsp").type == "process"
        assert c.read_deployment_by_name("export-stage/export").work_pool_name == "tsp"

    # each firing grew the store by one completed run with the next seed
    assert seeds == [("completed", 0), ("completed", 1)]
    store = Store(store_path)
    per_run = store.query(
        "SELECT run_id, count(*) AS n FROM trajectories GROUP BY run_id ORDER BY run_id"
    )
    assert len(per_run) == 2 and all(r["n"] >= 1 for r in per_run)
    verdicts = store.query(
        "SELECT count(*) AS n FROM verdicts JOIN trajectories USING (trajectory_id)"
    )[0]["n"]
    assert verdicts == sum(r["n"] for r in per_run)
    assert b"sk-never-in-prefect-7" not in store_path.read_bytes()
    # the export deployment wrote the datasets where prefect.yaml says, under the project,
    # or (nothing selected by curation yet) completed having written nothing
    selected = store.query("SELECT count(*) AS n FROM selections WHERE selected")[0]["n"]
    assert any((tmp_path / "data" / "export").rglob("*.parquet")) == (selected > 0)
    # the flow ran from the installed package: Prefect copied no project folder in here
    assert not (tmp_path / "src").exists()
