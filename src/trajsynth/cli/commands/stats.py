"""`synth stats [--json] [--run RUN_ID]`: the dataset's figures and how they moved per round.

Sizes, pass rates by cluster, the three diversity figures (docs/methods.md §5: domain entropy,
reasoning-mode entropy, mean cumulative action complexity) and the topology figures (§8: mean
error branch ratio, strategic heterogeneity, recoveries), read from the rows that
``flows.curate.curate_round`` stored, and every metric registered in ``curation/metrics/``
(``metrics``: name, scope, unit, meaning, and its count and mean over the run). The top
level holds the latest round; ``rounds`` one entry per round. Every figure is of the dataset
after that round (accepted trajectories of all rounds so far), except ``round_*`` keys, which
are of that round alone.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from trajsynth.cli.context import current_settings
from trajsynth.cli.ids import id_column, resolve
from trajsynth.cli.tables import Table
from trajsynth.curation.entropy import entropy
from trajsynth.curation.metrics import registered_metrics
from trajsynth.schemas import InputError
from trajsynth.store import Store

__all__ = ["FIGURES", "collect_stats", "latest_loop", "stats"]

console = Console()

FIGURES = (
    "domain_entropy",
    "domain_entropy_norm",
    "cluster_entropy_norm",
    "reasoning_mode_entropy",
    "reasoning_mode_entropy_norm",
    "action_complexity",
    "error_branch_ratio",
    "strategic_heterogeneity",
    "n_success_strategies",
)
"""The figures each round carries (and the top level, for the latest round)."""

_COUNTS = (
    "n_trajectories",
    "n_verified",
    "n_accepted",
    "pass_rate",
    "n_tasks",
    "n_recovered",
    "n_duplicates",
    "n_sft_selected",
    "n_rl_selected",
)


def _latest_run(store: Store) -> str | None:
    rows = store.query("SELECT run_id FROM runs ORDER BY updated_at DESC NULLS LAST LIMIT 1")
    if rows:
        return rows[0]["run_id"]
    rows = store.query("SELECT run_id FROM trajectories ORDER BY round DESC, run_id LIMIT 1")
    return rows[0]["run_id"] if rows else None


def _round_entry(row: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"round": row["round"]}
    entry.update({k: row.get(k) for k in FIGURES})
    entry.update({k: row.get(k) for k in _COUNTS})
    own = row.get("round_report") or {}
    entry["round_domain_entropy"] = own.get("h_dom")
    entry["round_reasoning_mode_entropy"] = own.get("h_mode")
    entry["round_action_complexity"] = own.get("cac_mean")
    entry["mode_codebook"] = row.get("mode_codebook")
    return entry


def collect_stats(store: Store, run_id: str | None = None) -> dict[str, Any]:
    """The figures of one run (default: the latest) as a JSON-ready dict."""
    with store.session(read_only=True):  # a dozen queries on one connection
        return _collect_stats(store, run_id)


def _collect_stats(store: Store, run_id: str | None) -> dict[str, Any]:
    run = resolve(store, "run", run_id) if run_id else _latest_run(store)
    if run is None:
        raise InputError(f"no runs in {store.path} (run `synth run` first)")
    size = store.query(
        "SELECT count(*) AS n_trajectories, count(DISTINCT t.blueprint_id) AS n_tasks, "
        "count(*) FILTER (WHERE v.passed AND NOT coalesce(v.excluded, false)) AS n_passed, "
        "count(*) FILTER (WHERE v.excluded) AS n_excluded, max(t.round) AS last_round, "
        "count(*) FILTER (WHERE v.constraints_passed AND NOT coalesce(v.excluded, false)) "
        "AS n_constraints_passed, count(v.verdict_id) AS n_verified "
        "FROM trajectories t LEFT JOIN verdicts v USING (trajectory_id) WHERE t.run_id = ?",
        [run],
    )[0]
    if not size["n_trajectories"]:
        raise InputError(f"run {run!r} has no trajectories in {store.path}")
    clusters = store.query(
        "SELECT t.cluster_id, count(*) AS n, "
        "count(*) FILTER (WHERE v.passed AND NOT coalesce(v.excluded, false)) AS passed, "
        "count(*) FILTER (WHERE v.excluded) AS excluded, count(v.verdict_id) AS verified "
        "FROM trajectories t LEFT JOIN verdicts v USING (trajectory_id) WHERE t.run_id = ? "
        "GROUP BY t.cluster_id ORDER BY t.cluster_id",
        [run],
    )
    # the pass rate is the run summary's: passed (clean and correct) over judged (verified
    # and not excluded; an unverified trajectory is neither)
    for c in clusters:
        c["judged"] = c.pop("verified") - c["excluded"]
        c["pass_rate"] = c["passed"] / c["judged"] if c["judged"] else None
    selected = store.query(
        "SELECT kind, count(*) FILTER (WHERE selected) AS n FROM selections "
        "WHERE run_id = ? GROUP BY kind",
        [run],
    )
    modes = store.query(
        "SELECT coalesce(mode_label, 'unassigned') AS mode, count(*) AS n FROM scores "
        "WHERE run_id = ? AND accepted GROUP BY 1 ORDER BY n DESC, mode",
        [run],
    )
    rounds = [
        _round_entry(r)
        for r in store.query("SELECT * FROM round_stats WHERE run_id = ? ORDER BY round", [run])
    ]
    counted = size["n_verified"] - size["n_excluded"]
    out: dict[str, Any] = {
        "run_id": run,
        "curated": bool(rounds),
        "n_rounds": (size["last_round"] or 0) + 1,
        "n_trajectories": size["n_trajectories"],
        "n_tasks": size["n_tasks"],
        "n_judged": counted,
        "n_constraints_passed": size["n_constraints_passed"],
        "n_passed": size["n_passed"],
        "n_excluded": size["n_excluded"],
        "pass_rate": size["n_passed"] / counted if counted else None,
        "selected": {r["kind"]: r["n"] for r in selected},
        "pass_rate_by_cluster": clusters,
        # over every trajectory of the run, beside the dataset's (accepted) figures: a run
        # that rolled out in two clusters but accepted rows of one shows 0 there, which alone
        # reads as a bug
        "cluster_entropy_all_trajectories": entropy([c["n"] for c in clusters]),
        "modes": {m["mode"]: m["n"] for m in modes},
    }
    latest = rounds[-1] if rounds else {}
    out.update({k: latest.get(k) for k in FIGURES})
    out["rounds"] = rounds
    out["metrics"] = _metrics(store, run)
    from trajsynth.cli.commands.eval import recent_evals  # held-out evals of policies

    out["evals"] = recent_evals(store)
    out["improve"] = latest_loop(store)
    return out


def _metrics(store: Store, run: str) -> list[dict[str, Any]]:
    """Every registered curation metric with its mean and count over the run's items."""
    found = {
        r["metric"]: r
        for r in store.query(
            "SELECT metric, count(*) AS n, avg(value) AS mean FROM metric_values "
            "WHERE run_id = ? GROUP BY metric",
            [run],
        )
    }
    return [
        {
            **spec.model_dump(mode="json"),
            "n": found.get(spec.name, {}).get("n", 0),
            "mean": found.get(spec.name, {}).get("mean"),
        }
        for spec in registered_metrics()
    ]


