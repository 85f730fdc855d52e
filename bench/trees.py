"""Rollout trees against independent sampling: same tasks, same model, same budget.

    python bench/trees.py [--tasks 20] [--samples 4] [--seed 0] [--out bench/out/trees]
                          [--policy TUNED.gguf --distractors 4]

Builds the same planned tasks twice with the embedded SmolLM2 model (the same config and
seeds; only ``rollout_mode`` differs, so the planner's blueprints are identical), once as
rollout trees with ``samples`` leaves per task and once as ``samples`` independent linear
rollouts per task, each rollout under the same per-rollout budgets. Prints per mode:

* distinct verified trajectories per 1,000 generated tokens: passed trajectories, counted
  once per distinct action sequence (canonical tool calls and arguments) within a task;
* distinct successful strategies per task (the quotient graph's success signatures, §8);
* pass@k (k = samples): the share of tasks with at least one passed trajectory;
* generated tokens (assistant and simulated user completions, wasted replies included),
  trajectories, and wall time.

Target: tree >= 1.5x linear on distinct verified trajectories per generated token,
with no fewer distinct strategies. The planner's LLM calls are shared through the response
cache, so both modes see exactly the same tasks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from trajsynth.cli.settings import Settings
from trajsynth.flows.build import build_dataset, run_id_for
from trajsynth.flows.runners import task_runner_for
from trajsynth.schemas import PolicyRef, RolloutMode
from trajsynth.store import Store


def policy_ref(path: str | None) -> PolicyRef | None:
    """A tuned policy (a .gguf or the model folder `synth sft` writes) for the assistant."""
    if not path:
        return None
    from trajsynth.training.serve import policy_gguf

    return PolicyRef(path=str(Path(path).resolve()), gguf=str(policy_gguf(path).resolve()))


def _config(args: argparse.Namespace, mode: RolloutMode):
    return Settings().run_config(
        tasks=args.tasks,
        samples=args.samples,
        seed=args.seed,
        rollout_mode=mode,
        budgets={"max_turns": args.max_turns},
        policy=policy_ref(args.policy),
        llm={"distractors": args.distractors},
    )


def measure(store: Store, run_id: str, samples: int) -> dict[str, Any]:
    q = store.query
    generated = q(
        "SELECT coalesce(sum(completion_tokens), 0) AS n FROM llm_calls "
        "WHERE run_id = ? AND role IN ('assistant', 'user')",
        [run_id],
    )[0]["n"]
    rows = q(
        "SELECT t.blueprint_id, t.calls, v.passed, v.excluded FROM trajectories t "
        "JOIN verdicts v USING (trajectory_id) WHERE t.run_id = ?",
        [run_id],
    )
    tasks = {
        r["blueprint_id"]
        for r in q("SELECT blueprint_id FROM blueprints WHERE run_id = ?", [run_id])
    }
    distinct: set[tuple[str, str]] = set()
    solved: set[str] = set()
    for r in rows:
        if r["passed"] and not r["excluded"]:
            actions = json.dumps([(c["tool"], c["raw_arguments"]) for c in r["calls"] or []])
            distinct.add((r["blueprint_id"], actions))
            solved.add(r["blueprint_id"])
    strategies = q(
        "SELECT coalesce(avg(n_success_strategies), 0) AS s FROM task_topology WHERE run_id = ?",
        [run_id],
    )
    wall = q("SELECT coalesce(sum(wall_s), 0) AS s FROM trees WHERE run_id = ?", [run_id])[0]["s"]
    return {
        "tasks": len(tasks),
        "trajectories": len(rows),
        "passed": sum(1 for r in rows if r["passed"] and not r["excluded"]),
        "distinct_verified": len(distinct),
        "generated_tokens": int(generated),
        "distinct_verified_per_1k_tokens": 1000 * len(distinct) / generated if generated else 0.0,
        "strategies_per_task": float(strategies[0]["s"]) if strategies else 0.0,
        f"pass@{samples}": len(solved) / len(tasks) if tasks else 0.0,
        "rollout_seconds": float(wall),
    }


async def run_mode(mode: RolloutMode, args: argparse.Namespace) -> dict[str, Any]:
    settings = Settings()
    config = _config(args, mode)
    store_path = Path(args.out) / f"{mode.value}.duckdb"
    store_path.unlink(missing_ok=True)  # a fresh build, not a resume of the last one
    runner = task_runner_for("thread", workers=args.concurrency)
    started = time.perf_counter()
    await build_dataset.with_options(task_runner=runner)(
        config,
        store_path=str(store_path),
        cache_dir=str(Path(args.out) / "llm-cache"),
        api_key=settings.llm.api_key,
    )
    figures = measure(Store(store_path), run_id_for(config), args.samples)
    figures["wall_s"] = time.perf_counter() - started
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--out", default="bench/out/trees")
    parser.add_argument(
        "--policy", default=None, help="a tuned policy (.gguf or model folder) as the assistant"
    )
    parser.add_argument(
        "--distractors",
        type=int,
        default=None,
        help="[run.llm] distractors: the tool view the policy was trained with",
    )
    args = parser.parse_args()
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    results = {}
    for mode in (RolloutMode.LINEAR, RolloutMode.TREE):
        results[mode.value] = asyncio.run(run_mode(mode, args))
    who = f", assistant {args.policy}" if args.policy else ""
    table = Table(
        title=f"trees vs linear: {args.tasks} tasks, k={args.samples}, seed {args.seed}{who}"
    )
    table.add_column("figure")
    table.add_column("linear", justify="right")
    table.add_column("tree", justify="right")
    for key in results["tree"]:
        lin, tre = results["linear"][key], results["tree"][key]
        fmt = (lambda v: f"{v:.3f}") if isinstance(tre, float) else str
        table.add_row(key, fmt(lin), fmt(tre))
    ratio = (
        results["tree"]["distinct_verified_per_1k_tokens"]
        / results["linear"]["distinct_verified_per_1k_tokens"]
        if results["linear"]["distinct_verified_per_1k_tokens"]
        else float("inf")
    )
    Console().print(table)
    print(f"tree / linear, distinct verified per generated token: {ratio:.2f}x (target >= 1.5)")
    print(json.dumps({"args": vars(args), "results": results, "ratio": ratio}, indent=2))
    (Path(args.out) / "trees.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
