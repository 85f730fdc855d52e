"""Dual selection: SFT trajectories and RL tasks (docs/methods.md §8)."""

from __future__ import annotations

import pytest
from fakes.trajectories import call, make_trajectory, make_verdict, verdicts_for
from hypothesis import given, settings
from hypothesis import strategies as st

from trajsynth.curation.select import (
    get_policy,
    novelty,
    registered_policies,
    select_rl,
    select_sft,
)
from trajsynth.curation.signals import compute_signals
from trajsynth.curation.topology import build_quotient_graph, task_metrics, trajectory_metrics
from trajsynth.schemas import (
    RLSelectConfig,
    SelectionKind,
    SFTSelectConfig,
    Signals,
    TaskTopology,
    Termination,
    TrajectoryTopology,
)

TOL = 1e-4
GOOD = call("get_order", {"order_id": "W1"}, {"order_id": "W1", "status": "delivered"})
BAD = call("get_order", {"order_id": "X9"}, "no such order", error="not_found")


def example_pool():
    trajectories = [
        make_trajectory("r1", [[GOOD]]),
        make_trajectory("r2", [[GOOD]]),
        make_trajectory("r3", [[BAD], [GOOD]]),
        make_trajectory("r4", [[BAD]], final="Sorry."),
    ]
    # r3 fails a call and corrects it: the verifier records that recovery
    verdicts = verdicts_for({"r1": True, "r2": True, "r3": True, "r4": False}, recovered=["r3"])
    graph = build_quotient_graph(trajectories, verdicts)
    signals = {
        t.trajectory_id: compute_signals(t, verdict=verdicts[t.trajectory_id]) for t in trajectories
    }
    return graph, verdicts, signals


def by_item(records):
    return {r.item_id: r for r in records}


def test_policies_are_registered() -> None:
    assert registered_policies() == ["rl", "sft"]
    assert get_policy("sft") is select_sft


def test_methods_example_sft_picks_r3_then_r1_not_r2() -> None:
    graph, verdicts, signals = example_pool()
    records = select_sft(trajectory_metrics(graph), verdicts, signals, round=3)
    picked = [r for r in records if r.selected]
    assert [r.item_id for r in picked] == ["r3", "r1"]
    assert [r.rank for r in picked] == [1, 2]
    assert picked[0].score == pytest.approx(2.5, abs=TOL)
    assert picked[1].score == pytest.approx(1.5, abs=TOL)
    assert picked[0].components == {"rec": 1.0, "eff": 1.0, "novelty": 1.0}
    r = by_item(records)
    assert not r["r2"].selected and r["r2"].score == pytest.approx(1.0, abs=TOL)
    assert "repeated signature" in r["r2"].reason
    assert not r["r4"].selected and r["r4"].reason == "verdict failed"
    assert all(
        x.kind is SelectionKind.SFT and x.round == 3 and x.task_id == "task-1" for x in records
    )
    assert len({x.selection_id for x in records}) == 4


def test_methods_example_rl_score_and_pool() -> None:
    graph, _, _ = example_pool()
    m = task_metrics(graph)
    (record,) = select_rl([m], round=1)
    assert record.selected and record.kind is SelectionKind.RL and record.item_id == "task-1"
    assert record.score == pytest.approx(0.46875, abs=TOL)
    assert record.components["ebr"] == pytest.approx(0.5, abs=TOL)


def test_sft_never_picks_an_unverified_trajectory() -> None:
    graph, verdicts, signals = example_pool()
    topo = trajectory_metrics(graph)
    del verdicts["r3"]
    records = by_item(select_sft(topo, verdicts, signals))
    assert not records["r3"].selected and "no verdict" in records["r3"].reason
    excluded = {**verdicts, "r1": make_verdict("r1", True, excluded=True)}
    records = by_item(select_sft(topo, excluded, signals))
    assert not records["r1"].selected and "excluded" in records["r1"].reason
    assert records["r2"].selected


