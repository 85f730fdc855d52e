"""Wall time of the fast test tier (target: at most 60 s on 2 cores).

    python bench/fast_tier.py [--runs 2] [--slowest 10]

Runs the fast tier exactly as ``make test-fast`` does (two xdist workers, work stealing, the
same marker expression), ``runs`` times, each as a child process, and prints per run its wall
time beside the target, the CPU seconds of the tree (user + system of pytest and every worker
and child it waited for), the number of tests and the 1-minute load average before and after.
Then the slowest tests of the last run (setup + call + teardown), the candidates for a
faster fixture or for the slow tier: a fast test does its work in-process, starts no
trajsynth interpreter and loads no ML stack (the ``slow`` marker's text in pyproject.toml).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 60.0


def fast_tier_marker() -> str:
    """The marker expression of the Makefile's fast tier (one source of truth)."""
    text = (ROOT / "Makefile").read_text()
    match = re.search(r"^FAST_TIER := (.+)$", text, re.M)
    if match is None:
        raise SystemExit("Makefile has no FAST_TIER line")
    return match.group(1).strip()


def parallel_args() -> list[str]:
    text = (ROOT / "Makefile").read_text()
    match = re.search(r"^PARALLEL := (.+)$", text, re.M)
    return match.group(1).split() if match else []


def run_once(junit: Path) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            *parallel_args(),
            "-m",
            fast_tier_marker(),
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={junit}",
        ],  # fmt: skip
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n", file=sys.stderr)
        raise SystemExit(f"the fast tier failed (exit {proc.returncode}): {summary}")
    return wall, cpu, summary


def slowest(junit: Path, n: int) -> list[tuple[float, str]]:
    per_test: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit).iter("testcase"):
        per_test[f"{case.get('classname')}::{case.get('name')}"] += float(case.get("time", 0))
    return sorted(((t, name) for name, t in per_test.items()), reverse=True)[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--slowest", type=int, default=10)
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    # bytecode first, as `make test-fast` compiles it: a cold cache is not the tier's time
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", "src"], cwd=ROOT,
                   check=True, capture_output=True)  # fmt: skip
    print(f"fast tier: -m '{fast_tier_marker()}' {' '.join(parallel_args())}, "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "fast.xml"
        for i in range(1, args.runs + 1):
            load_before = os.getloadavg()[0]
            wall, cpu, summary = run_once(junit)
            verdict = "met" if wall <= TARGET_S else "NOT met"
            print(
                f"run {i}: wall {wall:6.1f} s   target <= {TARGET_S:.0f} s ({verdict})   "
                f"CPU {cpu:6.1f} s   {summary}   load {load_before:.2f} -> "
                f"{os.getloadavg()[0]:.2f}"
            )
        print(f"slowest {args.slowest} tests of the last run (setup + call + teardown):")
        for seconds, name in slowest(junit, args.slowest):
            print(f"  {seconds:5.2f} s  {name}")


if __name__ == "__main__":
    main()