def latest_loop(store: Store) -> list[dict[str, Any]]:
    """The rounds of the newest expert-iteration loop (``synth improve``), in order; none
    in a store written before the ``improve_rounds`` table (reads never migrate)."""
    if not store.query(
        "SELECT 1 FROM information_schema.tables WHERE table_name = 'improve_rounds'"
    ):
        return []
    return store.query(
        "SELECT * EXCLUDE (improve_key) FROM improve_rounds WHERE loop_id = ("
        "  SELECT loop_id FROM improve_rounds ORDER BY created_at DESC NULLS LAST LIMIT 1"
        ") ORDER BY round"
    )


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _metrics_table(metrics: list[dict[str, Any]]) -> Table:
    table = Table(title="registered metrics", caption="metric_values: mean over the run's items")
    table.add_column("metric", no_wrap=True)  # a name users type into SQL: never folded
    for col in ("scope", "unit", "items", "mean", "meaning"):
        right = col in ("items", "mean")
        table.add_column(col, overflow="fold", justify="right" if right else "left")
    for m in metrics:
        table.add_row(m["name"], m["scope"], m["unit"], str(m["n"]), _fmt(m["mean"]), m["meaning"])
    return table


def _set_label(key: str) -> str:
    """The key with the set it is computed over (and the unit of an entropy), so a 0.000
    domain entropy reads as "the accepted rows sit in one domain", not "one cluster ran"."""
    if "entropy" in key:
        return f"{key} (accepted{'' if key.endswith('_norm') else ', nats'})"
    return f"{key} (accepted)" if key in FIGURES else key


