"""Held-out eval: summaries with intervals, stored rows, and `synth eval --smoke` for real."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trajsynth.cli.commands.eval import parse_split
from trajsynth.cli.main import app
from trajsynth.schemas import InputError
from trajsynth.schemas.evals import TryResult
from trajsynth.store import Store
from trajsynth.training import eval as eval_module
from trajsynth.training.eval import compare, summarize
from trajsynth.training.records import eval_row

pytestmark = pytest.mark.alone  # torch or transformers: every core


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
    # pass@1 is the mean over tasks of each task's rate (a 1/2, b 0/1, c 2/2), not pooled
    # tries (3 of 5): a task tried more often does not weigh more
    assert s.pass1 is not None and s.pass1.estimate == pytest.approx(0.5)
    assert s.pass1.method == "bootstrap over tasks"
    assert s.pass1.low < 0.5 < s.pass1.high
    # pass@2 over tasks with 2 counted tries: a (1 of 2) -> 1.0, c (2 of 2) -> 1.0; b has 1
    assert s.passk is not None and s.passk.estimate == pytest.approx(1.0)
    shop, travel = s.clusters
    assert (shop.cluster_id, shop.n_excluded, shop.pass1.estimate) == (
        "shop",
        1,
        pytest.approx((1 / 2 + 0) / 2),
    )
    assert travel.pass1.estimate == 1.0 and travel.pass1.high == 1.0


def test_doctests() -> None:
    failures, tried = doctest.testmod(eval_module)
    assert tried >= 3 and failures == 0


def _tries(passed_by_task: dict[str, list[bool]]) -> list[TryResult]:
    return [
        _try(task, "travel", i, p)
        for task, passed in passed_by_task.items()
        for i, p in enumerate(passed)
    ]


def test_a_policy_against_itself_shows_no_difference() -> None:
    tries = _tries({"t1": [True, False], "t2": [False, False], "t3": [True, True]})
    c = compare(tries, tries)
    assert c.difference.estimate == 0.0 and c.difference.low == c.difference.high == 0.0
    assert (c.a_better, c.b_better, c.ties, c.p_value) == (0, 0, 3, 1.0)


def test_thirteen_tasks_won_against_one_is_significant() -> None:
    # the shape of the README's left-out travel result: 13 tasks only the tuned policy
    # solved, 1 only the base, 56 neither (2 tries each)
    tuned = {f"t{i}": [True, False] for i in range(13)} | {"t13": [False, False]}
    base = {f"t{i}": [False, False] for i in range(13)} | {"t13": [True, False]}
    neither = {f"n{i}": [False, False] for i in range(56)}
    c = compare(_tries(tuned | neither), _tries(base | neither))
    assert (c.n_tasks, c.a_better, c.b_better, c.ties) == (70, 13, 1, 56)
    assert c.p_value == pytest.approx(15 / 2**14)  # P(X >= 13), X ~ Bin(14, 1/2)
    assert c.difference.estimate == pytest.approx(12 * 0.5 / 70)
    assert 0.0 < c.difference.low < c.difference.estimate < c.difference.high
    reverse = compare(_tries(base | neither), _tries(tuned | neither))
    assert reverse.p_value > 0.99 and reverse.difference.high < 0.0


def test_comparison_pairs_shared_tasks_and_ignores_excluded_tries() -> None:
    a = [_try("t1", "shop", 0, True), _try("t2", "shop", 0, True), _try("only-a", "shop", 0, True)]
    b = [
        _try("t1", "shop", 0, False),
        _try("t2", "shop", 0, False, excluded=True),  # no counted try: t2 is not shared
        _try("only-b", "shop", 0, False),
    ]
    c = compare(a, b)
    assert (c.n_tasks, c.pass1_a, c.pass1_b, c.a_better) == (1, 1.0, 0.0, 1)
    with pytest.raises(ValueError, match="share no task"):
        compare([_try("x", "shop", 0, True)], [_try("y", "shop", 0, True)])


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
    # two tasks, one passed: resampling tasks reaches both ends
    assert got["pass1_low"] == 0.0 and got["pass1_high"] == 1.0


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


def _store_eval(store: Store, policy: str, tries: list[TryResult], split: str = "loco") -> str:
    row = eval_row(policy=policy, model_id=None, split=split, split_kind="loco",
                   summary=summarize(tries, k=2), tries=tries)  # fmt: skip
    store.insert("evals", [row])
    return row["eval_id"]


def test_synth_compare_pairs_two_stored_evals_by_task(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    tuned = _store_eval(store, "tuned.gguf", _tries({f"t{i}": [True, i < 3] for i in range(8)}))
    base = _store_eval(store, "embedded", _tries({f"t{i}": [i == 0, i == 0] for i in range(8)}))
    result = CliRunner().invoke(
        app, ["compare", tuned[:12], base, "--store", str(store.path)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "on the 8 tasks both tried" in out and "tuned.gguf" in out
    assert "A passed more often: 7, B more often: 0, the same: 1" in out
    assert "p = 0.007812" in out  # 1 / 2**7


def test_synth_compare_of_unknown_or_unpaired_evals_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from trajsynth.cli import main as cli

    store = Store(tmp_path / "s.duckdb")
    one = _store_eval(store, "embedded", _tries({"t1": [True, False]}))
    other = _store_eval(store, "embedded", _tries({"u1": [True, False]}), split="heldout-seeds")
    for args, expected in (
        ([one, "nosuch"], "no eval id starts with 'nosuch'"),
        ([one, other], f"evals {one} (loco) and {other} (heldout-seeds) share no task"),
    ):
        monkeypatch.setattr(sys, "argv", ["synth", "compare", *args, "--store", str(store.path)])
        with pytest.raises(SystemExit) as exit_:
            cli.main()
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and " ".join(err.split()).count(expected) == 1, err
        assert "Traceback" not in err


def test_synth_eval_refuses_a_policy_whose_training_data_it_cannot_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from trajsynth.cli import main as cli

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    store = tmp_path / "s.duckdb"
    for args, expected in (
        (["--policy", str(model)], "cannot check"),
        (["--split", "path-disjoint"], "a stratum is defined against training data"),
    ):
        monkeypatch.setattr(sys, "argv", ["synth", "eval", *args, "--store", str(store)])
        with pytest.raises(SystemExit) as exit_:
            cli.main()
        err = " ".join(capsys.readouterr().err.split())
        assert exit_.value.code == 2 and expected in err and "Traceback" not in err, err


async def test_a_split_drops_what_leaks_and_counts_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from typing import Any

    from fakes.inprocess_env import InProcessEnvironment

    from trajsynth.cli.commands.eval import plan_split
    from trajsynth.mcp_servers.registry import get_cluster
    from trajsynth.planning import heldout
    from trajsynth.schemas import SandboxKind
    from trajsynth.training.splits import task_key

    def in_process(cluster: Any, **_: Any) -> Any:
        return lambda: InProcessEnvironment(cluster.cluster_id, tmp_path)

    monkeypatch.setattr(heldout, "environment_factory", in_process)
    planned = await heldout.plan_eval_tasks([get_cluster("shop")], 4)
    # a policy trained on two of the very tasks the eval seed plans
    train = [task_key(t) for t in planned[:2]]
    split = await plan_split(
        "heldout-seeds", clusters=["shop"], per_cluster=4, train_keys=train,
        sandbox=SandboxKind.LOCAL,
    )  # fmt: skip
    assert len(split.dropped) >= 2 and split.n_planned == 4
    assert {t.blueprint_id for t in split.tasks}.isdisjoint(k.task_id for k in train)
    assert set(split.strata.values()) <= {"new-entities", "path-disjoint"}
    assert len(split.tasks) + len(split.dropped) == 4