def test_sft_drops_loop_exhaustion_duplicates_and_missing_signals() -> None:
    graph, verdicts, signals = example_pool()
    topo = trajectory_metrics(graph)
    flagged = {
        **signals,
        "r3": signals["r3"].model_copy(update={"loop": True, "repetition_instances": 3}),
        "r1": signals["r1"].model_copy(update={"exhaustion": True}),
    }
    r = by_item(select_sft(topo, verdicts, flagged))
    assert "loop" in r["r3"].reason and r["r1"].reason == "budget exhausted"
    assert r["r2"].selected
    r = by_item(select_sft(topo, verdicts, signals, duplicates={"r3": "r1", "r1": "r1"}))
    assert r["r3"].reason == "near-duplicate of r1" and r["r1"].selected
    missing = {k: v for k, v in signals.items() if k != "r1"}
    assert by_item(select_sft(topo, verdicts, missing))["r1"].reason == "no signals row"


def test_sft_budgets_per_task_and_total() -> None:
    graph, verdicts, signals = example_pool()
    topo = trajectory_metrics(graph)
    one = by_item(select_sft(topo, verdicts, signals, config=SFTSelectConfig(k_sft=1)))
    assert [k for k, v in one.items() if v.selected] == ["r3"]
    assert "k_sft=1" in one["r1"].reason
    other = [
        t.model_copy(update={"task_id": "task-2", "trajectory_id": f"b{t.trajectory_id}"})
        for t in topo
    ]
    v2 = {**verdicts, **{f"b{k}": v for k, v in verdicts.items()}}
    s2 = {**signals, **{f"b{k}": v for k, v in signals.items()}}
    records = select_sft([*topo, *other], v2, s2, config=SFTSelectConfig(max_total=3))
    picked = [r for r in records if r.selected]
    assert len(picked) == 3
    assert sorted(r.item_id for r in picked) == ["br1", "br3", "r3"]  # by score, then id
    assert any("max_total=3" in r.reason for r in records if not r.selected)
    assert select_sft([], {}, {}) == []


def test_sft_mode_novelty_when_signatures_may_repeat() -> None:
    graph, verdicts, signals = example_pool()
    topo = trajectory_metrics(graph)
    modes = {"r1": "direct_execute", "r2": "verify_after_write", "r3": "recover_after_error"}
    cfg = SFTSelectConfig(k_sft=3, distinct_signatures=False)
    records = by_item(select_sft(topo, verdicts, signals, modes=modes, config=cfg))
    assert records["r2"].selected and records["r2"].components["novelty"] == 0.5
    assert records["r2"].score == pytest.approx(1.25, abs=TOL)
    same_mode = {**modes, "r2": "direct_execute"}
    records = by_item(select_sft(topo, verdicts, signals, modes=same_mode, config=cfg))
    assert not records["r2"].selected and "repeated signature" in records["r2"].reason
    assert novelty("a", None, []) == 1.0 and novelty("a", "m", [("a", "m")]) == 0.0


def _task(task_id: str, n: int, p: float | None, ebr: float = 0.0, h: float = 0.0) -> TaskTopology:
    score = 0.0 if p is None else 4 * p * (1 - p) * (ebr + h) / 2
    return TaskTopology(
        task_id=task_id,
        n_rollouts=n,
        pass_rate=p,
        error_branch_ratio=ebr,
        strategy_entropy_norm=h,
        rl_score=score,
    )


