"""Sandbox speed: container start, exec round trip, snapshot and restore of a 1 MB work dir,
and a pooled episode (reused sandbox, reset on release) against a new sandbox per episode.

    python bench/sandbox.py [--runs 50] [--commit-runs 10] [--json bench/out/sandbox.json]

Prints the median and p90 of each operation against its target (start <= 500 ms, exec <= 30 ms,
snapshot + restore <= 100 ms). It also measures the two alternatives the design rejected, so the
choice stays checked: ``docker exec`` per command (instead of the resident agent) and
``docker commit`` + a new container (instead of a tar of the work directory). LocalSandbox is
measured too, with bubblewrap and without.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from trajsynth.sandboxes import (
    DockerSandbox,
    LocalSandbox,
    bwrap_usable,
    docker_client,
    docker_unusable,
    ensure_image,
)
from trajsynth.sandboxes.pool import SandboxPool
from trajsynth.schemas import SandboxKind, SandboxLimits

TARGETS_MS = {"start": 500.0, "exec": 30.0, "snapshot+restore": 100.0}
LIMITS = SandboxLimits(memory_mb=512, pids=128, timeout_s=30)


def work_files() -> dict[str, bytes]:
    """1 MiB: one 512 KiB file (a database) and 64 files of 8 KiB."""
    rnd = os.urandom
    files = {"state.sqlite": rnd(512 * 1024)}
    files.update({f"src/mod_{i:02d}.py": rnd(8 * 1024) for i in range(64)})
    return files


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def summary(samples: list[float]) -> tuple[float, float]:
    p90 = statistics.quantiles(samples, n=10)[8] if len(samples) > 1 else samples[0]
    return statistics.median(samples), p90


def bench_docker(runs: int, image: str) -> dict[str, list[float]]:
    res: dict[str, list[float]] = {"start": [], "start+first exec": [], "close": []}
    for _ in range(runs):
        sb = DockerSandbox(LIMITS, image=image)
        t0 = time.perf_counter()
        sb.start()
        t1 = time.perf_counter()
        sb.exec(["true"])
        t2 = time.perf_counter()
        sb.close()
        t3 = time.perf_counter()
        res["start"].append((t1 - t0) * 1000)
        res["start+first exec"].append((t2 - t0) * 1000)
        res["close"].append((t3 - t2) * 1000)
    with DockerSandbox(LIMITS, image=image) as sb:
        sb.exec(["true"])
        res["exec"] = timed(lambda: sb.exec(["true"]), runs)
        res["exec python3 -c pass"] = timed(lambda: sb.exec(["python3", "-c", "pass"]), runs)
        for name, data in work_files().items():
            sb.put_file(name, data)
        handle = sb.snapshot()
        res["snapshot"] = timed(sb.snapshot, runs)
        res["restore"] = timed(lambda: sb.restore(handle), runs)
        res["snapshot+restore"] = [
            a + b for a, b in zip(res["snapshot"], res["restore"], strict=True)
        ]
        api = docker_client().api
        cid = sb.container_id

        def docker_exec() -> None:
            exec_id = api.exec_create(cid, ["true"])["Id"]
            api.exec_start(exec_id)
            api.exec_inspect(exec_id)

        res["alt: docker exec per command"] = timed(docker_exec, runs)
    res.update(bench_pool(runs, SandboxKind.DOCKER, image))
    return res


def bench_pool(runs: int, kind: SandboxKind, image: str | None = None) -> dict[str, list[float]]:
    """A pooled episode's sandbox: acquire (reused) and release (reset to clean), against
    the start + close of a new sandbox per episode."""
    pool = SandboxPool(kind, LIMITS, image, max_idle=1)
    try:
        pool.release(pool.acquire())
        acquire, release = [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            sb = pool.acquire()
            t1 = time.perf_counter()
            for name, data in work_files().items():
                sb.put_file(name, data)  # an episode's writes, undone by the release
            t2 = time.perf_counter()
            pool.release(sb)
            t3 = time.perf_counter()
            acquire.append((t1 - t0) * 1000)
            release.append((t3 - t2) * 1000)
        assert pool.stats.opened == 1, pool.stats
    finally:
        pool.close()
    return {
        "pool: acquire (reused)": acquire,
        "pool: release (reset)": release,
        "pool: per episode": [a + b for a, b in zip(acquire, release, strict=True)],
    }


def bench_commit(runs: int, image: str) -> dict[str, list[float]]:
    """The rejected way: work dir in the container's layer, ``docker commit``, new container."""
    client = docker_client()
    container = client.containers.run(
        image, ["sleep", "infinity"], detach=True, network_mode="none", user="0:0"
    )
    commits, restores = [], []
    try:
        fill = (
            "mkdir -p /work/src && head -c 524288 /dev/urandom > /work/state.sqlite && "
            "for i in $(seq 64); do head -c 8192 /dev/urandom > /work/src/mod_$i.py; done"
        )
        container.exec_run(["sh", "-c", fill])
        for i in range(runs):
            t = time.perf_counter()
            snap = container.commit(repository="trajsynth-bench-commit", tag=str(i))
            commits.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            restored = client.containers.run(
                snap.id, ["sleep", "infinity"], detach=True, network_mode="none", user="0:0"
            )
            restores.append((time.perf_counter() - t) * 1000)
            restored.remove(force=True)
            client.images.remove(snap.id, force=True)
    finally:
        container.remove(force=True)
    return {
        "alt: docker commit": commits,
        "alt: restore = new container": restores,
        "alt: commit+restore": [a + b for a, b in zip(commits, restores, strict=True)],
    }


