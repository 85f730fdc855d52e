"""Per-leaf progress: every leaf a unit grows is a `leaves` event with
its outcome as it ends, and the total (leaves still possible) shrinks when a tree stops
early, so the bar's ETA is computed over the leaves that can still come."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from fakes.shop import SHOP, plan_shop_task

from trajsynth.agents import judge as judge_module
from trajsynth.curation.verify import verify
from trajsynth.flows.progress import (
    ProgressEvent,
    close_leaves,
    expect_leaves,
    leaf,
    progress_sink,
)
from trajsynth.flows.units import grow_unit, rollout_unit_id
from trajsynth.schemas import LLMConfig, RolloutMode, RunConfig, SandboxKind


def test_leaves_count_by_outcome_and_the_total_shrinks_when_a_unit_ends() -> None:
    events: list[ProgressEvent] = []
    with progress_sink(events.append):
        expect_leaves({})  # a round with nothing to grow: no bar at all
        expect_leaves({"tree:bp_a": 4, "tree:bp_b": 4})
        assert leaf("tree:bp_a", "passed") == 1
        leaf("tree:bp_a", "pruned")
        close_leaves("tree:bp_a")  # bp_a stopped after 2 of its 4 leaves
        leaf("tree:bp_b", "failed")
        close_leaves("tree:bp_b")
        close_leaves("tree:bp_b")  # nothing left to give back: no event
    assert events == [
        ("leaves", 0, 8, ""),
        ("leaves", 1, 8, "tree:bp_a passed; 1 passed"),
        ("leaves", 2, 8, "tree:bp_a pruned; 1 passed, 1 pruned"),
        ("leaves", 2, 6, "1 passed, 1 pruned"),
        ("leaves", 3, 6, "tree:bp_b failed; 1 passed, 1 failed, 1 pruned"),
        ("leaves", 3, 3, "1 passed, 1 failed, 1 pruned"),
    ]
    assert leaf("tree:bp_a", "passed") == 0  # no sink: logged, not counted


def test_a_retried_unit_announces_its_leaves_again() -> None:
    events: list[ProgressEvent] = []
    with progress_sink(events.append):
        expect_leaves({"tree:bp_a": 2})
        leaf("tree:bp_a", "excluded")  # the first attempt hit an infra fault
        close_leaves("tree:bp_a")
        expect_leaves({"tree:bp_a": 2})  # the retry may grow two more
        leaf("tree:bp_a", "passed")
    assert [(done, total) for _, done, total, _ in events] == [
        (0, 2),
        (1, 2),
        (1, 1),
        (1, 3),
        (2, 3),
    ]


@pytest.mark.slow  # the local sandbox's MCP server and a 3-leaf tree: about 11 s
async def test_a_unit_reports_each_leaf_with_its_verdict_as_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real tree on the bundled shop (local sandbox) against the fake LLM over HTTP: one
    event per stored trajectory, outcomes that agree with the stored verdicts, a total
    that ends at the leaves the tree grew, and each leaf verified once (the progress line
    and the stored verdict share it)."""
    blueprint = await plan_shop_task(tmp_path)
    verified_ids: list[str] = []

    def counting_verify(trajectory, *args, **kwargs):  # type: ignore[no-untyped-def]
        verified_ids.append(trajectory.trajectory_id)
        return verify(trajectory, *args, **kwargs)

    monkeypatch.setattr(judge_module, "verify", counting_verify)
    events: list[ProgressEvent] = []
    with FakeLLMServer() as server:
        config = RunConfig(
            tasks=1, samples=3, sandbox=SandboxKind.LOCAL, sandbox_pool=0,
            llm=LLMConfig(base_url=server.base_url, model="fake", max_retries=0),
        )  # fmt: skip
        with progress_sink(events.append):
            unit = await grow_unit(
                config=config, llm=config.llm, run_id="run_p", blueprint=blueprint, cluster=SHOP
            )
    label = rollout_unit_id(blueprint.blueprint_id, RolloutMode.TREE, 0)
    leaf_events = [e for e in events if e[0] == "leaves" and e[3].startswith(label)]
    verdicts = unit.rows["verdicts"]
    assert len(leaf_events) == len(verdicts) >= 1
    assert [e[1] for e in leaf_events] == list(range(1, len(verdicts) + 1))
    passed = sum(1 for v in verdicts if v.passed and not v.excluded)
    assert sum(e[3].split(";")[0].endswith(" passed") for e in leaf_events) == passed
    assert events[0][1:3] == (0, 3)  # announced before the first turn: at most 3 leaves
    assert events[-1][1] == events[-1][2] == len(verdicts)  # closed: nothing more to come
    assert sorted(verified_ids) == sorted(v.trajectory_id for v in verdicts)
