"""Peak resident memory of the training smokes (issues 18 item 6, 19 item 6).

    python bench/training_memory.py [grpo] [sft] [--out DIR] [--interval 0.05]

Runs ``synth train --smoke`` (target 3 GB) and ``synth sft --smoke`` (target 4 GB) one after
the other, each as a child process, and samples the resident memory of its whole process tree
(the CLI plus every sandbox, MCP server or helper it starts) from ``/proc`` every
``interval`` seconds. The figure is the peak of the tree's summed RSS: pages shared between
processes count once per process, so it is an upper bound, never an under-estimate. The
kernel's own peak for the main process (``ru_maxrss`` of the waited child) is printed beside
it as a cross-check the sampler cannot miss between samples.

Each line gives the figure, its target and the 1-minute load average (the machine is shared,
and load changes wall time, not memory).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

# ``python -m trajsynth.cli`` with this interpreter: the same CLI as ``synth``, and the
# interpreter the sandboxes mount read-only (its prefix) is the one running the bench.
SYNTH = [sys.executable, "-m", "trajsynth.cli"]
TARGET_MB = {"grpo": 3 * 1024, "sft": 4 * 1024}


@dataclass
class Peak:
    tree_mb: float = 0.0
    main_mb: float = 0.0
    processes: int = 0
    seconds: float = 0.0


def _tree_rss_mb(root: psutil.Process) -> tuple[float, int]:
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0, 0
    total = 0
    for p in procs:
        # a process that exited between listing and reading has freed its memory already
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += p.memory_info().rss
    return total / 2**20, len(procs)


def measure(argv: list[str], *, cwd: Path, interval: float) -> tuple[Peak, int]:
    """Run ``argv``; the peak RSS of its process tree and its exit status."""
    peak = Peak()
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    root = psutil.Process(proc.pid)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            mb, n = _tree_rss_mb(root)
            if mb > peak.tree_mb:
                peak.tree_mb, peak.processes = mb, n
            done.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    done.set()
    sampler.join()
    peak.seconds = time.perf_counter() - start
    # ru_maxrss of the children is the max over every waited descendant, in KiB on Linux;
    # it only grows, so a value equal to the one before says this run did not exceed it.
    peak.main_mb = max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, before) / 1024
    if proc.returncode:
        sys.stderr.write(out.decode(errors="replace")[-4000:])
    return peak, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("which", nargs="*", default=["grpo", "sft"], choices=["grpo", "sft"])
    parser.add_argument("--out", type=Path, default=None, help="run folder (default: a temp)")
    parser.add_argument("--interval", type=float, default=0.05)
    args = parser.parse_args()
    commands = {
        "grpo": ["train", "--smoke"],
        "sft": ["sft", "--smoke", "--no-gguf"],
    }
    failed = 0
    with tempfile.TemporaryDirectory(prefix="bench-train-mem-") as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        for which in args.which:
            argv = [*SYNTH, *commands[which], "--output-dir", str(out / which)]
            peak, rc = measure(argv, cwd=out, interval=args.interval)
            load = os.getloadavg()[0]
            target = TARGET_MB[which]
            verdict = "ok" if rc == 0 and peak.tree_mb <= target else "OVER" if rc == 0 else "FAIL"
            print(
                f"{which:5s} smoke: peak tree RSS {peak.tree_mb / 1024:.2f} GB "
                f"(target <= {target / 1024:.0f} GB) {verdict}; main process max RSS "
                f"{peak.main_mb / 1024:.2f} GB; {peak.processes} processes at peak; "
                f"{peak.seconds:.0f} s; exit {rc}; load {load:.2f}",
                flush=True,
            )
            failed += verdict != "ok"
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
