"""The dashboard's evals section: stored held-out evals read back newest first, with their
intervals and the trained model's parent."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from trajsynth.dashboards import queries
from trajsynth.schemas.evals import TryResult
from trajsynth.store import Store
from trajsynth.training.eval import summarize
from trajsynth.training.records import eval_row, model_row


def _tries(outcomes: list[bool]) -> list[TryResult]:
    return [
        TryResult(
            task_id=f"t{i}",
            cluster_id="shop",
            sample=0,
            passed=p,
            score=float(p),
            excluded=False,
        )  # fmt: skip
        for i, p in enumerate(outcomes)
    ]


def test_evals_newest_first_with_intervals_and_the_models_parent(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    model = model_row(
        path="out/model", parent="embedded", method="sft-lora", run_ids=["run_a"], data="h",
        n_rows=4, n_tokens=900, config={}, metrics={}, gguf_path="out/model.f16.gguf",
    )  # fmt: skip
    base_tries, tuned_tries = _tries([True, False, False, False]), _tries([True, True, False, True])
    base = eval_row(
        policy="embedded", model_id=None, split="heldout-seeds", split_kind="heldout-seeds",
        summary=summarize(base_tries, k=1), tries=base_tries,
    )  # fmt: skip
    tuned = eval_row(
        policy="out/model.f16.gguf", model_id=model["model_id"], split="heldout-seeds",
        split_kind="heldout-seeds", summary=summarize(tuned_tries, k=1), tries=tuned_tries,
    )  # fmt: skip
    base["created_at"], tuned["created_at"] = datetime(2026, 1, 1), datetime(2026, 1, 2)
    assert queries.evals(store) == []  # no store file yet: nothing, not an error
    store.insert_many({"models": [model], "evals": [base, tuned]})

    rows = queries.evals(store)
    assert [r["policy"] for r in rows] == ["out/model.f16.gguf", "embedded"]
    newest, oldest = rows
    assert (newest["pass1"], oldest["pass1"]) == (0.75, 0.25)
    assert newest["pass1_low"] < 0.75 < newest["pass1_high"]  # Wilson, 4 tries
    assert newest["parent"] == "embedded" and oldest["parent"] is None
    assert (newest["n_tasks"], newest["n_tries"], newest["n_excluded"]) == (4, 4, 0)
    assert queries.evals(store, limit=1)[0]["eval_id"] == tuned["eval_id"]
    assert queries.evals(store, tables={"trajectories"}) == []  # a store from before evals
