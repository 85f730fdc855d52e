"""`synth eval --policy X --split NAME --samples k`: a policy on held-out tasks.

Wiring only: the split's tasks are planned from held-out seeds (``planning.heldout``; the eval
seed draws them) and checked against the policy's training data (``training.splits``) as
its ``models`` row and its ancestors' record it (``flows.lineage``): a task that leaks is
dropped and the drop is said; a policy whose training data cannot be named in full is
refused unless ``--allow-untracked``. The policy is served
on its own llama.cpp server for the assistant role while the user simulator keeps the
embedded model; every try is verified and the summary is stored in ``evals``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from trajsynth.cli.context import current_settings
from trajsynth.cli.options import JsonOpt, print_json
from trajsynth.cli.tables import Table
from trajsynth.flows.lineage import ModelLineage, model_lineage
from trajsynth.schemas import Blueprint, Budgets, InputError, LLMConfig, Record, SandboxKind
from trajsynth.store import Store
from trajsynth.training.splits import TaskKey

__all__ = [
    "PlannedSplit",
    "compare_evals",
    "eval_policy",
    "parse_split",
    "plan_split",
    "run_eval",
    "training_lineage",
]

log = logging.getLogger(__name__)
console = Console()

SPLITS = "heldout-seeds | new-entities | path-disjoint | loco:CLUSTER"
STRATUM_SPLITS = ("heldout-seeds", "new-entities", "path-disjoint")
CANDIDATES_PER_TASK = 3
"""A one-stratum split plans this many candidates per task wanted and keeps the first of
its stratum (about half of a seen cluster's tasks walk a trained path)."""


def parse_split(split: str) -> tuple[str, str | None]:
    """``heldout-seeds``, ``new-entities``, ``path-disjoint`` or ``loco:CLUSTER`` ->
    (kind, cluster)."""
    if split in STRATUM_SPLITS:
        return split, None
    if split.startswith("loco:") and split[5:]:
        return "loco", split[5:]
    raise InputError(f"--split {split!r}: one of {SPLITS}")


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) and value[:1] in "[{" else value


def training_lineage(store: Store, policy: str, *, allow_untracked: bool) -> ModelLineage:
    """The policy's training tasks, its ancestors' included (``flows.lineage``). Raises
    ``InputError`` (one line) when they cannot all be known, unless ``allow_untracked``."""
    lineage = model_lineage(store, policy)
    if lineage.complete:
        return lineage
    if not allow_untracked:
        raise InputError(
            f"cannot check {policy} for leakage: {lineage.why_incomplete}; evaluate it with "
            "the --store that trained it, or pass --allow-untracked to score it unchecked"
        )
    console.print(
        f"[yellow]warning:[/] leakage checked against {len(lineage.keys)} known training "
        f"tasks only: {lineage.why_incomplete}"
    )
    return lineage


def _need_training(kind: str, split: str) -> None:
    if kind in ("new-entities", "path-disjoint"):
        raise InputError(
            f"--split {split}: a stratum is defined against training data; for the base "
            "model give --against TUNED_MODEL (its tasks, to compare with `synth compare`)"
        )


class PlannedSplit(Record):
    """The tasks a split scores, each one's stratum, and how many planned ones leaked."""

    tasks: list[Blueprint]
    strata: dict[str, str]
    n_planned: int
    dropped: dict[str, str]


