"""Judging what a rollout produced: verify every leaf, class its failure, value the nodes.

Library code the flows call after growing a tree (or one linear sample): no store, no
Prefect. Verification is ``curation.verify`` on the leaf's end state (docs/design.md §5);
node values follow docs/methods.md §9's tree values (``agents.tree.node_values``).
"""

from __future__ import annotations

from dataclasses import dataclass

from trajsynth.agents.rollout import EpisodeResult
from trajsynth.agents.tree import TreeResult, node_values
from trajsynth.curation.verify import verify
from trajsynth.schemas import (
    Blueprint,
    EnvState,
    FailureClass,
    Node,
    RolloutTree,
    Termination,
    Trajectory,
    Verdict,
)

__all__ = ["JudgedTree", "classify", "judge", "judge_episode", "judge_tree", "leaf_outcome"]


@dataclass(frozen=True)
class JudgedTree:
    """A tree after judging: its figures, valued nodes, classed trajectories and verdicts."""

    tree: RolloutTree
    nodes: list[Node]
    trajectories: list[Trajectory]
    verdicts: list[Verdict]
    final_states: list[EnvState | None]


def classify(trajectory: Trajectory, verdict: Verdict) -> FailureClass | None:
    """A failed, counted trajectory is `tool` when a tool error is its last failing step,
    else `model` (malformed output, a wrong final answer or end state, a pruned dead end)."""
    if trajectory.failure_class is not None or verdict.passed:
        return trajectory.failure_class
    failing = [c for c in trajectory.calls if c.failure_class is not None]
    return failing[-1].failure_class if failing else FailureClass.MODEL


def judge(
    blueprint: Blueprint, trajectory: Trajectory, state: EnvState | None, attempt: int
) -> tuple[Trajectory, Verdict]:
    """Verify ``trajectory`` against the blueprint's constraints on its end state, and
    record its failure class and the attempt that made it."""
    verdict = verify(
        trajectory,
        blueprint.constraints,
        state or EnvState(state_hash="unavailable", readable=False),
    )
    trajectory = trajectory.model_copy(
        update={"failure_class": classify(trajectory, verdict), "attempts": attempt}
    )
    return trajectory, verdict


def leaf_outcome(trajectory: Trajectory, verdict: Verdict) -> str:
    """What the progress display says of a judged leaf: ``excluded`` (an infra or simulator
    fault, never counted), ``passed``, ``pruned`` (cut early as a dead end), else ``failed``."""
    if verdict.excluded:
        return "excluded"
    if verdict.passed:
        return "passed"
    return "pruned" if trajectory.termination is Termination.PRUNED else "failed"


def _valued(nodes: list[Node], trajectories: list[Trajectory], verdicts: list[Verdict]) -> list:
    scores = [None if v.excluded else v.score for v in verdicts]
    values = node_values(nodes, [t.node_ids for t in trajectories], scores)
    return [n.model_copy(update=values[n.node_id]) for n in nodes]


def judge_tree(blueprint: Blueprint, result: TreeResult, attempt: int) -> JudgedTree:
    """Every leaf of a grown tree judged; the tree's pass rate counts only counted leaves."""
    trajectories, verdicts = [], []
    for leaf in result.leaves:
        traj, verdict = judge(blueprint, leaf.trajectory, leaf.final_state, attempt)
        trajectories.append(traj)
        verdicts.append(verdict)
    counted = [v for v in verdicts if not v.excluded]
    passed = sum(1 for v in counted if v.passed)
    tree = result.tree.model_copy(
        update={
            "pass_rate": passed / len(counted) if counted else None,
            "n_passed": passed,
            "n_pruned": sum(1 for t in trajectories if t.termination.value == "pruned"),
        }
    )
    return JudgedTree(
        tree=tree,
        nodes=_valued(result.nodes, trajectories, verdicts),
        trajectories=trajectories,
        verdicts=verdicts,
        final_states=[leaf.final_state for leaf in result.leaves],
    )


def judge_episode(blueprint: Blueprint, result: EpisodeResult, attempt: int) -> JudgedTree:
    """One linear rollout judged, as a one-leaf tree."""
    traj, verdict = judge(blueprint, result.trajectory, result.final_state, attempt)
    tree = result.tree.model_copy(
        update={
            "pass_rate": None if verdict.excluded else float(verdict.passed),
            "n_passed": int(verdict.passed and not verdict.excluded),
            "n_pruned": 0,
            "generated_tokens": sum(u.completion_tokens for u in result.usage),
        }
    )
    return JudgedTree(
        tree=tree,
        nodes=_valued(result.nodes, [traj], [verdict]),
        trajectories=[traj],
        verdicts=[verdict],
        final_states=[result.final_state],
    )
