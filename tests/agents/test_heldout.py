"""Planning held-out eval tasks (docs/methods.md §15): every task an exercise of its own.

The planner and the bundled code server's tools and state run for real, in-process
(``fakes.inprocess_env``); only the sandbox is left out. The code cluster is small: its
seeds 6 and 7 at the eval seed base draw the tool path and constraints of earlier ones.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from fakes.inprocess_env import InProcessEnvironment

from trajsynth.agents import heldout
from trajsynth.agents.heldout import plan_eval_tasks
from trajsynth.mcp_servers.registry import get_cluster
from trajsynth.schemas import ToolCluster


async def test_a_seed_that_repeats_a_planned_exercise_is_skipped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def in_process(cluster: ToolCluster, **_: Any) -> Any:
        return lambda: InProcessEnvironment(cluster.cluster_id, tmp_path)

    monkeypatch.setattr(heldout, "environment_factory", in_process)
    with caplog.at_level(logging.DEBUG, logger=heldout.__name__):
        tasks = await plan_eval_tasks([get_cluster("code")], 6)
    skipped = [r.getMessage() for r in caplog.records if "repeats a planned task" in r.getMessage()]
    assert skipped, "no seed drew a repeat: the test no longer exercises the skip"
    assert len(tasks) == 6
    assert len({t.signature() for t in tasks}) == 6
    assert all(t.seed >= heldout.EVAL_SEED_BASE for t in tasks)