async def plan_split(
    split: str,
    *,
    clusters: list[str],
    per_cluster: int,
    train_keys: list[TaskKey],
    sandbox: SandboxKind,
    seed: int = 0,
) -> PlannedSplit:
    """Plan the split's candidates from the eval seed and drop every one that leaks into
    ``train_keys`` (``training.splits.make_split``); a one-stratum split keeps the first
    ``per_cluster`` of that stratum per cluster."""
    from trajsynth.mcp_servers.registry import get_cluster
    from trajsynth.planning.heldout import plan_eval_tasks
    from trajsynth.training.splits import make_split, task_key

    kind, held_cluster = parse_split(split)
    wanted = [held_cluster] if held_cluster else clusters
    factor = CANDIDATES_PER_TASK if kind in ("new-entities", "path-disjoint") else 1
    candidates = await plan_eval_tasks(
        [get_cluster(c) for c in wanted], per_cluster * factor, seed=seed, sandbox_kind=sandbox
    )
    by_id = {t.blueprint_id: t for t in candidates}
    if not train_keys:  # the base model: nothing to leak into; strata are against nothing
        _need_training(kind, split)
        return PlannedSplit(tasks=candidates, strata={}, n_planned=len(candidates), dropped={})
    chosen = make_split(
        split, kind, [task_key(t) for t in candidates], train_keys, cluster=held_cluster
    )
    taken: dict[str, int] = {}
    tasks = []
    for task_id in chosen.eval_ids:
        task = by_id[task_id]
        if taken.get(task.cluster_id, 0) < per_cluster:
            taken[task.cluster_id] = taken.get(task.cluster_id, 0) + 1
            tasks.append(task)
    return PlannedSplit(
        tasks=tasks,
        strata={t.blueprint_id: str(chosen.strata[t.blueprint_id]) for t in tasks},
        n_planned=len(candidates),
        dropped=chosen.dropped,
    )


async def run_eval(
    *,
    policy: str,
    tasks: list[Blueprint],
    samples: int,
    budgets: Budgets,
    sandbox: SandboxKind,
    template_user: bool = False,
    embedded_ctx: int = 4096,
    distractors: int | None = None,
) -> tuple[Any, list[Any]]:
    """Serve the policy and evaluate it on ``tasks``; returns (summary, tries)."""
    from trajsynth.agents.policy import RoleRoutedLLM, serve_policy
    from trajsynth.llm.client import open_llm_client
    from trajsynth.mcp_servers.registry import get_cluster
    from trajsynth.planning.heldout import eval_assistant, evaluate
    from trajsynth.training.eval import summarize
    from trajsynth.training.serve import policy_gguf

    if not tasks:
        raise InputError("the split has no tasks")
    found = {c: get_cluster(c) for c in sorted({t.cluster_id for t in tasks})}
    llm = LLMConfig(temperature=0.7, max_tokens=128, embedded_ctx=embedded_ctx)

    async def run(client: Any, **extra: Any) -> list[Any]:
        return await evaluate(
            tasks,
            found,
            client,
            samples=samples,
            run_id=f"eval:{policy}",
            assistant=eval_assistant(True, tuned=policy != "embedded"),
            budgets=budgets,
            sandbox_kind=sandbox,
            template_user=template_user,
            distractors=distractors,
            **extra,
        )

    async with open_llm_client(llm) as base:
        if policy == "embedded":
            tries = await run(base, context_tokens=embedded_ctx)
        else:
            async with serve_policy(policy_gguf(policy), llm) as tuned:
                tries = await run(RoleRoutedLLM(tuned, base))
    return summarize(tries, k=samples), tries


