"""Redraws: a round plans until it has the tasks it asked for, within its attempt budget,
and a resumed round makes the same attempts (``flows.redraw``)."""

from __future__ import annotations

import random

from trajsynth.flows.redraw import (
    SAME_CLUSTER_TRIES,
    attempt_seed,
    attempt_unit_id,
    next_attempts,
    redraw_cell,
)
from trajsynth.mcp_servers.registry import get_cluster
from trajsynth.planning.cells import sample_cells
from trajsynth.schemas import RunConfig

CLUSTERS = [get_cluster(name) for name in ("calendar", "code", "shop", "travel")]
CELLS = sample_cells(CLUSTERS, 4, random.Random(0))
SEEDS = [100, 101, 102, 103]


def _next(budget: int = 12, done: set[str] = frozenset(), accepted: set[int] = frozenset(),
          given_up: set[str] = frozenset()):  # fmt: skip
    return next_attempts(
        CELLS, SEEDS, clusters=CLUSTERS, round_index=0, config_seed=0, budget=budget,
        done=set(done), accepted_seeds=set(accepted), given_up=set(given_up),
    )  # fmt: skip


def test_the_first_wave_is_one_attempt_per_task_as_before_redraws() -> None:
    attempts, filled, spent = _next()
    assert [a.unit_id for a in attempts] == ["plan:0:0", "plan:0:1", "plan:0:2", "plan:0:3"]
    assert [a.seed for a in attempts] == SEEDS and [a.cell for a in attempts] == CELLS
    assert (filled, spent) == (0, 0)


def test_a_rejected_slot_is_redrawn_in_its_cluster_until_it_has_a_blueprint() -> None:
    done = {f"plan:0:{i}" for i in range(4)}
    attempts, filled, spent = _next(done=done, accepted={100, 101, 103})
    assert (filled, spent) == (3, 4)
    (again,) = attempts
    assert (again.slot, again.redraw, again.unit_id) == (2, 1, "plan:0:2:1")
    assert again.seed == attempt_seed(102, 1) != 102
    assert again.cell.cluster_id == CELLS[2].cluster_id
    # the redraw planned a blueprint: the round is complete
    attempts, filled, spent = _next(
        done=done | {"plan:0:2:1"}, accepted={100, 101, 103, again.seed}
    )
    assert (attempts, filled, spent) == ([], 4, 5)


def test_the_budget_bounds_the_attempts() -> None:
    done = {f"plan:0:{i}" for i in range(4)} | {"plan:0:0:1", "plan:0:1:1"}
    attempts, filled, spent = _next(budget=7, done=done)
    assert (filled, spent) == (0, 6) and len(attempts) == 1  # one attempt left of seven
    attempts, _, spent = _next(budget=6, done=done)
    assert attempts == [] and spent == 6


def test_a_failed_unit_waits_for_the_next_run_and_a_later_blueprint_fills_its_slot() -> None:
    attempts, _, spent = _next(done={"plan:0:1", "plan:0:2", "plan:0:3"},
                               accepted={101, 102, 103}, given_up={"plan:0:0"})  # fmt: skip
    assert attempts == [] and spent == 4  # not redrawn in this process
    # a resumed run: attempt 0 of slot 0 is not done, but its redraw 1 stored a blueprint
    attempts, filled, _ = _next(done={"plan:0:0:1"}, accepted={attempt_seed(100, 1)})
    assert 0 not in {a.slot for a in attempts} and filled == 1


def test_a_cluster_that_keeps_failing_is_redrawn_too() -> None:
    first = CELLS[0]
    same = {redraw_cell(CLUSTERS, first, seed=0, round_index=0, slot=0, redraw=k).cluster_id
            for k in range(1, SAME_CLUSTER_TRIES)}  # fmt: skip
    assert same == {first.cluster_id}
    late = SAME_CLUSTER_TRIES
    later = {redraw_cell(CLUSTERS, first, seed=s, round_index=0, slot=0, redraw=late).cluster_id
             for s in range(40)}  # fmt: skip
    assert len(later) > 1


def test_unit_ids_and_budget() -> None:
    assert attempt_unit_id(2, 5, 0) == "plan:2:5" and attempt_unit_id(2, 5, 3) == "plan:2:5:3"
    assert RunConfig(tasks=20).plan_budget() == 60
    assert RunConfig(tasks=20, plan_attempts=25).plan_budget() == 25
