"""Judging what a rollout produced: verify every leaf, class its failure, value the nodes.

Library code the flows call after growing a tree (or one linear sample): no store, no
Prefect. Verification is ``curation.verify`` on the leaf's end state (docs/design.md §5), the
one place that decides ``passed`` (clean and correct); node values follow docs/methods.md §9's tree
values (``agents.tree.node_values``) over clean passes (1) and everything else (0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from trajsynth.agents.rollout import EpisodeResult
from trajsynth.agents.tree import TreeResult, node_values
from trajsynth.curation.verify import apply_judgement, verify
from trajsynth.schemas import (
    Blueprint,
    EnvState,
    FailureClass,
    JudgeResult,
    Node,
    RolloutTree,
    Termination,
    Trajectory,
    Verdict,
)

__all__ = [
    "JudgedTree",
    "Judgements",
    "Verified",
    "classify",
    "judge",
    "judge_episode",
    "judge_tree",
    "leaf_outcome",
]


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


Judgements = Mapping[str, JudgeResult]
"""A model judge's results by trajectory id (``agents.model_judge``); empty: no judge."""

Verified = Mapping[str, Verdict]
"""Verdicts ``verify`` already gave, by trajectory id (a leaf judged as it ended, for the
progress display), so judging the unit does not verify the same leaf again."""


def judge(
    blueprint: Blueprint,
    trajectory: Trajectory,
    state: EnvState | None,
    attempt: int,
    judgements: Judgements | None = None,
    verified: Verified | None = None,
) -> tuple[Trajectory, Verdict]:
    """Verify ``trajectory`` against the blueprint's constraints on its end state (with the
    model judge's result beside it, when there is one), and record its failure class and
    the attempt that made it. A verdict in ``verified`` for this trajectory is used as is."""
    verdict = (verified or {}).get(trajectory.trajectory_id) or verify(
        trajectory,
        blueprint.constraints,
        state or EnvState(state_hash="unavailable", readable=False),
    )
    judged = (judgements or {}).get(trajectory.trajectory_id)
    if judged is not None:
        verdict = apply_judgement(verdict, judged)
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
    # a node's value is the share of clean passes below it: the shaped score gives a leaf
    # whose hard constraints failed 0.1 x its soft share, so every node of a tree of
    # failures (or of passes) looked alike and no advantage showed where it went wrong
    scores = [None if v.excluded else float(v.passed) for v in verdicts]
    values = node_values(nodes, [t.node_ids for t in trajectories], scores)
    return [n.model_copy(update=values[n.node_id]) for n in nodes]


def judge_tree(
    blueprint: Blueprint,
    result: TreeResult,
    attempt: int,
    judgements: Judgements | None = None,
    verified: Verified | None = None,
) -> JudgedTree:
    """Every leaf of a grown tree judged; the tree's pass rate counts only counted leaves."""
    trajectories, verdicts = [], []
    for leaf in result.leaves:
        traj, verdict = judge(
            blueprint, leaf.trajectory, leaf.final_state, attempt, judgements, verified
        )
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


def judge_episode(
    blueprint: Blueprint,
    result: EpisodeResult,
    attempt: int,
    judgements: Judgements | None = None,
    verified: Verified | None = None,
) -> JudgedTree:
    """One linear rollout judged, as a one-leaf tree."""
    traj, verdict = judge(
        blueprint, result.trajectory, result.final_state, attempt, judgements, verified
    )
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