def eval_policy(
    policy: Annotated[
        str, typer.Option("--policy", help="'embedded', a HF model folder or a .gguf file")
    ] = "embedded",
    split: Annotated[str, typer.Option("--split", help=SPLITS)] = "heldout-seeds",
    samples: Annotated[int, typer.Option("--samples", "-k", min=1, help="tries per task")] = 1,
    clusters: Annotated[
        str, typer.Option(help="comma-separated clusters for heldout-seeds")
    ] = "shop,calendar,travel",
    tasks: Annotated[
        int, typer.Option("--tasks", min=1, help="distinct held-out tasks per cluster")
    ] = 2,
    smoke: Annotated[
        bool, typer.Option("--smoke", help="two tasks, one try each, short episodes")
    ] = False,
    template_user: Annotated[
        bool, typer.Option("--template-user", help="no model in the user's seat")
    ] = False,
    distractors: Annotated[
        int | None,
        typer.Option(
            "--distractors",
            min=0,
            help="list the tools a task needs plus N nearest (as the training rows did; "
            "default: [llm] distractors of synth.toml, else every tool that fits)",
        ),
    ] = None,
    seed: Annotated[
        int, typer.Option("--seed", help="eval seed: another seed plans other held-out tasks")
    ] = 0,
    against: Annotated[
        str | None,
        typer.Option(
            "--against",
            help="also hold out what this model was trained on: the base model scored on "
            "a tuned model's split and strata, paired with it by `synth compare`",
        ),
    ] = None,
    allow_untracked: Annotated[
        bool,
        typer.Option(
            "--allow-untracked",
            help="score a policy whose training data this store cannot name in full "
            "(checked against what it can name, and said so)",
        ),
    ] = False,
    store_path: Annotated[Path | None, typer.Option("--store", help="DuckDB store")] = None,
) -> None:
    """Evaluate a policy on held-out tasks in live environments, scored by the verifier."""
    from trajsynth.training.eval import summarize
    from trajsynth.training.models_io import resolve_model
    from trajsynth.training.records import eval_row

    if policy != "embedded":
        resolve_model(policy)  # one clear line when the path is not a model
    kind, _ = parse_split(split)
    names = [c.strip() for c in clusters.split(",") if c.strip()]
    budgets = Budgets(max_turns=4, max_tokens=1500)
    if smoke:
        names, tasks, samples = ["shop", "calendar"], 1, 1
        budgets = Budgets(max_turns=3, max_tokens=600)
    store = Store(store_path or current_settings().store_path)
    lineage = training_lineage(store, policy, allow_untracked=allow_untracked)
    train_keys = list(lineage.keys)
    if against is not None:
        other = training_lineage(store, against, allow_untracked=allow_untracked)
        train_keys += other.keys
    if not train_keys:
        _need_training(kind, split)  # before any planning: one line, at once
    sandbox = SandboxKind.LOCAL if smoke else SandboxKind.AUTO
    planned = asyncio.run(
        plan_split(
            split,
            clusters=names,
            per_cluster=tasks,
            train_keys=train_keys,
            sandbox=sandbox,
            seed=seed,
        )
    )
    if planned.dropped:
        first = next(iter(planned.dropped.values()))
        console.print(
            f"dropped {len(planned.dropped)} of {planned.n_planned} planned tasks: they leak "
            f"into the training data of {against or policy} (its ancestors' included; "
            f"e.g. {first})"
        )
    summary, tries = asyncio.run(
        run_eval(
            policy=policy,
            tasks=planned.tasks,
            samples=samples,
            budgets=budgets,
            sandbox=sandbox,
            template_user=template_user,
            embedded_ctx=current_settings().run.llm.embedded_ctx,
            distractors=(
                distractors if distractors is not None else current_settings().run.llm.distractors
            ),
        )
    )
    row = eval_row(
        policy=policy,
        model_id=lineage.model_id,
        split=split,
        split_kind=kind,
        summary=summary,
        tries=tries,
        n_dropped=len(planned.dropped),
        strata=planned.strata,
    )
    store.insert("evals", [row])
    table = Table(title=f"eval of {policy} on {split} (k = {summary.k})")
    for col in ("cluster", "tasks", "tries", "excluded", "pass@1 [95% CI]", f"pass@{summary.k}"):
        table.add_column(col, justify="right")

    def iv(value: Any) -> str:
        return "-" if value is None else f"{value.estimate:.2f} [{value.low:.2f}, {value.high:.2f}]"

    def add(name: str, score: Any) -> None:
        table.add_row(
            name,
            str(score.n_tasks),
            str(score.n_tries),
            str(score.n_excluded),
            iv(score.pass1),
            iv(score.passk),
        )

    for c in summary.clusters:
        add(c.cluster_id, c)
    for name in sorted(set(planned.strata.values())):
        if len(set(planned.strata.values())) > 1:
            part = [t for t in tries if planned.strata.get(t.task_id) == name]
            add(f"stratum {name}", summarize(part, k=summary.k))
    add("all", summary)
    console.print(table)
    console.print("pass@1: mean of each task's pass rate; intervals: 95% bootstrap over tasks")
    console.print(f"stored eval {row['eval_id']}")


def recent_evals(store: Store, limit: int = 10) -> list[dict[str, Any]]:
    """The latest stored evals (for ``synth stats``)."""
    return store.query(
        "SELECT eval_id, policy, split, k, n_tasks, n_tries, n_excluded, pass1, pass1_low, "
        "pass1_high, passk, passk_low, passk_high FROM evals "
        "ORDER BY created_at DESC LIMIT ?",
        [limit],
    )


