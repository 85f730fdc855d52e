"""`synth stats [--json]`: the dataset's figures per round, from curated rows."""

from __future__ import annotations

import json

import pytest
import typer
from fakes.store_rows import RUN, hash_embedder, write_round
from fakes.trajectories import call, make_trajectory, make_verdict, verdicts_for
from typer.testing import CliRunner

from trajsynth.cli.commands import stats
from trajsynth.cli.commands import topo as topo_cmd
from trajsynth.flows.curate import curate_round
from trajsynth.store import Store

GOOD = call("get_order", {"order_id": "W1"}, {"order_id": "W1", "status": "delivered"})
BAD = call("get_order", {"order_id": "X9"}, "no such order", error="not_found")
CANCEL = call("cancel_order", {"order_id": "W1"}, {"ok": True})


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command("stats")(stats.stats)
    app.command("topo")(topo_cmd.topo)
    return app


def _two_rounds(store: Store) -> None:
    r0 = [
        make_trajectory("a1", [[GOOD]]),
        make_trajectory("a2", [[BAD], [GOOD]], final="Found it after a retry."),
        make_trajectory("a3", [[BAD]], final="Sorry, no luck."),
    ]
    write_round(store, r0, verdicts_for({"a1": True, "a2": True, "a3": False}))
    r1 = [
        make_trajectory("b1", [[GOOD], [CANCEL]], task_id="task-2", final="Cancelled W1."),
        make_trajectory("b2", [[CANCEL]], task_id="task-2", final="Cancelled it directly."),
    ]
    r1 = [t.model_copy(update={"cluster_id": "air"}) for t in r1]
    write_round(
        store,
        r1,
        {"b1": make_verdict("b1", True), "b2": make_verdict("b2", False)},
        round=1,
        domains={"shop": "retail", "air": "travel"},
    )
    embed = hash_embedder()
    curate_round(store, RUN, 0, embedder=embed)
    curate_round(store, RUN, 1, embedder=embed)


def test_stats_json_has_the_figures_per_round(tmp_path) -> None:
    store = Store(tmp_path / "s.duckdb")
    _two_rounds(store)
    result = CliRunner().invoke(_cli(), ["stats", "--json", "--store", str(store.path)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["run_id"] == RUN and data["curated"] is True
    assert (data["n_trajectories"], data["n_tasks"], data["n_passed"]) == (5, 2, 3)
    assert data["pass_rate"] == pytest.approx(3 / 5)
    assert [r["round"] for r in data["rounds"]] == [0, 1]
    for key in ("domain_entropy", "reasoning_mode_entropy", "action_complexity",
                "error_branch_ratio"):  # fmt: skip
        assert key in data and all(key in r for r in data["rounds"])
        assert data[key] == data["rounds"][-1][key]
    # round 0: one domain; after round 1 the dataset spans retail and travel
    assert data["rounds"][0]["domain_entropy"] == 0.0
    accepted_after_1 = 3  # a1, a2 (retail) and b1 (travel)
    assert data["rounds"][1]["n_accepted"] == 1
    p = [2 / accepted_after_1, 1 / accepted_after_1]
    h = -sum(x * __import__("math").log(x) for x in p)
    assert data["domain_entropy"] == pytest.approx(h, abs=1e-6)
    assert data["cluster_entropy_all_trajectories"] == pytest.approx(
        -0.6 * __import__("math").log(0.6) - 0.4 * __import__("math").log(0.4)
    )  # 3 shop and 2 air trajectories, whatever was accepted
    by_cluster = {c["cluster_id"]: c for c in data["pass_rate_by_cluster"]}
    assert by_cluster["shop"]["pass_rate"] == pytest.approx(2 / 3)
    assert by_cluster["air"]["pass_rate"] == pytest.approx(0.5)
    # every registered metric is listed; a2 failed once and recovered: error_recovery_rate 1
    metrics = {m["name"]: m for m in data["metrics"]}
    assert {"error_recovery_rate", "tokens_per_success"} <= set(metrics)
    assert metrics["error_recovery_rate"]["unit"] == "share"
    [row] = store.query(
        "SELECT value FROM metric_values WHERE metric = 'error_recovery_rate' AND item_id = 'a2'"
    )
    assert row["value"] == 1.0
    assert metrics["tokens_per_success"]["n"] == 2  # both tasks have a success
    stored = store.query("SELECT error_branch_ratio FROM round_stats ORDER BY round")
    assert [r["error_branch_ratio"] for r in data["rounds"]] == [
        r["error_branch_ratio"] for r in stored
    ]


def test_stats_table_and_topo_from_the_store(tmp_path) -> None:
    store = Store(tmp_path / "s.duckdb")
    _two_rounds(store)
    result = CliRunner().invoke(_cli(), ["stats", "--store", str(store.path)])
    assert result.exit_code == 0, result.output
    assert "pass rate by cluster" in result.output and "per round" in result.output
    assert "registered metrics" in result.output and "tokens_per_success" in result.output
    # each entropy says which set it is over and its unit: the dataset's accepted
    # rows, and the run's every trajectory (3 shop and 2 air: 0.673 nats)
    assert "domain_entropy (accepted, nats)" in result.output
    assert "cluster_entropy (all, nats)" in result.output and "0.673" in result.output
    out = tmp_path / "g.png"
    result = CliRunner().invoke(
        _cli(), ["topo", "task-1", "--store", str(store.path), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 1000


def test_stats_on_an_uncurated_run_says_so(tmp_path) -> None:
    store = Store(tmp_path / "s.duckdb")
    write_round(store, [make_trajectory("a1", [[GOOD]])], verdicts_for({"a1": True}))
    result = CliRunner().invoke(_cli(), ["stats", "--json", "--store", str(store.path)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["curated"] is False and data["rounds"] == [] and data["domain_entropy"] is None
