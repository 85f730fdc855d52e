"""Scale-out on Dask for real: `synth run` with `task_runner = "dask"` spreads a round's units
over a local cluster of worker processes and stores exactly the rows the thread runner stores;
a worker SIGKILLed mid-round has its unit rerun elsewhere and the store stays the same."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer

from trajsynth.store import Store

pytestmark = pytest.mark.slow

COMPARED = {
    "blueprints": "blueprint_id",
    "trees": "tree_id",
    "nodes": "node_id",
    "trajectories": "trajectory_id",
    "verdicts": "verdict_id",
    "llm_calls": "call_key",
    "work_units": "unit_id",
}


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(delay_s=0.02) as server:
        yield server


def _run(cwd: Path, llm: FakeLLMServer, api: dict[str, str], **env: str) -> Store:
    cwd.mkdir(parents=True, exist_ok=True)
    full_env = {
        **os.environ,
        **api,
        "SYNTH_SANDBOX__KIND": "local",
        "SYNTH_LLM__CACHE": "false",
        "PREFECT_HOME": str(cwd / "prefect"),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
        **env,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "trajsynth.cli", "-q", "run",
         "--base-url", llm.base_url, "--model", "fake", "--clusters", "shop,calendar",
         "--tasks", "6", "--samples", "2", "--seed", "21", "--concurrency", "3"],
        cwd=cwd, env=full_env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return Store(cwd / "data" / "synth.duckdb")


def _ids(store: Store) -> dict[str, set[str]]:
    return {t: {r[pk] for r in store.query(f"SELECT {pk} FROM {t}")} for t, pk in COMPARED.items()}


@pytest.fixture(scope="module")
def threads(
    tmp_path_factory: pytest.TempPathFactory, llm: FakeLLMServer, prefect_api: dict[str, str]
) -> Store:
    return _run(tmp_path_factory.mktemp("threads"), llm, prefect_api)


def test_a_local_dask_cluster_stores_what_threads_store(
    tmp_path: Path, llm: FakeLLMServer, threads: Store, prefect_api: dict[str, str]
) -> None:
    dask = _run(tmp_path, llm, prefect_api, SYNTH_RUN__TASK_RUNNER="dask")
    expected = _ids(threads)
    assert expected["trajectories"] and expected["verdicts"]
    assert _ids(dask) == expected
    assert dask.counts() == threads.counts()
    outcome = "SELECT trajectory_id, termination, failure_class FROM trajectories"
    assert sorted(map(str, dask.query(outcome))) == sorted(map(str, threads.query(outcome)))


def test_a_worker_killed_mid_round_loses_nothing(
    tmp_path: Path, llm: FakeLLMServer, threads: Store, prefect_api: dict[str, str]
) -> None:
    from distributed import LocalCluster  # imported here: collecting it cost every worker 0.3 s

    store = Store(tmp_path / "data" / "synth.duckdb")
    killed: list[int] = []
    with LocalCluster(
        n_workers=3, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        pids = {n.process.pid for n in cluster.workers.values()}
        assert len(pids) == 3

        def kill_one_after_first_trajectory() -> None:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if (
                    store.path.exists()
                    and store.query("SELECT count(*) AS n FROM trajectories")[0]["n"]
                ):
                    pid = sorted(pids)[0]
                    os.kill(pid, signal.SIGKILL)  # a worker process dies mid-round
                    killed.append(pid)
                    return
                time.sleep(0.05)

        killer = threading.Thread(target=kill_one_after_first_trajectory, daemon=True)
        killer.start()
        _run(
            tmp_path,
            llm,
            prefect_api,
            SYNTH_RUN__TASK_RUNNER="dask",
            SYNTH_RUN__TASK_RUNNER_ADDRESS=cluster.scheduler_address,
        )
        killer.join(timeout=10)
        alive = {n.process.pid for n in cluster.workers.values() if n.process is not None}
    assert killed and killed[0] not in alive  # the worker really died (the nanny restarted it)
    assert _ids(store) == _ids(threads)  # and every unit landed once, none lost
    assert store.counts() == threads.counts()