def bench_local(runs: int, use_bwrap: bool) -> dict[str, list[float]]:
    # the plain path isolates nothing: it runs only with the unsafe opt-in
    limits = LIMITS.model_copy(update={"allow_unsafe_local_sandbox": not use_bwrap})
    with LocalSandbox(limits, use_bwrap=use_bwrap) as sb:
        sb.exec(["true"])
        res = {"exec": timed(lambda: sb.exec(["true"]), runs)}
        for name, data in work_files().items():
            sb.put_file(name, data)
        handle = sb.snapshot()
        res["snapshot"] = timed(sb.snapshot, runs)
        res["restore"] = timed(lambda: sb.restore(handle), runs)
        res["snapshot+restore"] = [
            a + b for a, b in zip(res["snapshot"], res["restore"], strict=True)
        ]
    if use_bwrap:
        res.update(bench_pool(runs, SandboxKind.LOCAL))
    return res


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--commit-runs", type=int, default=10, help="docker commit is slow")
    parser.add_argument("--json", type=Path, default=None, help="also write the samples here")
    args = parser.parse_args()
    console = Console()
    results: dict[str, dict[str, list[float]]] = {}
    reason = docker_unusable()
    if reason is not None and "not built" in reason:
        console.log("building the sandbox image first")
        ensure_image(progress=console.log)
        reason = docker_unusable()
    if reason is None:
        image = ensure_image()
        console.log(f"DockerSandbox ({image}), {args.runs} runs")
        results["docker"] = bench_docker(args.runs, image)
        console.log(f"docker commit alternative, {args.commit_runs} runs")
        results["docker"].update(bench_commit(args.commit_runs, image))
    else:
        console.log(f"[yellow]DockerSandbox skipped: {reason}[/]")
    if bwrap_usable():
        results["local bwrap"] = bench_local(args.runs, use_bwrap=True)
    results["local plain"] = bench_local(args.runs, use_bwrap=False)

    table = Table(title="sandbox benchmark (ms)")
    for col in ("sandbox", "operation", "runs", "median", "p90", "target", ""):
        table.add_column(
            col, justify="right" if col in ("runs", "median", "p90", "target") else "left"
        )
    for kind, ops in results.items():
        for op, samples in ops.items():
            med, p90 = summary(samples)
            target = TARGETS_MS.get(op) if kind == "docker" else None
            verdict = (
                "" if target is None else ("[green]ok[/]" if med <= target else "[red]over[/]")
            )
            table.add_row(
                kind, op, str(len(samples)), f"{med:.1f}", f"{p90:.1f}",
                "" if target is None else f"<= {target:.0f}", verdict,
            )  # fmt: skip
    console.print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