def _print(data: dict[str, Any]) -> None:
    head = Table(
        title=f"run {data['run_id']}",
        show_header=False,
        # the figures count the dataset (accepted trajectories), not every rollout: a run
        # whose accepted rows all sit in one domain shows domain entropy 0 however many
        # clusters it rolled out in
        caption="entropies in nats; (accepted): over the accepted trajectories of all rounds "
        "so far, the dataset; (all): over every trajectory of the run",
    )
    head.add_column("key", overflow="fold")
    head.add_column("value", justify="right", overflow="fold")
    # judged: counted by the verifier; passed: clean and correct (docs/verification.md)
    keys = ("n_rounds", "n_trajectories", "n_tasks", "n_judged", "n_constraints_passed",
            "n_passed", "n_excluded", "pass_rate")  # fmt: skip
    for key in keys:
        head.add_row(key, _fmt(data[key]))
    for kind, n in sorted(data["selected"].items()):
        head.add_row(f"selected {kind}", str(n))
    for key in FIGURES:
        head.add_row(_set_label(key), _fmt(data.get(key)))
    head.add_row("cluster_entropy (all, nats)", _fmt(data.get("cluster_entropy_all_trajectories")))
    console.print(head)
    clusters = Table(title="pass rate by cluster")
    id_column(clusters, "cluster", [str(c["cluster_id"]) for c in data["pass_rate_by_cluster"]])
    for col in ("trajectories", "judged", "passed", "excluded", "pass rate"):
        clusters.add_column(col, justify="right", overflow="fold")
    for c in data["pass_rate_by_cluster"]:
        clusters.add_row(
            c["cluster_id"], str(c["n"]), str(c["judged"]), str(c["passed"]),
            str(c["excluded"]), _fmt(c["pass_rate"]),
        )  # fmt: skip
    console.print(clusters)
    console.print(_metrics_table(data["metrics"]))
    if data.get("evals"):  # held-out evals of policies
        from trajsynth.cli.commands.eval import evals_table

        console.print(evals_table(data["evals"]))
    if data.get("improve"):  # expert iteration, one row per round of the loop
        from trajsynth.cli.commands.improve import improve_table

        console.print(improve_table(data["improve"]))
    if not data["rounds"]:
        console.print("[yellow]not curated yet: no per-round figures[/]")
        return
    per_round = Table(
        title="per round (the dataset after the round: accepted trajectories; entropies in nats)"
    )
    cols = ("round", "n_trajectories", "pass_rate", "domain_entropy", "reasoning_mode_entropy",
            "action_complexity", "error_branch_ratio", "n_recovered", "n_duplicates",
            "n_sft_selected", "n_rl_selected")  # fmt: skip
    for col in cols:
        per_round.add_column(col.replace("_", " "), justify="right", overflow="fold")
    for r in data["rounds"]:
        per_round.add_row(*(_fmt(r.get(c)) for c in cols))
    console.print(per_round)


def stats(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    run: Annotated[
        str | None, typer.Option("--run", help="run id or a unique prefix (default: latest)")
    ] = None,
    store_path: Annotated[Path | None, typer.Option("--store", help="DuckDB store")] = None,
) -> None:
    """The dataset's figures: sizes, pass rates, diversity and topology, per round."""
    if store_path is None:
        store_path = current_settings().store_path
    data = collect_stats(Store(store_path), run)
    if as_json:
        sys.stdout.write(json.dumps(data, default=str, indent=2) + "\n")
    else:
        _print(data)
