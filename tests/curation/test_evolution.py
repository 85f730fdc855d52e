"""Adaptive evolution (docs/methods.md §6): the worked table, cap and floor, reasons, the
statistics from rollouts, the next round's weights and drawing cells level by level."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest

from trajsynth.curation.evolution import (
    LEVELS,
    EvolutionParams,
    level_alpha,
    level_weights,
    next_round_weights,
    option_stats,
    sample_cell,
    should_stop,
    validity_rate,
    water_fill_cap,
)
from trajsynth.schemas import (
    BlueprintAttempt,
    Cell,
    CellCatalog,
    Difficulty,
    DiversityReport,
    FailureClass,
    OptionStats,
    PathShape,
    ReasoningMode,
    RolloutOutcome,
    WeightReason,
)

TOL = 1e-4

# docs/methods.md §6 worked example: m = 4, alpha0 = 0.5, lambda = 1, H_norm = 0.8 (alpha 0.6),
# beta = 2, eta = 1, delta = 0, T = 2, eps_floor = 0.05, kappa = 1.4 (cap 0.35)
TABLE = {
    #     n    f    v     s        q        capped   p
    "A": (99, 0.1, 0.9, 0.06814, 0.14469, 0.15467, 0.15944),
    "B": (24, 0.5, 0.8, 0.23193, 0.26694, 0.28535, 0.28358),
    "C": (9, 0.0, 0.5, 0.12559, 0.19643, 0.20998, 0.21198),
    "D": (0, 0.0, 0.5, 0.50000, 0.39194, 0.35000, 0.34500),
}
TABLE_PARAMS = EvolutionParams(
    alpha0=0.5, lam=1.0, beta=2.0, eta=1.0, delta=0.0, temperature=2.0, eps_floor=0.05, kappa=1.4
)


def _table_rows():
    opts = [OptionStats(option=k, n=n, f=f, v=v) for k, (n, f, v, *_) in TABLE.items()]
    return level_weights(opts, 0.8, TABLE_PARAMS, level="cluster", round=3)


def test_worked_table_section_6() -> None:
    rows = _table_rows()
    assert [r.option for r in rows] == ["A", "B", "C", "D"]
    for r in rows:
        _, _, _, s, q, capped, p = TABLE[r.option]
        assert r.alpha == pytest.approx(0.6, abs=TOL)
        assert r.s == pytest.approx(s, abs=TOL)
        assert r.q == pytest.approx(q, abs=TOL)
        assert r.q_capped == pytest.approx(capped, abs=TOL)
        assert r.p_new == pytest.approx(p, abs=TOL)
        assert r.p_old == pytest.approx(0.25)
        assert (r.level, r.round, r.h_norm) == ("cluster", 3, 0.8)
    assert sum(r.p_new for r in rows) == pytest.approx(1.0)


def test_worked_table_reasons() -> None:
    reasons = {r.option: r.reason for r in _table_rows()}
    assert reasons == {
        "A": WeightReason.RARITY,  # 99 accepted: pushed down
        "B": WeightReason.INFORMATIVE_FAILURE,  # half its rollouts failed informatively
        "C": WeightReason.VALIDITY,  # half its blueprints are invalid
        "D": WeightReason.RARITY,  # never seen: pushed up (then capped)
    }
    d = next(r for r in _table_rows() if r.option == "D")
    assert d.contributions["cap"] == pytest.approx(math.log(0.35 / 0.39194), abs=TOL)
    assert d.contributions["rarity"] > 0


def test_alpha_sharpens_on_concentrated_axis() -> None:
    params = EvolutionParams()
    assert level_alpha(1.0, params) == pytest.approx(0.5)
    assert level_alpha(0.0, params) == pytest.approx(1.0)
    opts = [OptionStats(option="a", n=100), OptionStats(option="b", n=0)]
    spread = level_weights(opts, 1.0, params)[1].p_new
    concentrated = level_weights(opts, 0.0, params)[1].p_new
    assert concentrated > spread > 0.5


def test_water_fill_cap_repeats_until_none_exceeds() -> None:
    q = np.array([0.5, 0.3, 0.1, 0.05, 0.05])
    out = water_fill_cap(q, 0.3)
    assert out.sum() == pytest.approx(1.0)
    assert out.max() <= 0.3 + 1e-12
    # the second pass clips the option the first redistribution pushed over the cap
    assert out[:2].tolist() == pytest.approx([0.3, 0.3])
    assert out[2] / out[3] == pytest.approx(2.0)
    # a cap below uniform cannot be met: skipped
    assert water_fill_cap(q, 0.1).tolist() == q.tolist()
    assert water_fill_cap([], 0.5).size == 0


def test_floor_and_cap_reasons_and_defaults() -> None:
    # floor: a heavy floor lifts an option that rarity had nearly zeroed
    opts = [OptionStats(option="new", n=0), OptionStats(option="old", n=10_000)]
    rows = level_weights(opts, 1.0, EvolutionParams(eps_floor=0.9))
    assert rows[1].reason is WeightReason.FLOOR
    assert rows[1].p_new >= 0.45
    # cap: rarity and informative failure both push one option; the cap takes most back
    opts = [
        OptionStats(option="a", n=0, f=1.0),
        OptionStats(option="b", n=3),
        OptionStats(option="c", n=3),
    ]
    rows = level_weights(opts, 1.0, EvolutionParams(kappa=1.05))
    assert rows[0].reason is WeightReason.CAP
    assert rows[0].q_capped == pytest.approx(0.35)
    # identical options: uniform, nothing to explain
    same = level_weights([OptionStats(option=x) for x in "xyz"], 0.5)
    assert {r.reason for r in same} == {WeightReason.NONE}
    assert [r.p_new for r in same] == pytest.approx([1 / 3] * 3)
    assert level_weights([], 0.5) == []
    one = level_weights([OptionStats(option="only", n=5)], 0.0)
    assert one[0].p_new == pytest.approx(1.0) and one[0].reason is WeightReason.NONE


def test_difficulty_tilt_only_at_difficulty_level() -> None:
    opts = [OptionStats(option=d.value, bin=i) for i, d in enumerate(Difficulty)]
    tilted = level_weights(opts, 1.0, level="difficulty")
    assert [r.s for r in tilted] == pytest.approx([1.0 * 0.5, 1.25 * 0.5, 1.5 * 0.5])
    assert tilted[2].reason is WeightReason.DIFFICULTY
    assert tilted[0].p_new < tilted[1].p_new < tilted[2].p_new
    flat = level_weights(opts, 1.0, level="target_mode")
    assert len({round(r.p_new, 12) for r in flat}) == 1


def test_every_level_keeps_the_floor() -> None:
    opts = [OptionStats(option=str(i), n=10**i) for i in range(6)]
    rows = level_weights(opts, 0.0, EvolutionParams())
    assert min(r.p_new for r in rows) >= 0.05 / 6 - 1e-12
    assert sum(r.p_new for r in rows) == pytest.approx(1.0)
    assert max(r.q_capped for r in rows) <= 5 / 6 + 1e-12


# --- statistics and the next round --------------------------------------------------------

CATALOG = CellCatalog(
    clusters={"shop-01": "retail", "shop-02": "retail", "air-01": "travel"},
    shapes={
        "shop-01": [PathShape.SINGLE, PathShape.CHAIN],
        "shop-02": [PathShape.SINGLE],
        "air-01": [PathShape.SINGLE, PathShape.CHAIN, PathShape.FAN_OUT],
    },
)


def _cell(cluster: str, shape=PathShape.CHAIN, mode=ReasoningMode.DIRECT_EXECUTE, d="easy"):
    return Cell(cluster_id=cluster, path_shape=shape, target_mode=mode, difficulty=Difficulty(d))


def _outcome(i: int, cluster: str, **kw) -> RolloutOutcome:
    return RolloutOutcome(
        trajectory_id=f"t{i}",
        domain=CATALOG.clusters[cluster],
        cell=kw.pop("cell", _cell(cluster)),
        **kw,
    )


def test_option_stats_counts_informative_failures_only() -> None:
    last = [
        # mixed task: its failure teaches something
        _outcome(1, "shop-01", passed=False, failure_class=FailureClass.TOOL, task_pass_rate=0.5),
        _outcome(2, "shop-01", passed=True, task_pass_rate=0.5),
        # all-fail task with no error branches: not informative, still a valid rollout
        _outcome(3, "shop-01", passed=False, task_pass_rate=0.0, task_ebr=0.0),
        # infra never counts, not even in the denominator
        _outcome(4, "shop-01", passed=False, failure_class=FailureClass.INFRA, task_pass_rate=0.5),
        # all-fail but with error branches (EBR > 0): informative
        _outcome(5, "air-01", passed=False, failure_class=FailureClass.MODEL, task_ebr=0.4,
                 task_pass_rate=0.0),
    ]  # fmt: skip
    accepted = [_outcome(2, "shop-01", accepted=True, mode=ReasoningMode.CLARIFY_FIRST)]
    attempts = [
        BlueprintAttempt(attempt_id="a1", cluster_id="air-01", cell=_cell("air-01"), seed=0,
                         accepted=False, reason="unbindable param"),
        BlueprintAttempt(attempt_id="a2", cluster_id="air-01", cell=_cell("air-01"), seed=1,
                         accepted=True),
    ]  # fmt: skip
    stats = option_stats(CATALOG, accepted, last, attempts)
    shop = stats["cluster"]["shop-01"]
    assert (shop.failures, shop.rollouts, shop.f) == (1, 3, pytest.approx(1 / 3))
    assert stats["cluster"]["air-01"].f == 1.0
    assert stats["cluster"]["shop-02"].f == 0.0
    assert stats["cluster"]["air-01"].v == pytest.approx(validity_rate(1, 2)) == 0.5
    assert stats["cluster"]["shop-01"].v == 0.5  # no attempts: Laplace prior
    assert stats["domain"]["retail"].n == 1
    # the measured mode counts, not the target
    assert stats["target_mode"]["clarify_first"].n == 1
    assert stats["target_mode"]["direct_execute"].n == 0
    assert [s.bin for s in stats["difficulty"].values()] == [0, 1, 2]
    assert list(stats["domain"]) == ["retail", "travel"]  # domains with clusters


def test_next_round_weights_move_toward_the_rare_cluster() -> None:
    accepted = [_outcome(i, "shop-01", accepted=True) for i in range(40)]
    accepted += [_outcome(100, "air-01", accepted=True)]
    rw = next_round_weights(accepted, accepted, [], CATALOG, round=1)
    assert tuple(rw.weights) == LEVELS
    for lv, ws in rw.weights.items():
        if lv != "cluster":
            assert sum(ws.values()) == pytest.approx(1.0), lv
    retail = rw.weights["cluster"]["shop-01"] + rw.weights["cluster"]["shop-02"]
    assert retail == pytest.approx(1.0)  # within-domain at the cluster level
    assert rw.weights["cluster"]["shop-02"] > rw.weights["cluster"]["shop-01"]
    assert rw.weights["domain"]["travel"] > rw.weights["domain"]["retail"]
    assert rw.h_norm["cluster"] < 0.3
    shop2 = next(c for c in rw.changes if c.option == "shop-02")
    assert (shop2.level, shop2.parent, shop2.reason) == ("cluster", "retail", WeightReason.RARITY)
    assert len(rw.changes) == sum(len(ws) for ws in rw.weights.values())
    # the weights are what planning.cells.sample_cells reads
    from trajsynth.planning import cells

    assert cells.LEVELS == LEVELS


def test_next_round_weights_empty_round_is_uniform_and_previous_is_recorded() -> None:
    rw = next_round_weights([], [], [], CATALOG, round=0)
    assert rw.weights["domain"] == {"retail": 0.5, "travel": 0.5}
    assert {c.reason for c in rw.changes if c.level != "difficulty"} == {WeightReason.NONE}
    hard = next(c for c in rw.changes if c.option == "hard")
    assert hard.reason is WeightReason.DIFFICULTY and hard.p_new > 1 / 3  # the tilt alone
    assert rw.weights["target_mode"] == pytest.approx({m.value: 1 / 7 for m in ReasoningMode})
    later = next_round_weights(
        [_outcome(0, "air-01", accepted=True)], [], [], CATALOG, round=1, previous=rw,
        h_norm={"target_mode": 0.2},
    )  # fmt: skip
    assert later.h_norm["target_mode"] == 0.2
    row = next(c for c in later.changes if c.option == "air-01")
    assert row.p_old == pytest.approx(1.0)  # air-01 is alone in its domain
    dom = next(c for c in later.changes if c.option == "travel")
    assert dom.p_old == pytest.approx(0.5) and dom.p_new < 0.5


def test_sample_cell_draws_level_by_level_within_feasible_options() -> None:
    rw = next_round_weights([], [], [], CATALOG, round=0)
    weights = {lv: dict(ws) for lv, ws in rw.weights.items()}
    weights["domain"] = {"retail": 0.9, "travel": 0.1}
    weights["cluster"] = {"shop-01": 0.0, "shop-02": 1.0, "air-01": 1.0}
    rng = random.Random(7)
    cells = [sample_cell(weights, rng, CATALOG) for _ in range(2000)]
    by_cluster = Counter(c.cluster_id for c in cells)
    assert set(by_cluster) == {"shop-02", "air-01"}  # zero weight is never drawn
    assert by_cluster["shop-02"] / 2000 == pytest.approx(0.9, abs=0.03)
    assert all(c.path_shape is PathShape.SINGLE for c in cells if c.cluster_id == "shop-02")
    air_shapes = {c.path_shape for c in cells if c.cluster_id == "air-01"}
    assert air_shapes <= {PathShape.SINGLE, PathShape.CHAIN, PathShape.FAN_OUT}
    again = [sample_cell(weights, random.Random(7), CATALOG) for _ in range(1)]
    assert again[0] == cells[0]  # deterministic for a seeded rng

    def modes_for(cluster: str, shape: PathShape) -> list[ReasoningMode]:
        return (
            [ReasoningMode.PARALLEL_FANOUT]
            if shape is PathShape.FAN_OUT
            else [ReasoningMode.DIRECT_EXECUTE]
        )

    def difficulties_for(shape: PathShape, mode: ReasoningMode) -> list[Difficulty]:
        return [Difficulty.EASY] if shape is PathShape.SINGLE else [Difficulty.HARD]

    for _ in range(200):
        c = sample_cell(rw, rng, CATALOG, modes_for=modes_for, difficulties_for=difficulties_for)
        assert (c.target_mode is ReasoningMode.PARALLEL_FANOUT) == (
            c.path_shape is PathShape.FAN_OUT
        )
        assert (c.difficulty is Difficulty.EASY) == (c.path_shape is PathShape.SINGLE)
    with pytest.raises(ValueError):
        sample_cell(None, rng, CellCatalog(clusters={}))


def test_should_stop() -> None:
    rich = DiversityReport(h_dom_norm=0.92, h_mode_norm=0.81)
    poor = DiversityReport(h_dom_norm=0.92, h_mode_norm=0.5)
    assert should_stop(rich, rounds_done=3, budget_spent=True)[0]
    assert not should_stop(rich, rounds_done=3, budget_spent=False)[0]
    assert not should_stop(poor, rounds_done=3, budget_spent=True)[0]
    stop, why = should_stop(poor, EvolutionParams(max_rounds=3), rounds_done=3, budget_spent=False)
    assert stop and "max_rounds" in why
