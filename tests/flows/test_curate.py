"""Curation wired to the store: hand-built rollout sets give the exact stored rows."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
from fakes.store_rows import RUN, hash_embedder, write_round
from fakes.trajectories import call, make_trajectory, make_verdict, verdicts_for

from trajsynth.flows.curate import curate_round, embedding_model_id, next_weights
from trajsynth.schemas import CurationConfig, SFTSelectConfig
from trajsynth.store import Store

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOL = 1e-4
ORDER = {"order_id": "W1", "status": "delivered"}
GOOD = call("get_order", {"order_id": "W1"}, ORDER)
BAD = call("get_order", {"order_id": "X9"}, "no such order", error="not_found")


def methods_example():
    """docs/methods.md §8: r1, r2: A→B→C; r3: A→E→B→C; r4: A→E→F (r2 words differ from r1's,
    so it is not an exact duplicate and the §8 greedy decides it)."""
    trajectories = [
        make_trajectory("r1", [[GOOD]]),
        make_trajectory("r2", [[GOOD]], final="Order W1 was delivered yesterday, all fine."),
        make_trajectory("r3", [[BAD], [GOOD]]),
        make_trajectory("r4", [[BAD]], final="Sorry, I could not find it."),
    ]
    # r3 fails a call and corrects it: the verifier records that recovery
    outcomes = {"r1": True, "r2": True, "r3": True, "r4": False}
    return trajectories, verdicts_for(outcomes, recovered=["r3"])


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path / "synth.duckdb")


def by_item(store: Store, kind: str) -> dict[str, dict]:
    rows = store.query("SELECT * FROM selections WHERE kind = ?", [kind])
    return {r["item_id"]: r for r in rows}


def test_methods_example_rows(store: Store) -> None:
    write_round(store, *methods_example())
    report = curate_round(store, RUN, 0, embedder=hash_embedder())
    assert (report.n_trajectories, report.n_verified, report.n_tasks) == (4, 3, 1)
    (task,) = store.query("SELECT * FROM task_topology")
    assert task["task_id"] == "task-1" and task["run_id"] == RUN and task["round"] == 0
    assert task["pass_rate"] == pytest.approx(0.75, abs=TOL)
    assert task["error_branch_ratio"] == pytest.approx(0.5, abs=TOL)
    assert task["strategy_entropy_norm"] == pytest.approx(0.75, abs=TOL)
    assert task["rl_score"] == pytest.approx(0.46875, abs=TOL)
    assert (
        task["n_success_strategies"],
        task["shortest_success_len"],
        task["n_branch_points"],
    ) == (1, 2, 2)
    assert task["in_rl_pool"] is True
    kinds = sorted(n["kind"] for n in task["graph"]["nodes"])
    assert kinds == ["error", "fail", "start", "state", "success"]  # r1, r2, r3 merge on B
    assert len(task["graph"]["edges"]) == 5
    topo = {r["trajectory_id"]: r for r in store.query("SELECT * FROM trajectory_topology")}
    assert (topo["r3"]["recovered"], topo["r3"]["n_recovered"], topo["r3"]["efficiency"]) == (
        True,
        1,
        1.0,
    )
    assert topo["r1"]["signature"] == topo["r2"]["signature"] != topo["r3"]["signature"]
    assert topo["r4"]["efficiency"] is None and topo["r4"]["success"] is False
    sft = by_item(store, "sft")
    assert (sft["r3"]["selected"], sft["r3"]["rank"], sft["r3"]["score"]) == (True, 1, 2.5)
    assert (sft["r1"]["selected"], sft["r1"]["rank"], sft["r1"]["score"]) == (True, 2, 1.5)
    assert sft["r2"]["selected"] is False and sft["r2"]["score"] == pytest.approx(1.0)
    assert sft["r2"]["reason"].startswith("repeated signature")
    assert sft["r4"]["reason"] == "verdict failed"
    assert sft["r3"]["components"] == {"rec": 1.0, "eff": 1.0, "novelty": 1.0}
    rl = by_item(store, "rl")
    assert rl["task-1"]["selected"] is True and rl["task-1"]["score"] == pytest.approx(0.46875)
    scores = {r["trajectory_id"]: r for r in store.query("SELECT * FROM scores")}
    assert scores["r3"]["recovered"] is True and scores["r3"]["sft_score"] == 2.5
    assert scores["r3"]["rule_label"] == "recover_after_error"
    assert {r["trajectory_id"] for r in store.query("SELECT * FROM signals")} == {
        "r1", "r2", "r3", "r4"
    }  # fmt: skip
    (sig3,) = store.query("SELECT failure, failure_rate FROM signals WHERE trajectory_id='r3'")
    assert sig3["failure"] is True and sig3["failure_rate"] == pytest.approx(0.5)
    (stats,) = store.query("SELECT * FROM round_stats")
    assert stats["round_key"] == f"{RUN}:0"
    assert stats["error_branch_ratio"] == pytest.approx(0.5)
    assert stats["n_recovered"] == 1 and stats["n_sft_selected"] == 2
    assert stats["pass_rate"] == pytest.approx(0.75)
    assert stats["report"]["n"] == 3  # accepted: r1, r2, r3
    assert stats["domain_entropy"] == 0.0  # one domain
    assert stats["action_complexity"] == pytest.approx(report.cumulative.cac_mean)


@pytest.mark.slow  # several seconds: planning, processes or a full round
def test_curating_twice_adds_nothing_and_new_rollouts_replace_the_round(store: Store) -> None:
    trajectories, verdicts = methods_example()
    write_round(store, trajectories, verdicts)
    embed = hash_embedder()
    first = curate_round(store, RUN, 0, embedder=embed)
    counts = store.counts()
    again = curate_round(store, RUN, 0, embedder=embed)
    assert again.reused and again.rows_added == 0
    assert store.counts() == counts
    assert again.n_sft_selected == first.n_sft_selected
    # a resumed run adds a rollout: the round is re-derived, never duplicated
    extra = make_trajectory("r5", [[BAD], [BAD], [GOOD]], final="W1 is delivered, done now.")
    write_round(store, [extra], {"r5": make_verdict("r5", True)})
    third = curate_round(store, RUN, 0, embedder=embed)
    assert not third.reused and third.n_trajectories == 5
    assert store.counts()["selections"] == 6  # 5 sft + 1 rl, no stale rows
    assert store.counts()["round_stats"] == 1
    # texts already embedded come from the store's cache
    assert third.n_embed_cached >= 3


def test_bad_input_gets_defined_values_or_reasons(store: Store) -> None:
    no_calls = make_trajectory("quiet", [], task_id="t-quiet", final="I cannot help with that.")
    silent = make_trajectory("blank", [], task_id="t-blank", final=None, closing=None)
    # what a tool result with broken UTF-8 becomes once decoded, plus control characters
    weird = "caf\x00\x07 " + "x" * 200_000 + " \ufffd\ufffd"
    big = make_trajectory("big", [[GOOD]], task_id="t-big", final=weird)
    boom = make_trajectory("boom", [[GOOD]], task_id="t-boom", final="BOOM please")
    unverified = make_trajectory("nov", [[GOOD]], task_id="t-big", final="Delivered.")
    trajectories = [no_calls, silent, big, boom, unverified]
    verdicts = verdicts_for({"quiet": True, "blank": False, "big": True, "boom": True})
    write_round(store, trajectories, verdicts)

    inner = hash_embedder()

    def picky(texts):
        if any("boom" in t.lower() for t in texts):
            raise ValueError("cannot embed this")
        return inner(texts)

    report = curate_round(store, RUN, 0, embedder=picky)
    assert report.n_trajectories == 5 and report.n_tasks == 4
    scores = {r["trajectory_id"]: r for r in store.query("SELECT * FROM scores")}
    assert scores["quiet"]["action_complexity"] == 0.0 and scores["quiet"]["n_steps"] == 0
    assert report.skips["blank"] == "no embedding: empty text"
    assert report.skips["boom"].startswith("no embedding: embedder rejected the text")
    assert "t-quiet" in report.skips  # one rollout: EBR and H_strat are 0
    tasks = {r["task_id"]: r for r in store.query("SELECT * FROM task_topology")}
    assert (
        tasks["t-quiet"]["error_branch_ratio"] == 0.0
        and tasks["t-quiet"]["strategy_entropy_norm"] == 0.0
    )
    rl = by_item(store, "rl")
    assert rl["t-quiet"]["selected"] is False and "fewer than 2" in rl["t-quiet"]["reason"]
    sft = by_item(store, "sft")
    assert sft["nov"]["selected"] is False and "no verdict" in sft["nov"]["reason"]
    assert sft["big"]["selected"] is True  # its huge, dirty answer was cut and cleaned
    assert sft["quiet"]["selected"] is True  # a no-call answer can still be a good example
    # the embedder saw each text cut to embed_max_chars and without control characters
    assert all(len(t) <= 256 and "\x00" not in t for batch in inner.calls for t in batch)


def test_empty_round_gives_zero_figures(store: Store) -> None:
    write_round(store, *methods_example())
    report = curate_round(store, RUN, 3, embedder=hash_embedder())
    assert gc.isenabled()  # the collector paused for the round runs again
    assert report.n_trajectories == 0 and report.skips["round"].startswith("empty round")
    assert report.diversity.n == 0 and "empty round" in report.diversity.notes[0]
    (row,) = store.query("SELECT * FROM round_stats WHERE round = 3")
    assert row["n_trajectories"] == 0 and row["error_branch_ratio"] == 0.0


def test_sft_selection_respects_budgets_and_never_picks_unverified(store: Store) -> None:
    rng = np.random.default_rng(0)
    trajectories, verdicts = [], {}
    for task in range(4):
        for i in range(4):
            tid = f"t{task}-r{i}"
            failed_first = int(rng.integers(0, 2))
            turns = [[BAD]] * failed_first + [[GOOD]] * (1 + i)
            trajectories.append(
                make_trajectory(tid, turns, task_id=f"task{task}", final=f"Answer {tid} done.")
            )
            if i != 3:  # r3 of every task has no verdict at all
                # a failed call then corrected: the verifier records the recovery
                verdicts[tid] = make_verdict(tid, passed=i != 2, recovered=bool(failed_first))
    write_round(store, trajectories, verdicts)
    cfg = CurationConfig(sft=SFTSelectConfig(k_sft=1, max_total=3), embeddings=False)
    report = curate_round(store, RUN, 0, cfg)
    picked = store.query("SELECT item_id, task_id FROM selections WHERE kind='sft' AND selected")
    assert len(picked) == report.n_sft_selected == 3
    assert len({p["task_id"] for p in picked}) == 3  # k_sft = 1 per task
    verified = {tid for tid, v in verdicts.items() if v.passed}
    assert {p["item_id"] for p in picked} <= verified
    reasons = {r["item_id"]: r["reason"] for r in store.query("SELECT * FROM selections")}
    assert all("no verdict" in reasons[f"t{k}-r3"] for k in range(4))
    assert any("max_total=3" in r for r in reasons.values())
    # embeddings off: rule labels are the modes, no embedder was loaded
    assert store.query("SELECT count(*) AS n FROM embeddings")[0]["n"] == 0
    assert store.query("SELECT DISTINCT kind FROM mode_codebooks")[0]["kind"] == "rules"


def test_next_weights_stores_every_change_with_its_reason(store: Store) -> None:
    trajectories, verdicts = methods_example()
    write_round(store, trajectories, verdicts, domains={"shop": "retail", "air": "travel"})
    curate_round(store, RUN, 0, embedder=hash_embedder())
    weights = next_weights(store, RUN, 0)
    assert weights is not None and weights.round == 1
    assert sum(weights.weights["domain"].values()) == pytest.approx(1.0)
    # travel has no accepted data yet: rarity moves weight toward it
    assert weights.weights["domain"]["travel"] > weights.weights["domain"]["retail"]
    rows = store.query("SELECT * FROM evolution WHERE level = 'domain' ORDER BY option")
    assert [r["option"] for r in rows] == ["retail", "travel"]
    assert all(r["round"] == 1 and r["reason"] for r in rows)
    assert rows[1]["reason"] == "rarity" and rows[1]["weight_new"] > rows[1]["weight_old"]
    n = store.counts()["evolution"]
    next_weights(store, RUN, 0)
    assert store.counts()["evolution"] == n  # recomputing replaces, never duplicates
    assert next_weights(store, RUN, 0, CurationConfig(evolution=False)) is None


@pytest.mark.slow
def test_minilm_embeddings_are_computed_once_and_cached(store: Store) -> None:
    trajectories, verdicts = methods_example()
    write_round(store, trajectories, verdicts)
    first = curate_round(store, RUN, 0)
    assert first.n_embedded == 4 and first.n_embed_cached == 0
    (row,) = store.query("SELECT model, len(vector) AS d FROM embeddings LIMIT 1")
    assert row["model"] == embedding_model_id(CurationConfig()) and row["d"] == 384
    assert row["model"].startswith("all-MiniLM-L6-v2@64")
    # the same texts in a later round come from the store
    later = [t.model_copy(update={"trajectory_id": f"{t.trajectory_id}b"}) for t in trajectories]
    write_round(
        store, later, {f"{k}b": v.model_copy(update={"trajectory_id": f"{k}b",
                                                     "verdict_id": f"v-{k}b"})
                       for k, v in verdicts.items()}, round=1,
    )  # fmt: skip
    second = curate_round(store, RUN, 1)
    assert second.n_embedded == 0 and second.n_embed_cached == 4
