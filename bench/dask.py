"""Dask speed-up for one round of rollouts with the fake LLM server.

    python bench/dask.py [--tasks 20] [--samples 2] [--delay 0.05] [--workers 1,2]
                         [--out bench/out/dask.json]

Each configuration runs ``synth run`` (one round of ``--tasks`` blueprints, the local sandbox,
the fake LLM over HTTP with ``--delay`` seconds per request, no LLM cache) into a fresh store:
the thread runner with one and with two threads, then a Dask cluster of 1 and of 2 worker
processes (started before the run, so the figure is the round, not the cluster start-up; the
workers are cold: their first unit imports trajsynth). Reported per configuration: the run's
wall time from its stored summary, the rollout units and trajectories (identical across
configurations: the same seeds), and the speed-up over one Dask worker.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# this file is named dask.py: keep its folder off the path, or `import dask` would find it
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent / "tests"))

from distributed import LocalCluster  # noqa: E402
from fakes.llm_server import FakeLLMServer  # noqa: E402

from trajsynth.store import Store  # noqa: E402


def _run(base_url: str, args: argparse.Namespace, concurrency: int, **env: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as cwd:
        full_env = {
            **os.environ,
            "SYNTH_SANDBOX__KIND": "local",
            "SYNTH_LLM__CACHE": "false",
            "PREFECT_HOME": str(Path(cwd) / "prefect"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
            **env,
        }
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "trajsynth.cli", "-q", "run",
             "--base-url", base_url, "--model", "fake", "--tasks", str(args.tasks),
             "--samples", str(args.samples), "--seed", str(args.seed), "--rounds", "1",
             "--concurrency", str(concurrency)],
            cwd=cwd, env=full_env, capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
        process_s = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
        store = Store(Path(cwd) / "data" / "synth.duckdb")
        run = store.query("SELECT summary FROM runs")[0]["summary"]
        units = store.query("SELECT count(*) AS n FROM work_units WHERE kind = 'rollout'")
        return {
            "wall_s": round(float(run["wall_s"]), 2),
            "process_s": round(process_s, 2),
            "rollout_units": int(units[0]["n"]),
            "trajectories": int(run["trajectories"]),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds per LLM request")
    parser.add_argument("--workers", default="1,2", help="Dask cluster sizes")
    parser.add_argument("--threads", default="1,2", help="thread-pool sizes ('' for none)")
    parser.add_argument("--out", type=Path, default=Path("bench/out/dask.json"))
    args = parser.parse_args()
    results: dict[str, Any] = {
        "tasks": args.tasks,
        "samples": args.samples,
        "llm_delay_s": args.delay,
        "cpus": os.cpu_count(),
    }
    with FakeLLMServer(delay_s=args.delay) as llm:
        for n in (int(t) for t in args.threads.split(",") if t):
            results[f"thread_{n}"] = _run(llm.base_url, args, n)
        for n in (int(w) for w in args.workers.split(",") if w):
            with LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster:
                results[f"dask_{n}"] = _run(
                    llm.base_url,
                    args,
                    n,
                    SYNTH_RUN__TASK_RUNNER="dask",
                    SYNTH_RUN__TASK_RUNNER_ADDRESS=cluster.scheduler_address,
                )
    base = results.get("dask_1", {}).get("wall_s")
    for key, value in results.items():
        if key.startswith(("dask_", "thread_")) and base:
            value["speedup_vs_dask_1"] = round(base / value["wall_s"], 2)
    text = json.dumps(results, indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
