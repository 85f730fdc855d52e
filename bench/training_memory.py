"""Peak resident memory of the training smokes, and the time
of one SFT epoch on this CPU.

    python bench/training_memory.py [grpo] [sft] [--out DIR] [--interval 0.05]
    python bench/training_memory.py epoch [--trajectories 200] [--rows 4] [--distractors 4]

Runs ``synth train --smoke`` (target 3 GB) and ``synth sft --smoke`` (target 4 GB) one after
the other, each as a child process, and samples the resident memory of its whole process tree
(the CLI plus every sandbox, MCP server or helper it starts) from ``/proc`` every
``interval`` seconds. The figure held against the target is the peak of the tree's summed PSS
(proportional set size: a page shared by n processes counts 1/n in each, so the sum is the
memory the tree holds, a forked child's copy-on-write pages counted once). The summed RSS
beside it counts shared pages once per process: an upper bound. The kernel's own peak for the
main process (``ru_maxrss`` of the waited child) is printed too, a cross-check the sampler
cannot miss between samples.

``epoch`` times one optimizer step of ``synth sft`` at the CPU config
(``data/train/sft-cpu.toml``: LoRA r 16, one row per pass, 4 accumulated, checkpointing, bf16
autocast where the CPU has it) on ``rows`` gold demonstrations (shop and calendar, every tool
schema in each row, as exported rows have), and scales the training loop's seconds per row
to ``trajectories`` rows (target: 200 in <= 20 min). ``--distractors N`` makes the rows as a
run with ``[run.llm] distractors = N`` does (the needed tools plus the N nearest). Model load and
saving are left out: they are paid once per run, not per row. Wall time depends on the load,
printed beside it.

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
from typing import Any

import psutil

# ``python -m trajsynth.cli`` with this interpreter: the same CLI as ``synth``, and the
# interpreter the sandboxes mount read-only (its prefix) is the one running the bench.
SYNTH = [sys.executable, "-m", "trajsynth.cli"]
TARGET_MB = {"grpo": 3 * 1024, "sft": 4 * 1024}
TARGET_EPOCH_S = 20 * 60  # 200 trajectories
SFT_CPU = Path(__file__).resolve().parents[1] / "src/trajsynth/data/train/sft-cpu.toml"


@dataclass
class Peak:
    tree_mb: float = 0.0
    tree_rss_mb: float = 0.0
    main_mb: float = 0.0
    processes: int = 0
    seconds: float = 0.0


def _pss_bytes(pid: int) -> int:
    """The process's PSS from ``smaps_rollup`` (one summed line, cheap to read)."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def _tree_mb(root: psutil.Process) -> tuple[float, float, int]:
    """Summed PSS and summed RSS of ``root`` and its descendants (MB), and their number."""
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0, 0.0, 0
    pss = rss = 0
    for p in procs:
        # a process that exited between listing and reading has freed its memory already
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, OSError):
            rss += p.memory_info().rss
            pss += _pss_bytes(p.pid)
    return pss / 2**20, rss / 2**20, len(procs)


def measure(
    argv: list[str], *, cwd: Path, interval: float, trace: Path | None = None
) -> tuple[Peak, int]:
    """Run ``argv``; the peak RSS of its process tree and its exit status. ``trace`` gets a
    line per second (clock time, tree MB, processes) and the command's output, to see which
    phase the peak falls in."""
    peak = Peak()
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    root = psutil.Process(proc.pid)
    done = threading.Event()

    lines: list[str] = []

    def sample() -> None:
        last = 0.0
        while not done.is_set():
            mb, rss_mb, n = _tree_mb(root)
            if mb > peak.tree_mb:
                peak.tree_mb, peak.processes = mb, n
            peak.tree_rss_mb = max(peak.tree_rss_mb, rss_mb)
            if time.time() - last >= 1.0:
                last = time.time()
                stamp = time.strftime("%H:%M:%S")
                lines.append(f"{stamp} {mb:8.0f} MB PSS {rss_mb:8.0f} MB RSS {n:3d} processes")
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
    if trace is not None:
        trace.write_text("\n".join(lines) + "\n\n" + out.decode(errors="replace"))
    if proc.returncode:
        sys.stderr.write(out.decode(errors="replace")[-4000:])
    return peak, proc.returncode


