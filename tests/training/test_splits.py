"""Held-out splits: nothing of an eval task (nor its tool path + constraints) is trained on."""

from __future__ import annotations

import pytest

from trajsynth.schemas import Blueprint, InputError
from trajsynth.training.splits import (
    LeakageError,
    SplitKind,
    Stratum,
    TaskKey,
    check_no_leakage,
    make_split,
    task_key,
)


def blueprint(
    task_id: str,
    cluster: str,
    seed: int,
    path: list[str],
    order: str,
    *,
    goal: str | None = None,
    entity: str | None = None,
) -> Blueprint:
    calls = [{"tool": t, "arguments": {"id": entity}, "observation": {}} for t in path]
    return Blueprint.model_validate(
        {
            "blueprint_id": task_id,
            "cluster_id": cluster,
            "domain": "retail",
            "cell": {
                "cluster_id": cluster,
                "path_shape": "chain",
                "target_mode": "direct_execute",
                "difficulty": "easy",
            },
            "initial_state_id": f"s{seed}",
            "tool_path": [{"tool": t} for t in path],
            "persona": "p",
            "goal": goal or f"goal {task_id}",
            "gold_run": {
                "calls": calls if entity else [],
                "final_state": {"state_hash": "h"},
                "initial_state_hash": "h0",
            },
            "constraints": [
                {"kind": "tool_called", "call": {"tool": path[-1], "matchers": {"id": order}}}
            ],
            "seed": seed,
        }
    )


def test_same_path_and_constraints_share_a_signature_whatever_the_words_and_seed() -> None:
    a = task_key(blueprint("a", "shop", 1, ["search", "buy"], "W1"))
    b = task_key(blueprint("b", "shop", 9, ["search", "buy"], "W1"))
    c = task_key(blueprint("c", "shop", 9, ["search", "buy"], "W2"))
    d = task_key(blueprint("d", "shop", 9, ["buy"], "W1"))
    assert a.signature == b.signature
    assert len({a.signature, c.signature, d.signature}) == 3


def test_heldout_seeds_drops_seen_seeds_same_signature_and_unseen_clusters() -> None:
    train = [
        task_key(blueprint("t1", "shop", 1, ["search", "buy"], "W1")),
        task_key(blueprint("t2", "bank", 2, ["balance"], "A1")),
    ]
    candidates = [
        task_key(blueprint("e1", "shop", 5, ["search", "buy"], "W7")),  # kept
        task_key(blueprint("e2", "shop", 6, ["search", "buy"], "W1")),  # same path+constraints
        task_key(blueprint("e3", "shop", 1, ["buy"], "W3")),  # a training seed
        task_key(blueprint("e4", "travel", 7, ["book"], "F1")),  # cluster never trained on
        task_key(blueprint("t2", "bank", 8, ["balance"], "A9")),  # the training task's own id
    ]
    split = make_split("heldout", SplitKind.HELDOUT_SEEDS, candidates, train)
    assert split.eval_ids == ["e1"]
    assert set(split.dropped) == {"e2", "e3", "t2"}
    assert "same tool path and constraints" in split.dropped["e2"]
    check_no_leakage([k for k in candidates if k.task_id in split.eval_ids], train)
    with pytest.raises(LeakageError, match="eval task e2 leaks"):
        check_no_leakage(candidates[:2], train)


def test_leave_one_cluster_out_keeps_only_that_cluster_and_refuses_training_on_it() -> None:
    train = [task_key(blueprint("t1", "shop", 1, ["search", "buy"], "W1"))]
    candidates = [
        task_key(blueprint("e1", "bank", 5, ["balance"], "A1")),
        task_key(blueprint("e2", "shop", 5, ["buy"], "W3")),
    ]
    split = make_split("loco-bank", "loco", candidates, train, cluster="bank")
    assert split.eval_ids == ["e1"] and split.cluster == "bank"
    with pytest.raises(LeakageError, match="held-out cluster 'shop'"):
        make_split("loco-shop", "loco", candidates, train, cluster="shop")


def test_a_split_with_no_tasks_is_one_clear_error() -> None:
    train = [TaskKey(task_id="t1", cluster_id="shop", seed=1, signature="x")]
    with pytest.raises(InputError, match=r"split 'held' \(heldout-seeds\) has no tasks"):
        make_split("held", "heldout-seeds", [], train)
    with pytest.raises(InputError, match="needs a cluster"):
        make_split("l", "loco", [], train)


def test_the_same_exercise_under_other_checks_leaks_on_its_path_words_or_entities() -> None:
    train = [
        task_key(
            blueprint("t1", "shop", 1, ["search", "buy"], "W1", goal="Buy the mat.", entity="P1")
        )
    ]
    # other constraints (another signature) each time, but the same exercise:
    same_words = blueprint("e1", "shop", 5, ["search", "buy"], "W2", goal="buy the MAT!",
                           entity="P9")  # fmt: skip
    same_entities = blueprint("e2", "shop", 6, ["search", "buy"], "W3", goal="Get it.",
                              entity="P1")  # fmt: skip
    # new: same path, other words and entities; or another path with the same words
    new_entities = blueprint("e3", "shop", 7, ["search", "buy"], "W4", goal="Get a lamp.",
                             entity="P2")  # fmt: skip
    other_path = blueprint("e4", "shop", 8, ["buy"], "W5", goal="Buy the mat.", entity="P1")
    keys = [task_key(b) for b in (same_words, same_entities, new_entities, other_path)]
    assert len({k.signature for k in keys} | {train[0].signature}) == 5
    split = make_split("held", "heldout-seeds", keys, train)
    assert split.eval_ids == ["e3", "e4"]
    assert "same words" in split.dropped["e1"] and "same entities" in split.dropped["e2"]
    assert split.strata == {"e3": Stratum.NEW_ENTITIES, "e4": Stratum.PATH_DISJOINT}


def test_a_one_stratum_split_keeps_only_its_stratum() -> None:
    train = [task_key(blueprint("t1", "shop", 1, ["search", "buy"], "W1", entity="P1"))]
    keys = [
        task_key(blueprint("e1", "shop", 5, ["search", "buy"], "W2", entity="P2")),
        task_key(blueprint("e2", "shop", 6, ["buy"], "W3", entity="P3")),
    ]
    assert make_split("n", "new-entities", keys, train).eval_ids == ["e1"]
    assert make_split("p", "path-disjoint", keys, train).eval_ids == ["e2"]
    loco = make_split("l", "loco", [task_key(blueprint("x", "bank", 2, ["pay"], "A"))], train,
                      cluster="bank")  # fmt: skip
    assert loco.strata == {"x": Stratum.LOCO}


def test_a_key_written_before_lineage_is_checked_on_id_and_signature() -> None:
    old = TaskKey(task_id="t1", cluster_id="shop", seed=1, signature="sig")
    new = task_key(blueprint("e1", "shop", 5, ["search"], "W", entity="P1"))
    assert make_split("h", "heldout-seeds", [new], [old]).eval_ids == ["e1"]
    with pytest.raises(LeakageError, match="same tool path and constraints"):
        check_no_leakage([new.model_copy(update={"signature": "sig"})], [old])
