"""The run's token budget is split over its units up front, so no run can exceed it."""

from __future__ import annotations

from trajsynth.flows.units import failed_unit, rollout_unit_id, unit_token_budget
from trajsynth.schemas import (
    Blueprint,
    Budgets,
    Cell,
    Difficulty,
    EnvState,
    GoldRun,
    PathShape,
    ReasoningMode,
    RolloutMode,
    RunConfig,
    TreeConfig,
)


def test_run_budget_is_split_evenly_over_trees_and_caps_each() -> None:
    tree = RunConfig(
        tasks=5,
        rounds=2,
        samples=4,
        tree=TreeConfig(max_tree_tokens=24_000),
        budgets=Budgets(max_run_tokens=50_000),
    )
    assert unit_token_budget(tree) == 5_000  # 50,000 over 10 trees
    assert unit_token_budget(tree) * tree.tasks * tree.rounds <= 50_000
    roomy = tree.model_copy(update={"budgets": Budgets(max_run_tokens=10**9)})
    assert unit_token_budget(roomy) == 24_000  # never above the tree's own budget
    unbounded = tree.model_copy(update={"budgets": Budgets()})
    assert unit_token_budget(unbounded) == 24_000


def test_linear_units_are_rollouts_and_share_the_run_budget() -> None:
    linear = RunConfig(
        tasks=5,
        rounds=1,
        samples=4,
        rollout_mode=RolloutMode.LINEAR,
        budgets=Budgets(max_tokens=6_000, max_run_tokens=40_000),
    )
    assert unit_token_budget(linear) == 2_000  # 40,000 over 20 rollouts
    assert rollout_unit_id("bp_1", RolloutMode.LINEAR, 3) == "rollout:bp_1:3"
    assert rollout_unit_id("bp_1", RolloutMode.TREE, 3) == "tree:bp_1"


def test_a_unit_that_never_got_an_environment_is_recorded_not_done() -> None:
    bp = Blueprint(
        blueprint_id="bp_1",
        cluster_id="shop",
        domain="retail",
        cell=Cell(
            cluster_id="shop",
            path_shape=PathShape.SINGLE,
            target_mode=ReasoningMode.DIRECT_EXECUTE,
            difficulty=Difficulty.EASY,
        ),
        initial_state_id="s0",
        tool_path=[],
        persona="p",
        goal="g",
        gold_run=GoldRun(calls=[], final_state=EnvState(state_hash="s0"), initial_state_hash="s0"),
        constraints=[],
        seed=0,
    )
    config = RunConfig(tasks=1, samples=2)
    unit = failed_unit(config, "run_x", bp, 0, "MCPServerError: server did not start")
    assert not unit.done and unit.kind == "rollout" and unit.unit_id == f"tree:{bp.blueprint_id}"
    (tree,) = unit.rows["trees"]
    assert tree["n_leaves"] == 0 and tree["budget"]["infra_error"].startswith("MCPServerError")
    assert set(unit.rows) == {"trees"}  # no trajectory, so nothing counted against the policy
