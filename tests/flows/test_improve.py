"""Expert iteration (`synth improve`): a round's training data is the run's verified
selection, its row carries the run's pass rate, entropies and cost, a loop with nothing to
train on stops with one line, and `synth stats` shows the newest loop. The full loop (real
runs, SFT, GGUF, serving) is the slow `synth improve --smoke` test."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from fakes.store_rows import RUN, hash_embedder, write_round
from fakes.trajectories import call, make_trajectory, verdicts_for
from rich.console import Console

from trajsynth.cli.commands.improve import improve_table
from trajsynth.cli.commands.stats import collect_stats
from trajsynth.flows.curate import curate_round
from trajsynth.flows.improve import _round_row, expert_iteration, loop_id, round_rows
from trajsynth.schemas import InputError, PolicyRef, RunConfig
from trajsynth.store import Store
from trajsynth.training.sft import smoke_sft

GOOD = call("get_order", {"order_id": "W1"}, {"order_id": "W1", "status": "delivered"})
BAD = call("get_order", {"order_id": "X9"}, "no such order", error="not_found")


@pytest.fixture
def curated(tmp_path: Path) -> Store:
    """One curated round: a1 and a2 pass, a3 fails."""
    store = Store(tmp_path / "s.duckdb")
    trajectories = [
        # the answers state what the read returned (a clean pass must tell the user something)
        make_trajectory("a1", [[GOOD]], final="Order W1 is delivered."),
        make_trajectory("a2", [[BAD], [GOOD]], final="Found it after a retry: W1 is delivered."),
        make_trajectory("a3", [[BAD]], final="Sorry, no luck."),
    ]
    write_round(store, trajectories, verdicts_for({"a1": True, "a2": True, "a3": False}))
    curate_round(store, RUN, 0, embedder=hash_embedder())
    return store


def test_a_rounds_data_is_the_verified_selection_and_its_row_the_runs_figures(
    curated: Store,
) -> None:
    rows = round_rows(curated, RUN)
    assert rows and all(r.verdict for r in rows)  # never a failed trajectory
    assert {r.id for r in rows} <= {"a1", "a2"}
    assert round_rows(curated, "run-without-selection") == []
    policy = PolicyRef(path="/m/model", gguf="/m/model.f16.gguf", model_id="model_p")
    row = _round_row(curated, loop="loop_x", round_index=1, run_id=RUN, policy=policy,
                     trained="model_next", n_rollout=len(rows), n_gold=0)  # fmt: skip
    assert (row["n_passed"], row["n_counted"]) == (2, 3)
    assert row["pass_rate"] == pytest.approx(2 / 3)
    stats = curated.query("SELECT domain_entropy, reasoning_mode_entropy FROM round_stats")[0]
    assert row["domain_entropy"] == stats["domain_entropy"]
    assert row["reasoning_mode_entropy"] == stats["reasoning_mode_entropy"]
    assert (row["policy_model_id"], row["trained_model_id"]) == ("model_p", "model_next")
    assert row["improve_key"] == "loop_x:1"


def test_a_loop_with_nothing_to_train_on_stops_with_one_line(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    synthesized: list[RunConfig] = []
    with pytest.raises(InputError, match=r"round 0: run run_\w+ has no verified trajectory"):
        expert_iteration(
            RunConfig(tasks=1, seed=4),
            store=store,
            rounds=2,
            sft=smoke_sft(),
            work_dir=tmp_path / "work",
            synthesize=synthesized.append,  # a run that produced nothing
            gold=False,
        )
    assert [c.seed for c in synthesized] == [4]
    assert store.query("SELECT count(*) AS n FROM improve_rounds")[0]["n"] == 0
    with pytest.raises(InputError, match="at least 1"):
        expert_iteration(RunConfig(), store=store, rounds=0, sft=smoke_sft(),
                         work_dir=tmp_path, synthesize=synthesized.append)  # fmt: skip


def test_loop_ids_follow_the_config_rounds_and_sft() -> None:
    sft = smoke_sft()
    assert loop_id(RunConfig(), 2, sft) == loop_id(RunConfig(), 2, sft)
    assert loop_id(RunConfig(), 3, sft) != loop_id(RunConfig(), 2, sft)
    assert loop_id(RunConfig(seed=1), 2, sft) != loop_id(RunConfig(), 2, sft)
    assert loop_id(RunConfig(), 2, smoke_sft(max_steps=5)) != loop_id(RunConfig(), 2, sft)


def _loop_row(loop: str, round_index: int, when: datetime, rate: float) -> dict:
    return {
        "improve_key": f"{loop}:{round_index}", "loop_id": loop, "round": round_index,
        "run_id": RUN, "policy": "embedded" if round_index == 0 else "/m/model",
        "policy_model_id": None if round_index == 0 else "model_1",
        "trained_model_id": "model_1" if round_index == 0 else None,
        "n_trajectories": 4, "n_passed": int(4 * rate), "n_counted": 4, "pass_rate": rate,
        "domain_entropy": 0.69, "reasoning_mode_entropy": 0.5, "tokens_per_verified": 1200.0,
        "n_rollout_rows": 1, "n_gold_rows": 3, "created_at": when,
    }  # fmt: skip


def test_stats_shows_the_newest_loop_round_by_round(curated: Store) -> None:
    curated.insert(
        "improve_rounds",
        [
            _loop_row("loop_old", 0, datetime(2026, 1, 1), 0.0),
            _loop_row("loop_new", 1, datetime(2026, 1, 3), 0.5),
            _loop_row("loop_new", 0, datetime(2026, 1, 2), 0.25),
        ],
    )
    loop = collect_stats(curated, RUN)["improve"]
    assert [(r["loop_id"], r["round"], r["pass_rate"]) for r in loop] == [
        ("loop_new", 0, 0.25),
        ("loop_new", 1, 0.5),
    ]
    console = Console(width=200, record=True)
    console.print(improve_table(loop))
    text = console.export_text()
    assert "25.0%" in text and "50.0%" in text and "1 + 3" in text and "model_1" in text
