"""`synth eval --policy X --split NAME --samples k`: a policy on held-out tasks.

Wiring only: the split's tasks are planned from held-out seeds (``training.eval``) and
checked against the policy's training data (``training.splits``: its ``models`` row names
the runs it was trained on; their blueprints are the training tasks); the policy is served
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
from rich.table import Table

from trajsynth.schemas import Blueprint, Budgets, InputError, LLMConfig, SandboxKind
from trajsynth.store import Store

__all__ = ["compare_evals", "eval_policy", "parse_split", "run_eval"]

log = logging.getLogger(__name__)
console = Console()

SPLITS = "heldout-seeds | loco:CLUSTER"


def parse_split(split: str) -> tuple[str, str | None]:
    """``heldout-seeds`` or ``loco:CLUSTER`` -> (kind, cluster)."""
    if split == "heldout-seeds":
        return "heldout-seeds", None
    if split.startswith("loco:") and split[5:]:
        return "loco", split[5:]
    raise InputError(f"--split {split!r}: one of {SPLITS}")


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) and value[:1] in "[{" else value


def _training_tasks(store: Store, policy: str) -> tuple[str | None, list[Blueprint]]:
    """The policy's model id and the blueprints of the runs it was trained on."""
    if policy == "embedded" or not store.path.exists():
        return None, []
    found = store.query(
        "SELECT model_id, run_ids FROM models WHERE path = ? OR gguf_path = ? "
        "ORDER BY created_at DESC LIMIT 1",
        [str(policy), str(policy)],
    )
    if not found:
        return None, []
    run_ids = found[0]["run_ids"]
    run_ids = json.loads(run_ids) if isinstance(run_ids, str) else list(run_ids or [])
    if not run_ids:
        return found[0]["model_id"], []
    marks = ", ".join("?" for _ in run_ids)
    rows = store.query(f"SELECT * FROM blueprints WHERE run_id IN ({marks})", run_ids)
    blueprints = []
    for r in rows:
        data = {
            k: json.loads(v) if isinstance(v, str) and v[:1] in "[{" else v for k, v in r.items()
        }
        data = {k: v for k, v in data.items() if k in Blueprint.model_fields and v is not None}
        try:
            blueprints.append(Blueprint.model_validate(data))
        except ValueError as exc:
            log.warning("blueprint %s not read for the leakage check: %s", r["blueprint_id"], exc)
    return found[0]["model_id"], blueprints


async def run_eval(
    *,
    policy: str,
    split: str,
    samples: int,
    clusters: list[str],
    per_cluster: int,
    train: list[Blueprint],
    budgets: Budgets,
    sandbox: SandboxKind,
    template_user: bool = False,
    seed: int = 0,
    embedded_ctx: int = 4096,
    distractors: int | None = None,
) -> tuple[Any, list[Any], str]:
    """Plan, split, serve and evaluate; returns (summary, tries, split kind)."""
    from trajsynth.agents.heldout import eval_assistant, evaluate, plan_eval_tasks
    from trajsynth.agents.llm import open_llm_client
    from trajsynth.agents.policy import RoleRoutedLLM, serve_policy
    from trajsynth.mcp_servers.registry import get_cluster
    from trajsynth.training.eval import summarize
    from trajsynth.training.serve import policy_gguf
    from trajsynth.training.splits import make_split, task_key

    kind, held_cluster = parse_split(split)
    train_keys = [task_key(b) for b in train]
    wanted = [held_cluster] if held_cluster else clusters
    found = {c: get_cluster(c) for c in wanted}
    candidates = await plan_eval_tasks(
        list(found.values()), per_cluster, seed=seed, sandbox_kind=sandbox
    )
    by_id = {t.blueprint_id: t for t in candidates}
    if train_keys:
        chosen = make_split(
            split, kind, [task_key(t) for t in candidates], train_keys, cluster=held_cluster
        )
        tasks = [by_id[i] for i in chosen.eval_ids]
    else:  # no recorded training data (the base model): every held-out task counts
        tasks = candidates
    if not tasks:
        raise InputError(f"split {split!r} has no tasks")
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
    return summarize(tries, k=samples), tries, kind


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
    store_path: Annotated[Path | None, typer.Option("--store", help="DuckDB store")] = None,
) -> None:
    """Evaluate a policy on held-out tasks in live environments, scored by the verifier."""
    from trajsynth.cli import main as cli
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
    store = Store(store_path or cli.settings().store_path)
    model_id, train = _training_tasks(store, policy)
    summary, tries, kind = asyncio.run(
        run_eval(
            policy=policy,
            split=split,
            samples=samples,
            clusters=names,
            per_cluster=tasks,
            train=train,
            budgets=budgets,
            sandbox=SandboxKind.LOCAL if smoke else SandboxKind.AUTO,
            template_user=template_user,
            embedded_ctx=cli.settings().run.llm.embedded_ctx,
            distractors=(
                distractors if distractors is not None else cli.settings().run.llm.distractors
            ),
        )
    )
    row = eval_row(
        policy=policy, model_id=model_id, split=split, split_kind=kind, summary=summary, tries=tries
    )
    store.insert("evals", [row])
    table = Table(title=f"eval of {policy} on {split} (k = {summary.k})")
    for col in ("cluster", "tasks", "tries", "excluded", "pass@1 [95% CI]", f"pass@{summary.k}"):
        table.add_column(col, justify="right")

    def iv(value: Any) -> str:
        return "-" if value is None else f"{value.estimate:.2f} [{value.low:.2f}, {value.high:.2f}]"

    for c in summary.clusters:
        table.add_row(
            c.cluster_id,
            str(c.n_tasks),
            str(c.n_tries),
            str(c.n_excluded),
            iv(c.pass1),
            iv(c.passk),
        )
    table.add_row(
        "all",
        str(summary.n_tasks),
        str(summary.n_tries),
        str(summary.n_excluded),
        iv(summary.pass1),
        iv(summary.passk),
    )
    console.print(table)
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
) -> None:
    """Does policy A pass more often than policy B? Two stored evals, paired by task."""
    from trajsynth.cli import main as cli
    from trajsynth.training.eval import compare

    store = Store(store_path or cli.settings().store_path)
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
    d = c.difference
    console.print(
        f"A - B: {d.estimate:+.3f} [{d.low:+.3f}, {d.high:+.3f}] (95%, paired bootstrap over tasks)"
    )
    console.print(
        f"tasks A passed more often: {c.a_better}, B more often: {c.b_better}, the same: {c.ties}; "
        f"one-sided sign test that A beats B: p = {c.p_value:.4g}"
    )