def test_rl_pool_fraction_and_reasons() -> None:
    tasks = [
        _task("all-pass", 4, 1.0, 0.2, 0.5),
        _task("all-fail", 4, 0.0, 0.5, 0.5),
        _task("single", 1, 1.0),
        _task("none", 0, None),
        _task("a", 4, 0.5, 0.5, 0.5),  # 0.5
        _task("b", 4, 0.75, 0.5, 0.75),  # 0.46875
        _task("c", 4, 0.25, 0.0, 0.2),  # 0.075
    ]
    records = select_rl(tasks, round=2)
    r = by_item(records)
    assert [x.item_id for x in records if x.selected] == ["a", "b"]  # ceil(0.5 * 3) = 2
    assert (r["a"].rank, r["b"].rank, r["c"].rank) == (1, 2, 3)
    assert "below the top rl_fraction" in r["c"].reason
    assert "p=1" in r["all-pass"].reason and "p=0" in r["all-fail"].reason
    assert "fewer than 2" in r["single"].reason and "no valid rollout" in r["none"].reason
    assert len(records) == len(tasks) and all(x.round == 2 for x in records)
    capped = by_item(select_rl(tasks, config=RLSelectConfig(rl_fraction=1.0, max_tasks=1)))
    assert [k for k, v in capped.items() if v.selected] == ["a"]
    assert "max_tasks=1" in capped["b"].reason
    assert select_rl([]) == []


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["t1", "t2", "t3"]),
            st.booleans(),  # verdict passed
            st.booleans(),  # has verdict
            st.sampled_from(["s1", "s2", "s3"]),
            st.booleans(),  # rec
            st.floats(0.1, 1.0),  # eff
            st.booleans(),  # loop
        ),
        max_size=25,
    ),
    st.integers(0, 3),
    st.one_of(st.none(), st.integers(0, 5)),
)
def test_sft_respects_budgets_and_verdicts(rows, k, max_total) -> None:
    topo, verdicts, signals = [], {}, {}
    for i, (task, passed, has_verdict, sig, rec, eff, loop) in enumerate(rows):
        tid = f"x{i}"
        topo.append(
            TrajectoryTopology(
                trajectory_id=tid,
                task_id=task,
                success=passed,
                signature=sig,
                recovered=rec and passed,
                efficiency=eff if passed else None,
            )
        )
        if has_verdict:
            verdicts[tid] = make_verdict(tid, passed)
        signals[tid] = Signals(trajectory_id=tid, loop=loop)
    records = select_sft(
        topo, verdicts, signals, config=SFTSelectConfig(k_sft=k, max_total=max_total)
    )
    assert len(records) == len(rows)
    picked = [r for r in records if r.selected]
    for r in picked:
        assert r.item_id in verdicts and verdicts[r.item_id].passed
        assert not signals[r.item_id].loop
    for task in {r.task_id for r in picked}:
        mine = [r for r in picked if r.task_id == task]
        assert len(mine) <= k
        sigs = [next(t.signature for t in topo if t.trajectory_id == r.item_id) for r in mine]
        assert len(set(sigs)) == len(sigs)
    if max_total is not None:
        assert len(picked) <= max_total


def test_end_to_end_from_trajectories() -> None:
    """Signals, topology and both selections from one hand-built round with bad inputs in it."""
    ts = [
        make_trajectory("ok", [[GOOD]], task_id="A"),
        make_trajectory("loop", [[BAD]] * 5 + [[GOOD]], task_id="A"),
        make_trajectory("budget", [[GOOD]], task_id="A", termination=Termination.MAX_TURNS),
        make_trajectory("fail", [[BAD]], task_id="A", final="Sorry."),
        make_trajectory("solo", [], task_id="B"),
    ]
    verdicts = verdicts_for({"ok": True, "loop": True, "budget": True, "fail": False, "solo": True})
    signals = {t.trajectory_id: compute_signals(t, verdict=verdicts[t.trajectory_id]) for t in ts}
    assert signals["loop"].loop and signals["budget"].exhaustion
    topo, tasks = [], []
    for task in ("A", "B"):
        graph = build_quotient_graph([t for t in ts if t.blueprint_id == task], verdicts)
        topo += trajectory_metrics(graph)
        tasks.append(task_metrics(graph))
    sft = by_item(select_sft(topo, verdicts, signals))
    assert {k for k, v in sft.items() if v.selected} == {"ok", "solo"}
    rl = by_item(select_rl(tasks))
    assert rl["A"].selected and not rl["B"].selected


def test_sft_never_picks_a_failure_signal_without_a_recovery() -> None:
    """Signals that say failure (failed calls) admit a trajectory only when the verifier
    recorded a genuine recovery (every failed call corrected later)."""
    graph, verdicts, signals = example_pool()
    topo = trajectory_metrics(graph)
    assert signals["r3"].failure and verdicts["r3"].recovered
    unrecovered = {**verdicts, "r3": verdicts["r3"].model_copy(update={"recovered": False})}
    r = by_item(select_sft(topo, unrecovered, signals))
    assert not r["r3"].selected
    assert r["r3"].reason.startswith("failure signal without a recovery (failure rate 0.50)")
    assert by_item(select_sft(topo, verdicts, signals))["r3"].selected