def sft_epoch(trajectories: int, rows: int, out: Path, distractors: int | None = None) -> float:
    """Seconds of one SFT epoch over ``trajectories`` rows, from ``rows`` rows' training loop;
    ``distractors``: rows list the needed tools plus that many nearest, not every schema."""
    import trl

    from trajsynth.cli.commands.sft import gold_export
    from trajsynth.training.sft import load_sft_config, sft

    per_cluster = max(2, -(-rows // 2))
    data, _ = gold_export(
        out / f"gold-{distractors}",
        clusters=["shop", "calendar"],
        per_cluster=per_cluster,
        distractors=distractors,
    )
    cfg = load_sft_config(SFT_CPU, data=str(data), output_dir=str(out / "sft-epoch"))
    steps = max(rows // cfg.gradient_accumulation_steps, 1)
    cfg = cfg.model_copy(update={"max_steps": steps, "max_rows": rows})
    loop_s: list[float] = []
    train = trl.SFTTrainer.train

    # the training loop alone (sft() also loads, merges and saves the model, once per run)
    def timed_train(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return train(self, *args, **kwargs)
        finally:
            loop_s.append(time.perf_counter() - start)

    trl.SFTTrainer.train = timed_train  # type: ignore[method-assign]
    try:
        result = sft(cfg)
    finally:
        trl.SFTTrainer.train = train  # type: ignore[method-assign]
    trained = min(result.n_rows, steps * cfg.gradient_accumulation_steps)
    per_row = loop_s[0] / trained
    shown = "every tool" if distractors is None else f"needed tools + {distractors}"
    print(
        f"sft epoch ({shown}): {loop_s[0]:.0f} s for {trained} rows ({result.n_tokens} tokens, "
        f"{per_row:.1f} s per row) -> {trajectories} trajectories ~ "
        f"{per_row * trajectories / 60:.1f} min (target <= {TARGET_EPOCH_S / 60:.0f} min "
        f"for 200); load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    return per_row * trajectories


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "which", nargs="*", default=["grpo", "sft"], choices=["grpo", "sft", "epoch"]
    )
    parser.add_argument(
        "--advantage", default="gigpo", help="grpo: the estimator (gigpo runs the step-level path)"
    )
    parser.add_argument("--trajectories", type=int, default=200, help="epoch: rows to scale to")
    parser.add_argument("--rows", type=int, default=4, help="epoch: rows actually trained")
    parser.add_argument(
        "--distractors",
        type=int,
        default=None,
        help="epoch: rows list the needed tools plus N nearest ([run.llm] distractors)",
    )
    parser.add_argument("--out", type=Path, default=None, help="run folder (default: a temp)")
    parser.add_argument("--interval", type=float, default=0.05)
    args = parser.parse_args()
    commands = {
        "grpo": ["train", "--smoke", "--advantage", args.advantage],
        "sft": ["sft", "--smoke"],  # the f16 GGUF export included, as the command runs
    }
    failed = 0
    with tempfile.TemporaryDirectory(prefix="bench-train-mem-") as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        for which in args.which:
            if which == "epoch":
                seconds = sft_epoch(args.trajectories, args.rows, out, args.distractors)
                failed += seconds * 200 / args.trajectories > TARGET_EPOCH_S  # the target's rate
                continue
            argv = [*SYNTH, *commands[which], "--output-dir", str(out / which)]
            trace = out / f"{which}-trace.txt"
            peak, rc = measure(argv, cwd=out, interval=args.interval, trace=trace)
            load = os.getloadavg()[0]
            target = TARGET_MB[which]
            verdict = "ok" if rc == 0 and peak.tree_mb <= target else "OVER" if rc == 0 else "FAIL"
            print(
                f"{which:5s} smoke: peak tree PSS {peak.tree_mb / 1024:.2f} GB "
                f"(target <= {target / 1024:.0f} GB) {verdict}; tree RSS (shared pages once "
                f"per process) {peak.tree_rss_mb / 1024:.2f} GB; main process max RSS "
                f"{peak.main_mb / 1024:.2f} GB; {peak.processes} processes at peak; "
                f"{peak.seconds:.0f} s; exit {rc}; load {load:.2f}",
                flush=True,
            )
            failed += verdict != "ok"
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
