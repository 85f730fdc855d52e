"""Planning held-out eval tasks (docs/methods.md §15): every task an exercise of its own.

The planner and the bundled code server's tools and state run for real, in-process
(``fakes.inprocess_env``); only the sandbox is left out. The code cluster is small: eight
tasks from it at the eval seed base draw some seeds whose tool path and constraints repeat
earlier ones'.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from fakes.inprocess_env import InProcessEnvironment

from trajsynth.mcp_servers.registry import get_cluster
from trajsynth.planning import heldout
from trajsynth.planning.cells import sample_cells
from trajsynth.planning.heldout import plan_eval_tasks
from trajsynth.schemas import ToolCluster


async def test_a_seed_that_repeats_a_planned_exercise_is_skipped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def in_process(cluster: ToolCluster, **_: Any) -> Any:
        return lambda: InProcessEnvironment(cluster.cluster_id, tmp_path)

    monkeypatch.setattr(heldout, "environment_factory", in_process)
    with caplog.at_level(logging.DEBUG, logger=heldout.__name__):
        tasks = await plan_eval_tasks([get_cluster("code")], 8)
    skipped = [r.getMessage() for r in caplog.records if "repeats a planned task" in r.getMessage()]
    assert skipped, "no seed drew a repeat: the test no longer exercises the skip"
    assert len(tasks) == 8
    assert len({t.signature() for t in tasks}) == 8
    assert all(t.seed >= heldout.EVAL_SEED_BASE for t in tasks)


async def test_the_whole_draw_depends_on_the_seed_base_and_the_eval_seed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # seeded with the cluster alone, the training planner's draw d (seed base 1,000) and the
    # eval planner's draw d had one cell: one path shape, goal template and difficulty
    def in_process(cluster: ToolCluster, **_: Any) -> Any:
        return lambda: InProcessEnvironment(cluster.cluster_id, tmp_path)

    drawn: list[str] = []

    def recorded(*args: Any) -> Any:
        cells = sample_cells(*args)
        drawn.extend(c.model_dump_json() for c in cells)
        return cells

    monkeypatch.setattr(heldout, "environment_factory", in_process)
    monkeypatch.setattr(heldout, "sample_cells", recorded)

    async def draw(**kw: Any) -> tuple[list[str], list[Any]]:
        drawn.clear()
        tasks = await plan_eval_tasks([get_cluster("shop")], 4, **kw)
        return list(drawn), tasks

    train_cells, _ = await draw(seed_base=1_000)
    eval_cells, evals = await draw()
    again_cells, _ = await draw()
    other_cells, other = await draw(seed=1)
    assert eval_cells == again_cells  # still deterministic
    assert train_cells != eval_cells
    assert other_cells != eval_cells
    assert {t.blueprint_id for t in other}.isdisjoint(t.blueprint_id for t in evals)
