"""A `synth run` with its own Prefect API against one that names a shared API, back to back.

    python bench/prefect_api_shared.py [--pairs 2] [--tasks 2]

What the tests' session fixture ``prefect_api`` (tests/conftest.py) saves each `synth` process
that uses it: the same fake-LLM run (``tests/fakes/llm_server.py``, the local sandbox, the
shop cluster, linear rollouts) in a fresh directory, alternately with Prefect's API started by
the command (the default) and with ``PREFECT_API_URL`` naming one server
(``python -m trajsynth.flows.ephemeral_api``) started once beforehand. Prints per run the wall
time and the CPU seconds of the process and everything it waited for, and the load (`uptime`)
before and after: on a shared machine the pairs, not the absolute times, are the figure.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fakes.llm_server import FakeLLMServer  # noqa: E402


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(cwd: Path, base_url: str, tasks: int, env: dict[str, str]) -> tuple[float, float]:
    cwd.mkdir(parents=True)
    began, cpu = time.monotonic(), _cpu_children()
    proc = subprocess.run(
        [sys.executable, "-m", "trajsynth.cli", "-q", "run", "--base-url", base_url,
         "--model", "fake", "--tasks", str(tasks), "--samples", "1", "--clusters", "shop",
         "--seed", "3", "--rollout", "linear"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"synth run failed: {proc.stderr[-2000:]}")
    return time.monotonic() - began, _cpu_children() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=2)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="prefect-api-shared-"))
    env = {**os.environ, "SYNTH_SANDBOX__KIND": "local"}
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    with FakeLLMServer(delay_s=0.01) as llm:
        api = subprocess.Popen(
            [sys.executable, "-m", "trajsynth.flows.ephemeral_api"],
            stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        assert api.stdout is not None
        url = api.stdout.readline().strip()
        if not url.startswith("http"):
            raise SystemExit(f"Prefect's settings name an API already ({url}): nothing to compare")
        shared = {**env, "PREFECT_API_URL": url}
        try:
            for i in range(args.pairs):
                wall, cpu = _run(base / f"own{i}", llm.base_url, args.tasks, env)
                print(f"own API     wall {wall:5.1f} s  cpu {cpu:5.1f} s", flush=True)
                wall, cpu = _run(base / f"shared{i}", llm.base_url, args.tasks, shared)
                print(f"shared API  wall {wall:5.1f} s  cpu {cpu:5.1f} s", flush=True)
        finally:
            api.terminate()
            api.wait(timeout=30)
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