def evals_table(rows: list[dict[str, Any]]) -> Table:
    """Stored evals as a table: pass@1 and pass@k with their 95% intervals."""
    table = Table(title="held-out evals (latest first)")
    for col in ("policy", "split", "tasks", "tries", "excluded", "pass@1 [95% CI]", "pass@k"):
        table.add_column(col, justify="left" if col in ("policy", "split") else "right")

    def iv(est: Any, low: Any, high: Any) -> str:
        return "-" if est is None else f"{est:.2f} [{low:.2f}, {high:.2f}]"

    for r in rows:
        table.add_row(
            str(r["policy"])[-40:],
            r["split"],
            str(r["n_tasks"]),
            str(r["n_tries"]),
            str(r["n_excluded"]),
            iv(r["pass1"], r["pass1_low"], r["pass1_high"]),
            f"k={r['k']}: " + iv(r["passk"], r["passk_low"], r["passk_high"]),
        )
    return table


def _stored_tries(store: Store, typed: str) -> tuple[dict[str, Any], list[Any]]:
    """The evals row an id (or unique prefix) names, and its tries."""
    from trajsynth.cli.ids import resolve
    from trajsynth.schemas.evals import TryResult

    eval_id = resolve(store, "eval", typed)
    row = store.query(
        "SELECT eval_id, policy, split, n_tasks, tries FROM evals WHERE eval_id = ?", [eval_id]
    )[0]
    return row, [TryResult.model_validate(t) for t in _json(row["tries"]) or []]


def compare_evals(
    a: Annotated[str, typer.Argument(help="eval id (or a unique prefix) of policy A")],
    b: Annotated[str, typer.Argument(help="eval id (or a unique prefix) of policy B")],
    store_path: Annotated[Path | None, typer.Option("--store", help="DuckDB store")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Does policy A pass more often than policy B? Two stored evals, paired by task."""
    from trajsynth.training.eval import compare

    store = Store(store_path or current_settings().store_path)
    if not store.path.exists():
        raise InputError(f"no store at {store.path}: run `synth eval` first")
    (row_a, tries_a), (row_b, tries_b) = _stored_tries(store, a), _stored_tries(store, b)
    try:
        c = compare(tries_a, tries_b)
    except ValueError:
        raise InputError(
            f"evals {row_a['eval_id']} ({row_a['split']}) and {row_b['eval_id']} "
            f"({row_b['split']}) share no task: compare two evals of the same split and tasks"
        ) from None
    d = c.difference
    if as_json:
        print_json(
            {
                "a": {"eval_id": row_a["eval_id"], "policy": row_a["policy"], "pass1": c.pass1_a},
                "b": {"eval_id": row_b["eval_id"], "policy": row_b["policy"], "pass1": c.pass1_b},
                "split": row_a["split"],
                "n_tasks": c.n_tasks,
                "difference": {"estimate": d.estimate, "low": d.low, "high": d.high},
                "a_better": c.a_better,
                "b_better": c.b_better,
                "ties": c.ties,
                "p_value": c.p_value,
            }
        )
        return
    table = Table(title=f"A against B on the {c.n_tasks} tasks both tried")
    for col in ("", "policy", "eval", "split", "tasks", "pass@1 (mean over shared tasks)"):
        table.add_column(col)
    for name, row, rate in (("A", row_a, c.pass1_a), ("B", row_b, c.pass1_b)):
        table.add_row(
            name,
            str(row["policy"])[-40:],
            row["eval_id"],
            row["split"],
            str(row["n_tasks"]),
            f"{rate:.3f}",
        )
    console.print(table)
    console.print(
        f"A - B: {d.estimate:+.3f} [{d.low:+.3f}, {d.high:+.3f}] (95%, paired bootstrap over tasks)"
    )
    console.print(
        f"tasks A passed more often: {c.a_better}, B more often: {c.b_better}, the same: {c.ties}; "
        f"one-sided sign test that A beats B: p = {c.p_value:.4g}"
    )
