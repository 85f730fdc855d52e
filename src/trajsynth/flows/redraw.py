"""Redrawing rejected blueprints until a round has the tasks it asked for (docs/planning.md).

A round asks for ``config.tasks`` blueprints: one *slot* per task. Attempt 0 of slot ``i`` is
the cell ``sample_cells`` drew for it (unit ``plan:R:i``, seed ``plan_seed``, as before
redraws existed). When an attempt is rejected (its path does not bind, its gold run fails,
its constraints do not lint, its words fail their checks), the slot is drawn again: attempt
``k`` (unit ``plan:R:i:k``) plans a new cell of the same cluster with a new seed, so the
delivered tasks keep the clusters' configured shares; after ``SAME_CLUSTER_TRIES`` rejected
attempts the cluster is drawn again too (a cluster that cannot plan a task does not eat the
budget). Every attempt of a round counts against ``RunConfig.plan_budget``; a round that
spends it delivers fewer tasks, and the run's summary names the reasons of the rejected
attempts. An attempt whose unit failed (its LLM or sandbox, after the unit's retries) is
not redrawn: it is recorded, and the next run of the config retries it, as every failed
unit is retried.

Everything here is a pure function of the config, the round, the slot and the attempt
number, and of what the store holds: a resumed run makes the same attempts, skips the ones
done, and never plans a second blueprint for a slot that has one.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from trajsynth.planning.cells import sample_cells
from trajsynth.schemas import Cell, RunConfig, ToolCluster, stable_hash

__all__ = [
    "REDRAW_STRIDE",
    "SAME_CLUSTER_TRIES",
    "PlanAttempt",
    "attempt_seed",
    "attempt_unit_id",
    "next_attempts",
    "plan_budget",
    "redraw_cell",
]

SAME_CLUSTER_TRIES = 3
# seeds of redraws: far from every first draw's seed (plan_seed spaces tasks 1 apart)
REDRAW_STRIDE = 1_000_000_007


class PlanAttempt(BaseModel):
    """One planning attempt of a round: which slot, which redraw, its unit, seed and cell."""

    model_config = ConfigDict(frozen=True)

    slot: int
    redraw: int
    unit_id: str
    seed: int
    cell: Cell


def plan_budget(config: RunConfig) -> int:
    """Planning attempts one round may make (at least one per task asked)."""
    return config.plan_budget()


def attempt_unit_id(round_index: int, slot: int, redraw: int) -> str:
    return f"plan:{round_index}:{slot}" if redraw == 0 else f"plan:{round_index}:{slot}:{redraw}"


def attempt_seed(first_seed: int, redraw: int) -> int:
    """The planner seed of redraw ``redraw`` of a slot whose first seed is ``first_seed``."""
    return first_seed + redraw * REDRAW_STRIDE


def redraw_cell(
    clusters: Sequence[ToolCluster],
    first: Cell,
    *,
    seed: int,
    round_index: int,
    slot: int,
    redraw: int,
    weights: Mapping[str, Mapping[str, float]] | None = None,
) -> Cell:
    """The cell of redraw ``redraw`` (>= 1) of a slot whose first cell is ``first``: shape,
    mode and difficulty drawn again in the same cluster; after ``SAME_CLUSTER_TRIES``
    attempts, the cluster too."""
    rng = random.Random(stable_hash(["redraw", seed, round_index, slot, redraw]))
    same = [c for c in clusters if c.cluster_id == first.cluster_id]
    pool = same if redraw < SAME_CLUSTER_TRIES and same else list(clusters)
    cells = sample_cells(pool, 1, rng, weights)
    return cells[0] if cells else first


def next_attempts(
    first_cells: Sequence[Cell],
    first_seeds: Sequence[int],
    *,
    clusters: Sequence[ToolCluster],
    round_index: int,
    config_seed: int,
    budget: int,
    done: set[str],
    accepted_seeds: set[int],
    given_up: set[str],
    weights: Mapping[str, Mapping[str, float]] | None = None,
) -> tuple[list[PlanAttempt], int, int]:
    """The attempts to run next: for every slot without a blueprint, its first attempt that
    is neither done nor given up in this process, while the budget lasts.

    ``done``: the round's plan units done (stored); ``accepted_seeds``: the seeds of the
    round's stored blueprints; ``given_up``: units that failed in this process (their
    infrastructure; the next run retries them). Returns (attempts, slots filled, attempts
    spent).
    """
    filled = spent = 0
    attempts: list[PlanAttempt] = []
    for slot, first_seed in enumerate(first_seeds):
        units = [attempt_unit_id(round_index, slot, k) for k in range(budget)]
        spent += sum(1 for u in units if u in done or u in given_up)
        # a stored blueprint at any redraw fills the slot (also one found at a later redraw
        # than an attempt whose unit failed in an earlier run and is not done)
        if any(attempt_seed(first_seed, k) in accepted_seeds for k in range(budget)):
            filled += 1
            continue
        redraw = next((k for k, u in enumerate(units) if u not in done), None)
        if redraw is None or units[redraw] in given_up:
            # an attempt whose unit failed (its infrastructure) is not redrawn: the next run
            # of the config retries it and ends where a run that never failed ends
            continue
        cell = first_cells[slot]
        if redraw:
            cell = redraw_cell(
                clusters, cell, seed=config_seed, round_index=round_index, slot=slot,
                redraw=redraw, weights=weights,
            )  # fmt: skip
        seed = attempt_seed(first_seed, redraw)
        attempts.append(
            PlanAttempt(slot=slot, redraw=redraw, unit_id=units[redraw], seed=seed, cell=cell)
        )
    return attempts[: max(0, budget - spent)], filled, spent
