"""Records of topology curation and dual selection (docs/methods.md §8).

``TaskTopology`` holds one task's quotient-graph metrics (RL side), ``TrajectoryTopology`` one
rollout's place in that graph (SFT side), ``Selection`` one decision of either selection with
its reason. The two ``*SelectConfig`` models carry docs/methods.md's default weights and budgets.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, JsonValue

from trajsynth.schemas._base import Record, stable_hash
from trajsynth.schemas.diversity import CACWeights, DiversityReport, EvolutionParams

__all__ = [
    "CurationConfig",
    "CurationReport",
    "RLSelectConfig",
    "RoundStats",
    "SFTSelectConfig",
    "Selection",
    "SelectionKind",
    "TaskTopology",
    "TrajectoryTopology",
]


class TaskTopology(Record):
    """Metrics of one task's quotient graph (docs/methods.md §8, task level).

    ``pass_rate`` is ``None`` when the task has no valid rollout (all infra/simulator/unverified).
    """

    task_id: str = Field(description="the task (blueprint id)")
    n_rollouts: int = Field(default=0, ge=0, description="valid rollouts in the quotient graph")
    n_excluded: int = Field(
        default=0, ge=0, description="rollouts left out: infra, simulator, no verdict"
    )
    n_success: int = Field(default=0, ge=0, description="rollouts that passed")
    pass_rate: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="n_success / n_rollouts (NULL with no valid rollout)",
    )
    n_nodes: int = Field(default=0, description="nodes of the quotient graph")
    n_edges: int = Field(default=0, description="edges of the quotient graph")
    n_branch_points: int = Field(default=0, description="nodes where rollouts part")
    n_branch_edges: int = Field(default=0, description="edges leaving branch points")
    n_error_branch_edges: int = Field(default=0, description="error edges leaving branch points")
    error_branch_ratio: float = Field(
        default=0.0, ge=0.0, le=1.0, description="error edges over all edges at branch points"
    )
    strategy_entropy: float = Field(
        default=0.0, ge=0.0, description="entropy of the strategy signatures (nats)"
    )
    strategy_entropy_norm: float = Field(
        default=0.0, ge=0.0, description="strategy_entropy over its maximum (0-1)"
    )
    n_signatures: int = Field(default=0, description="distinct strategy signatures")
    n_success_strategies: int = Field(
        default=0, description="distinct successful strategies, errors removed"
    )
    shortest_success_len: int | None = Field(
        default=None, description="fewest edges of a successful path"
    )
    rl_score: float = Field(default=0.0, ge=0.0, description="how much signal the task gives GRPO")


class TrajectoryTopology(Record):
    """One rollout's path through its task's quotient graph (docs/methods.md §8, trajectory level).

    A rollout left out of the graph (infra, simulator, no verdict) has ``included=False`` and
    its ``skip_reason``; ``efficiency``/``redundancy`` are ``None`` for every rollout that did not
    succeed (efficiency is measured against the shortest *successful* path).
    """

    trajectory_id: str = Field(description="the trajectory")
    task_id: str = Field(description="the task")
    included: bool = Field(default=True, description="in its task's quotient graph")
    skip_reason: str | None = Field(default=None, description="why it was left out")
    success: bool = Field(default=False, description="passed verification")
    signature: str | None = Field(default=None, description="hash of its strategy signature")
    signature_len: int = Field(default=0, description="nodes in the signature")
    path_len: int = Field(default=0, description="edges traversed, self-loops included")
    n_errors: int = Field(default=0, description="failing calls")
    n_recovered: int = Field(default=0, description="failing calls later recovered")
    recovered: bool = Field(default=False, description="passed an error and still succeeded")
    efficiency: float | None = Field(
        default=None, description="shortest success length over its own (successes only)"
    )
    redundancy: float | None = Field(default=None, description="1 - efficiency")


class SelectionKind(StrEnum):
    SFT = "sft"
    RL = "rl"


class SFTSelectConfig(Record):
    """SFT selection weights and budgets (docs/methods.md §8 defaults)."""

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

    selection_id: str = Field(description="content id of the decision")
    kind: SelectionKind = Field(description="sft or rl")
    item_id: str = Field(description="the trajectory (sft) or task (rl)")
    task_id: str = Field(description="the task")
    round: int = Field(default=0, description="the round")
    selected: bool = Field(description="whether it made the dataset")
    score: float | None = Field(default=None, description="its selection score")
    rank: int | None = Field(default=None, description="its rank among the candidates")
    reason: str = Field(description="why it was taken or left")
    components: dict[str, float] = Field(default_factory=dict, description="the score's parts")
    config_hash: str = Field(default="", description="hash of the selection config")


class CurationConfig(Record):
    """How a round is curated: selection, embeddings, soft merge, evolution.

    ``embeddings=False`` skips the sentence-transformer: reasoning modes are the rule labels
    (docs/methods.md §5.2 fallback) and only exact duplicates are found (§5.4). Embedding texts are
    the digests cut to ``embed_max_chars`` and read up to ``embed_max_tokens`` word pieces.
    """

    sft: SFTSelectConfig = Field(default_factory=SFTSelectConfig)
    rl: RLSelectConfig = Field(default_factory=RLSelectConfig)
    embeddings: bool = Field(default=True, description="embed digests with all-MiniLM-L6-v2")
    embed_max_chars: int = Field(default=256, ge=16, description="digest characters embedded")
    embed_max_tokens: int = Field(default=64, ge=8, le=512, description="model max_seq_length")
    embed_batch_size: int = Field(default=128, ge=1)
    embed_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        default="auto",
        description="model precision; auto: the faster one on this machine, measured once",
    )
    embed_backend: Literal["auto", "torch", "onnx"] = Field(
        default="auto",
        description="torch or ONNX Runtime (float32 on a CPU); auto: the faster, measured once",
    )
    embed_threads: int | None = Field(
        default=None, ge=1, description="embedding workers, one thread each (None: measured once)"
    )
    duplicate_cosine: float = Field(default=0.95, gt=0.0, le=1.0, description="§5.4")
    soft_merge: Literal["off", "difflib", "embedding"] = Field(
        default="off", description="merge near-equal ok observations in the quotient graph"
    )
    soft_merge_threshold: float = Field(default=0.95, gt=0.0, le=1.0)
    mode_min_fit: int = Field(default=500, ge=2, description="digests before a k-means codebook")
    mode_min_cosine: float = Field(default=0.5, ge=-1.0, le=1.0)
    mode_max_fit: int = Field(
        default=2_000, ge=2, description="digests k-means is fitted on (a seeded sample)"
    )
    cac_weights: CACWeights = Field(default_factory=CACWeights)
    evolution: bool = Field(default=True, description="adapt the next round's sampling (§6)")
    evolution_params: EvolutionParams = Field(default_factory=EvolutionParams)

    def config_hash(self) -> str:
        return stable_hash(self.model_dump(mode="json"), length=16)


class CurationReport(Record):
    """What one round's curation (``curation.round.run_round``) did: counts, figures, skips,
    timings.

    ``diversity`` is the round's own report over its accepted trajectories; ``cumulative`` the
    report over every accepted trajectory of rounds <= ``round`` (the dataset so far).
    ``skips`` maps an item (trajectory or task id, or ``"round"``) to why it got a default.
    """

    run_id: str
    round: int
    input_hash: str = ""
    reused: bool = Field(default=False, description="inputs unchanged: stored rows kept")
    n_trajectories: int = 0
    n_verified: int = 0
    n_accepted: int = 0
    n_tasks: int = 0
    n_sft_selected: int = 0
    n_rl_selected: int = 0
    n_duplicates: int = 0
    n_embedded: int = 0
    n_embed_cached: int = 0
    mode_codebook: str | None = None
    error_branch_ratio: float = 0.0
    diversity: DiversityReport = Field(default_factory=DiversityReport)
    cumulative: DiversityReport = Field(default_factory=DiversityReport)
    skips: dict[str, str] = Field(default_factory=dict)
    timings: dict[str, float] = Field(default_factory=dict)
    rows_added: int = 0


class RoundStats(Record):
    """One curated round's figures as stored (``round_stats``): what the dashboard, ``synth
    stats`` and a reused round read back. Entropies and means are over the dataset so far
    (every accepted trajectory of rounds <= ``round``); ``round_report`` is the round alone."""

    round_key: str = Field(description="run id and round")
    run_id: str = Field(description="the run")
    round: int = Field(description="the round")
    input_hash: str = Field(description="hash of what the round was curated from")
    n_trajectories: int = Field(description="trajectories of the round")
    n_verified: int = Field(description="of which passed")
    n_accepted: int = Field(description="of which counted in the dataset")
    pass_rate: float | None = Field(
        default=None, description="n_verified over the counted trajectories"
    )
    n_tasks: int = Field(description="tasks of the round")
    domain_entropy: float = Field(description="entropy of the domains (nats), dataset so far")
    domain_entropy_norm: float = Field(description="domain_entropy over its maximum")
    cluster_entropy_norm: float = Field(description="normalised entropy of the clusters")
    reasoning_mode_entropy: float = Field(description="entropy of the reasoning modes (nats)")
    reasoning_mode_entropy_norm: float = Field(
        description="reasoning_mode_entropy over its maximum"
    )
    action_complexity: float | None = Field(
        default=None, description="mean cumulative action complexity (None: nothing accepted)"
    )
    error_branch_ratio: float = Field(description="mean error branch ratio of the tasks")
    strategic_heterogeneity: float | None = Field(
        default=None, description="mean normalised strategy entropy"
    )
    n_success_strategies: float | None = Field(
        default=None, description="mean successful strategies per task"
    )
    n_recovered: int = Field(description="trajectories that recovered from an error")
    n_duplicates: int = Field(description="near-duplicates found")
    n_sft_selected: int = Field(description="trajectories in the SFT selection")
    n_rl_selected: int = Field(description="tasks in the RL selection")
    mode_codebook: str | None = Field(default=None, description="the codebook of the round")
    skips: dict[str, str] = Field(default_factory=dict, description="what was skipped and why")
    timings: dict[str, float] | None = Field(default=None, description="seconds per curation stage")
    report: DiversityReport = Field(
        description="the DiversityReport of the dataset after the round"
    )
    round_report: DiversityReport = Field(description="the DiversityReport of the round alone")
    curation: dict[str, JsonValue] = Field(
        description="the CurationReport (counts, skips), its timings left out"
    )
