"""Held-out eval: summaries with intervals, stored rows, and `synth eval --smoke` for real."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajsynth.cli.commands.eval import parse_split
from trajsynth.cli.main import app
from trajsynth.schemas import InputError
from trajsynth.schemas.evals import TryResult
from trajsynth.store import Store
from trajsynth.training.eval import summarize
from trajsynth.training.records import eval_row


def _try(task: str, cluster: str, sample: int, passed: bool, excluded: bool = False) -> TryResult:
    return TryResult(
        task_id=task,
        cluster_id=cluster,
        sample=sample,
        passed=passed,
        score=0.9 if passed else 0.0,
        excluded=excluded,
        failure_class="infra" if excluded else None,
    )


def test_summary_excludes_uncountable_tries_and_scores_per_cluster() -> None:
    tries = [
        _try("a", "shop", 0, True),
        _try("a", "shop", 1, False),
        _try("b", "shop", 0, False),
        _try("b", "shop", 1, False, excluded=True),  # an infra fault: not a failure
        _try("c", "travel", 0, True),
        _try("c", "travel", 1, True),
    ]
    s = summarize(tries, k=2)
    assert (s.n_tasks, s.n_tries, s.n_excluded) == (3, 6, 1)
    assert s.pass1 is not None and s.pass1.estimate == pytest.approx(3 / 5)
    assert s.pass1.low < 0.6 < s.pass1.high
    # pass@2 over tasks with 2 counted tries: a (1 of 2) -> 1.0, c (2 of 2) -> 1.0; b has 1
    assert s.passk is not None and s.passk.estimate == pytest.approx(1.0)
    shop, travel = s.clusters
    assert (shop.cluster_id, shop.n_excluded, shop.pass1.estimate) == (
        "shop",
        1,
        pytest.approx(1 / 3),
    )
    assert travel.pass1.estimate == 1.0 and travel.pass1.high == 1.0


def test_eval_rows_are_stored_and_queryable(tmp_path: Path) -> None:
    tries = [_try("a", "shop", 0, True), _try("b", "shop", 0, False)]
    row = eval_row(
        policy="embedded",
        model_id=None,
        split="heldout-seeds",
        split_kind="heldout-seeds",
        summary=summarize(tries, k=1),
        tries=tries,
    )
    store = Store(tmp_path / "s.duckdb")
    assert store.insert("evals", [row, row]) == 1  # content id: writing it twice adds nothing
    (got,) = store.query("SELECT policy, pass1, pass1_low, pass1_high, n_tries FROM evals")
    assert got["policy"] == "embedded" and got["pass1"] == 0.5 and got["n_tries"] == 2
    assert 0 < got["pass1_low"] < 0.5 < got["pass1_high"] < 1


def test_split_names_are_checked() -> None:
    assert parse_split("loco:travel") == ("loco", "travel")
    with pytest.raises(InputError, match="--split 'random': one of heldout-seeds"):
        parse_split("random")


@pytest.mark.slow
@pytest.mark.llm
def test_synth_eval_smoke_acts_out_two_held_out_tasks_on_the_embedded_model(
    tmp_path: Path,
) -> None:
    store = tmp_path / "s.duckdb"
    result = CliRunner().invoke(
        app, ["eval", "--smoke", "--store", str(store)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    (row,) = Store(store).query("SELECT * FROM evals")
    assert row["policy"] == "embedded" and row["n_tasks"] == 2 and row["n_tries"] == 2
    counted = row["n_tries"] - row["n_excluded"]
    assert counted == 0 or row["pass1_low"] <= row["pass1"] <= row["pass1_high"]
    assert "eval of embedded on heldout-seeds" in result.output


def test_synth_stats_shows_the_stored_evals(tmp_path: Path) -> None:
    from fakes.export_store import export_store

    store = export_store(tmp_path / "s.duckdb")
    tries = [_try("a", "shop", 0, True), _try("b", "shop", 0, False)]
    summary = summarize(tries, k=1)
    store.insert(
        "evals",
        [eval_row(policy="tuned.gguf", model_id="m1", split="loco",
                  split_kind="loco", summary=summary, tries=tries)],
    )  # fmt: skip
    result = CliRunner().invoke(app, ["stats", "--store", str(tmp_path / "s.duckdb")])
    assert result.exit_code == 0, result.output
    assert "held-out evals" in result.output and "tuned.gguf" in result.output
    assert "0.50 [" in result.output
