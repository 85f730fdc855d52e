"""Records of topology curation and dual selection (METHODS.md §8).

``TaskTopology`` holds one task's quotient-graph metrics (RL side), ``TrajectoryTopology`` one
rollout's place in that graph (SFT side), ``Selection`` one decision of either selection with
its reason. The two ``*SelectConfig`` models carry METHODS.md's default weights and budgets.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from trajsynth.schemas._base import Record, stable_hash

__all__ = [
    "RLSelectConfig",
    "SFTSelectConfig",
    "Selection",
    "SelectionKind",
    "TaskTopology",
    "TrajectoryTopology",
]


class TaskTopology(Record):
    """Metrics of one task's quotient graph (METHODS.md §8, task level).

    ``p`` is ``None`` when the task has no valid rollout (all infra/simulator/unverified).
    """

    task_id: str
    n_rollouts: int = Field(default=0, ge=0, description="valid rollouts in the graph")
    n_excluded: int = Field(default=0, ge=0, description="left out: infra, simulator, no verdict")
    n_success: int = Field(default=0, ge=0)
    p: float | None = Field(default=None, ge=0.0, le=1.0, description="pass rate")
    n_nodes: int = 0
    n_edges: int = 0
    n_branch_points: int = 0
    n_branch_edges: int = Field(default=0, description="edges leaving branch points")
    n_error_branch_edges: int = Field(default=0, description="error edges leaving branch points")
    ebr: float = Field(default=0.0, ge=0.0, le=1.0, description="error branch ratio")
    h_strat: float = Field(default=0.0, ge=0.0, description="signature entropy (nats)")
    h_strat_norm: float = Field(default=0.0, ge=0.0)
    n_signatures: int = 0
    n_succ_strat: int = Field(default=0, description="distinct success signatures, errors removed")
    l_star: int | None = Field(default=None, description="fewest edges of a success path")
    rl_score: float = Field(default=0.0, ge=0.0)


class TrajectoryTopology(Record):
    """One rollout's path through its task's quotient graph (METHODS.md §8, trajectory level).

    A rollout left out of the graph (infra, simulator, no verdict) has ``included=False`` and
    its ``skip_reason``; ``eff``/``redundancy`` are ``None`` for every rollout that did not
    succeed (efficiency is measured against the shortest *successful* path).
    """

    trajectory_id: str
    task_id: str
    included: bool = True
    skip_reason: str | None = None
    success: bool = False
    signature: str | None = Field(default=None, description="sha1[:16] of the signature")
    signature_len: int = Field(default=0, description="nodes in the signature")
    path_len: int = Field(default=0, description="edges traversed, self-loops included")
    n_errors: int = Field(default=0, description="failing calls (edges into error nodes)")
    n_recovered: int = Field(default=0, description="e(τ): failing calls later recovered")
    rec: bool = False
    eff: float | None = None
    redundancy: float | None = None


class SelectionKind(StrEnum):
    SFT = "sft"
    RL = "rl"


class SFTSelectConfig(Record):
    """SFT selection weights and budgets (METHODS.md §8 defaults)."""

    w_rec: float = Field(default=1.0, ge=0.0)
    w_eff: float = Field(default=1.0, ge=0.0)
    w_novelty: float = Field(default=0.5, ge=0.0)
    k_sft: int = Field(default=2, ge=0, description="trajectories per task")
    distinct_signatures: bool = Field(
        default=True, description="never pick two trajectories of one task with one signature"
    )
    max_total: int | None = Field(default=None, ge=0, description="cap over all tasks")

    def config_hash(self) -> str:
        return stable_hash(self.model_dump(mode="json"), length=16)


class RLSelectConfig(Record):
    """RL selection: the pool is tasks with 0 < p < 1; the top fraction by rl_score is kept."""

    rl_fraction: float = Field(default=0.5, gt=0.0, le=1.0)
    min_rollouts: int = Field(default=2, ge=2, description="valid rollouts a task needs")
    max_tasks: int | None = Field(default=None, ge=0, description="cap after the fraction")

    def config_hash(self) -> str:
        return stable_hash(self.model_dump(mode="json"), length=16)


class Selection(Record):
    """One selection decision, kept for selected and rejected items alike."""

    selection_id: str
    kind: SelectionKind
    item_id: str = Field(description="trajectory id (sft) or task id (rl)")
    task_id: str
    round: int = 0
    selected: bool
    score: float | None = None
    rank: int | None = Field(default=None, description="pick order (sft: within the task)")
    reason: str
    components: dict[str, float] = Field(default_factory=dict)
    config_hash: str = ""
