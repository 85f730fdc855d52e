"""Prefect's overhead per task (ms) against calling the library function directly.

    python bench/prefect_overhead.py [--trivial 200] [--rollouts 20] [--out bench/out/...json]

Two bodies, each timed three ways inside one ephemeral-mode flow run (the way ``synth run``
runs): the plain function, the same function as a Prefect task called in the flow, and as a
task submitted to the flow's thread-pool runner and awaited.

* trivial: a function that adds two numbers (the overhead alone);
* rollout: one rollout unit, ``flows.units.grow_unit`` (a tree of ``--leaves`` leaves of a
  planned shop blueprint, the local sandbox, verification), against the fake LLM server over
  HTTP (``tests/fakes/llm_server.py``); as a task it is ``flows.stages.rollout_task`` exactly
  as the flow runs it (retries, the input cache policy) with ``refresh_cache=True``, so each
  call computes and persists its result instead of hitting the cache.

Prints (and writes) a JSON object: per body and way, the median and mean ms per call and
the overhead over the direct call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fakes.llm_server import FakeLLMServer  # noqa: E402
from fakes.shop import SHOP, plan_shop_task  # noqa: E402
from prefect import flow, task  # noqa: E402
from prefect.cache_policies import NONE as NO_CACHE  # noqa: E402

from trajsynth.flows.stages import rollout_task  # noqa: E402
from trajsynth.flows.units import grow_unit  # noqa: E402
from trajsynth.schemas import (  # noqa: E402
    LLMConfig,
    RunConfig,
    SandboxKind,
)


def add(a: int, b: int) -> int:
    return a + b


add_task = task(name="add", cache_policy=NO_CACHE, persist_result=False)(add)


def _stats(samples: list[float], direct: float | None = None) -> dict[str, float]:
    ms = [s * 1000 for s in samples]
    out = {"median_ms": statistics.median(ms), "mean_ms": statistics.fmean(ms), "n": len(ms)}
    if direct is not None:
        out["overhead_ms"] = out["median_ms"] - direct
    return out


@flow(name="bench-overhead", validate_parameters=False)
async def measure(
    n_trivial: int, n_rollouts: int, leaves: int, base_url: str, workdir: str
) -> dict:
    out: dict[str, Any] = {}
    timings: dict[str, list[float]] = {"direct": [], "task": [], "submit": []}
    for i in range(n_trivial):
        t = time.perf_counter()
        add(i, 1)
        timings["direct"].append(time.perf_counter() - t)
        t = time.perf_counter()
        add_task(i, 1)
        timings["task"].append(time.perf_counter() - t)
        t = time.perf_counter()
        add_task.submit(i, 1).result()
        timings["submit"].append(time.perf_counter() - t)
    direct = _stats(timings["direct"])["median_ms"]
    out["trivial"] = {k: _stats(v, None if k == "direct" else direct) for k, v in timings.items()}

    bp = await plan_shop_task(Path(workdir))
    llm = LLMConfig(base_url=base_url, model="fake", max_retries=0)
    config = RunConfig(
        tasks=1, samples=leaves, clusters=["shop"], llm=llm, sandbox=SandboxKind.LOCAL
    )
    unit = {"config": config, "llm": llm, "run_id": "bench", "blueprint": bp, "cluster": SHOP}
    as_task = rollout_task.with_options(refresh_cache=True)
    timings = {"direct": [], "task": [], "submit": []}
    for _ in range(n_rollouts):
        t = time.perf_counter()
        await grow_unit(**unit)
        timings["direct"].append(time.perf_counter() - t)
        t = time.perf_counter()
        await as_task(**unit)
        timings["task"].append(time.perf_counter() - t)
        t = time.perf_counter()
        as_task.submit(**unit).result()
        timings["submit"].append(time.perf_counter() - t)
    direct = _stats(timings["direct"])["median_ms"]
    out["rollout"] = {k: _stats(v, None if k == "direct" else direct) for k, v in timings.items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trivial", type=int, default=200)
    parser.add_argument("--rollouts", type=int, default=20)
    parser.add_argument("--leaves", type=int, default=2, help="leaves per rollout tree")
    parser.add_argument("--out", type=Path, default=Path("bench/out/prefect_overhead.json"))
    args = parser.parse_args()
    with FakeLLMServer() as server, tempfile.TemporaryDirectory() as workdir:
        result = asyncio.run(
            measure(args.trivial, args.rollouts, args.leaves, server.base_url, workdir)
        )
    result["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    text = json.dumps(result, indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
