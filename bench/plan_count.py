"""Planning only: tasks asked, planned, attempts and gold-run errors on the bundled clusters.

Plans one round as ``synth run`` does (the same cells, seeds, redraws and budget as
``flows.stages.plan_round``; ``flows.redraw``) without rollouts, Prefect or a store: each
attempt runs ``plan_blueprint`` in a fresh sandboxed environment, with the embedded model
writing the words (``--no-llm``: the template words, no model). Prints tasks asked and
planned, attempts and budget, rejections by reason, gold-run errors as a share of attempts
(a rejected attempt whose reason is ``gold_run_error``) and of the gold runs tried inside
the attempts, and the draws per cluster. ``--paths`` also prints every gold run that failed,
inside accepted attempts too (cluster, route, failing step, the tool's refusal), and counts
them by cluster and tool. ``--no-preconditions`` is the control: the bundled clusters'
stated preconditions (docs/planning.md) left out, the rest of the binder as it is.

Run: ``PYTHONPATH=src python bench/plan_count.py --tasks 20 [--seed 0] [--no-llm]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import re
import time
from collections import Counter
from collections.abc import AsyncIterator

from trajsynth.flows.redraw import next_attempts, plan_budget
from trajsynth.flows.units import plan_seed
from trajsynth.llm.client import LLMClient, open_llm_client
from trajsynth.mcp_servers.registry import list_clusters
from trajsynth.planning import planner as planner_module
from trajsynth.planning.cells import sample_cells
from trajsynth.planning.planner import Planner, environment_factory, plan_blueprint
from trajsynth.schemas import Blueprint, RunConfig


@contextlib.asynccontextmanager
async def _llm(use: bool, config: RunConfig) -> AsyncIterator[LLMClient | None]:
    if not use:
        yield None
        return
    async with open_llm_client(config.llm) as client:
        yield client


class _GoldRuns:
    """Every gold run the planner tries, read by wrapping ``planner._ground_truth`` (the bench
    only watches: the wrapped function's result is returned unchanged)."""

    def __init__(self) -> None:
        self.tried = 0
        self.failed: list[tuple[str, str]] = []  # (cluster, "route: step k (tool): refusal")
        self.by_tool: Counter[tuple[str, str]] = Counter()
        self._inner = planner_module._ground_truth

    async def __call__(self, env, cluster, path, initial):  # type: ignore[no-untyped-def]
        out = await self._inner(env, cluster, path, initial)
        self.tried += 1
        if getattr(out, "reason", None) == "gold_run_error":
            self.failed.append((cluster.cluster_id, out.detail))
            self.by_tool[(cluster.cluster_id, str(out.tool))] += 1
        return out


async def main(
    tasks: int,
    seed: int,
    use_llm: bool,
    redraws: bool,
    verbose: bool = False,
    paths: bool = False,
    preconditions: bool = True,
) -> None:
    runs = _GoldRuns()
    planner_module._ground_truth = runs  # type: ignore[assignment]
    config = RunConfig(tasks=tasks, seed=seed, plan_attempts=None if redraws else tasks)
    clusters = [c for c in list_clusters() if c.source != "outside"]
    if not preconditions:  # the control: the binder without the clusters' stated preconditions
        clusters = [c.model_copy(update={"preconditions": []}) for c in clusters]
    by_id = {c.cluster_id: c for c in clusters}
    cells = sample_cells(clusters, tasks, random.Random(config.seed * 7_919), None)
    seeds = [plan_seed(config, 0, i) for i in range(tasks)]
    done: set[str] = set()
    accepted: set[int] = set()
    outcomes: Counter[str] = Counter()
    draws: Counter[str] = Counter()
    planned_by: Counter[str] = Counter()
    inner: Counter[str] = Counter()
    started = time.perf_counter()
    async with _llm(use_llm, config) as llm:
        while True:
            attempts, filled, spent = next_attempts(
                cells, seeds, clusters=clusters, round_index=0, config_seed=config.seed,
                budget=plan_budget(config), done=done, accepted_seeds=accepted, given_up=set(),
            )  # fmt: skip
            if not attempts:
                break
            for a in attempts:
                cluster = by_id[a.cell.cluster_id]
                factory = environment_factory(cluster, sandbox_kind=config.sandbox, seed=a.seed)
                planner = Planner(retries=config.planner_retries, use_llm=use_llm)
                out = await plan_blueprint(planner, llm, factory, cluster, a.cell, seed=a.seed)
                done.add(a.unit_id)
                draws[a.cell.cluster_id] += 1
                if isinstance(out, Blueprint):
                    accepted.add(a.seed)
                    outcomes["accepted"] += 1
                    planned_by[a.cell.cluster_id] += 1
                    continue
                outcomes[out.reason] += 1
                if verbose:
                    print(
                        f"  rejected {a.unit_id} {a.cell.cluster_id}: [{out.reason}] "
                        f"{out.detail[-400:]}"
                    )
                inner.update(re.findall(r"\[([a-z_]+)\] ", out.detail))
    print(
        f"tasks asked {tasks}, planned {filled} in {spent} attempts (budget {plan_budget(config)})"
    )
    print(f"outcomes: {dict(outcomes)}")
    gold = outcomes["gold_run_error"]
    print(f"gold-run errors: {gold} of {spent} attempts ({gold / max(spent, 1):.1%})")
    print(f"failed paths inside rejected attempts: {dict(inner)}")
    print(
        f"gold runs tried {runs.tried}, failed {len(runs.failed)} "
        f"({len(runs.failed) / max(runs.tried, 1):.1%}); by cluster and tool: "
        f"{dict(runs.by_tool.most_common())}"
    )
    if paths:
        for cluster_id, detail in runs.failed:
            print(f"  gold run failed [{cluster_id}] {' '.join(detail.split())[:300]}")
    print(f"attempts per cluster: {dict(sorted(draws.items()))}")
    print(f"planned per cluster: {dict(sorted(planned_by.items()))}")
    print(
        f"wall {time.perf_counter() - started:.0f} s, words by {'LLM' if use_llm else 'template'}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-llm", action="store_true", help="template words, no model")
    parser.add_argument("--no-redraw", action="store_true", help="one attempt per task")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every rejection")
    parser.add_argument("--paths", action="store_true", help="print every failed gold run")
    parser.add_argument(
        "--no-preconditions", action="store_true", help="control: clusters state no preconditions"
    )
    args = parser.parse_args()
    asyncio.run(
        main(
            args.tasks,
            args.seed,
            not args.no_llm,
            not args.no_redraw,
            args.verbose,
            args.paths,
            not args.no_preconditions,
        )
    )
