"""Diversity and evolution records (docs/methods.md §5, §6).

What ``curation/diversity`` measures (CAC per step, mode assignments, near-duplicates, the
per-round diversity report) and what ``curation/evolution`` reads and writes (rollout outcomes,
option statistics, weight changes with their reason, the next round's sampling weights).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from trajsynth.schemas._base import Record
from trajsynth.schemas.blueprint import Cell, Difficulty, PathShape, ReasoningMode
from trajsynth.schemas.failures import FailureClass
from trajsynth.schemas.tools import Domain

__all__ = [
    "CACBreakdown",
    "CACStep",
    "CACWeights",
    "CellCatalog",
    "DiversityReport",
    "DuplicateMark",
    "EntropyStats",
    "EvolutionParams",
    "ModeAssignment",
    "ModeCodebookRecord",
    "ModeInfo",
    "OptionStats",
    "RolloutOutcome",
    "RoundWeights",
    "WeightChange",
    "WeightReason",
]


class EntropyStats(Record):
    """Entropy of one categorical distribution over a declared support (docs/methods.md §1.1)."""

    h: float = Field(ge=0.0, description="Shannon entropy in nats")
    h_norm: float = Field(ge=0.0, description="H / ln K (0 when K < 2)")
    k: int = Field(ge=0, description="size of the declared support")
    effective: float = Field(ge=0.0, description="exp(H): the effective number of categories")
    n: int = Field(default=0, ge=0, description="observations counted")


# --- §5.3 cumulative action complexity -----------------------------------------------------


class CACWeights(Record):
    """The weights of docs/methods.md §5.3 (defaults as written there)."""

    w_a: float = 0.5
    w_g: float = 1.0
    w_u: float = 0.5
    w_b: float = 1.0
    w_n: float = 0.5


class CACStep(Record):
    """One tool-call step's complexity ``c_t`` and its parts (docs/methods.md §5.3)."""

    index: int = Field(ge=0)
    tool: str
    leaves: int = Field(ge=0, description="L_t: leaf argument values given")
    depth: int = Field(ge=1, description="D_t: nesting depth of the args (flat object = 1)")
    a: float = Field(description="log2(1 + L_t) + (D_t - 1)")
    g: int = Field(ge=0, description="dependency depth")
    u: int = Field(ge=0, description="arguments bound to earlier observations")
    b: int = Field(ge=0, le=1, description="conditional call")
    n: int = Field(ge=0, le=1, description="first use of the tool")
    sources: list[int] = Field(default_factory=list, description="steps it takes values from")
    g_from_plan: bool = Field(default=False, description="g taken from the planned path")
    c: float


class CACBreakdown(Record):
    """CAC of one trajectory with the per-trajectory fields §5.3 stores."""

    cac: float = 0.0
    n_steps: int = 0
    n_distinct_tools: int = 0
    max_dep_depth: int = 0
    n_bound_args: int = 0
    n_conditional: int = 0
    steps: list[CACStep] = Field(default_factory=list)


# --- §5.2 reasoning modes ---------------------------------------------------------------------


class ModeInfo(Record):
    """One mode of a codebook: its id, its majority rule label and its top TF-IDF terms."""

    mode_id: str
    name: str
    label: ReasoningMode
    terms: list[str] = Field(default_factory=list)
    size: int = Field(default=0, ge=0, description="fit digests that fell in this mode")


class ModeCodebookRecord(Record):
    """A frozen mode codebook as stored: centroids (unit rows) or the rule-label fallback."""

    codebook_id: str = Field(description="content id of the codebook")
    version: str = Field(description="codebook version")
    kind: Literal["kmeans", "rules"] = Field(description="kmeans or the fallback")
    modes: list[ModeInfo]
    centroids: list[list[float]] | None = None
    min_cosine: float = 0.5
    silhouette: float | None = Field(default=None, description="cluster quality (-1 to 1)")
    n_fit: int = Field(default=0, description="texts it was fitted on")
    fallback_reason: str | None = Field(default=None, description="why the fallback was used")


class ModeAssignment(Record):
    """The mode one digest takes (docs/methods.md §5.2); ``mode_id`` None means unassigned."""

    mode_id: str | None
    name: str | None = None
    label: ReasoningMode | None = None
    rule_label: ReasoningMode | None = None
    cosine: float | None = None
    codebook: str
    reason: str | None = Field(default=None, description="why unassigned, when it is")


# --- §5.4 near-duplicates and the round report ----------------------------------------------


class DuplicateMark(Record):
    """A trajectory left out as a (near-)duplicate of a kept one (docs/methods.md §5.4)."""

    trajectory_id: str
    duplicate_of: str
    cluster_id: str
    kind: Literal["exact", "near"]
    similarity: float


class DiversityReport(Record):
    """One row per round over the accepted data (docs/methods.md §5.4); feeds §6 and the card."""

    round: int = 0
    n: int = Field(default=0, ge=0, description="trajectories counted")
    h_dom: float = 0.0
    h_dom_norm: float = 0.0
    k_dom: int = 0
    eff_dom: float = 0.0
    h_cluster: float = 0.0
    h_cluster_norm: float = 0.0
    k_cluster: int = 0
    eff_cluster: float = 0.0
    h_mode: float = 0.0
    h_mode_norm: float = 0.0
    k_mode: int = 0
    eff_mode: float = 0.0
    mode_codebook: str | None = None
    n_unassigned: int = 0
    unassigned_rate: float = 0.0
    cac_mean: float | None = None
    cac_median: float | None = None
    cac_p90: float | None = None
    n_duplicates: int = 0
    duplicate_rate: float = 0.0
    notes: list[str] = Field(default_factory=list)


# --- §6 adaptive evolution -------------------------------------------------------------------


class EvolutionParams(Record):
    """Knobs of the §6 update rule, with the docs/methods.md defaults."""

    alpha0: float = Field(default=0.5, ge=0.0)
    lam: float = Field(default=1.0, ge=0.0, description="lambda: sharpening on concentration")
    beta: float = Field(default=2.0, ge=0.0, description="weight of informative failures")
    eta: float = Field(default=1.0, ge=0.0, description="exponent of the validity rate")
    delta: float = Field(default=0.5, ge=0.0, description="difficulty tilt")
    temperature: float = Field(default=2.0, gt=0.0)
    kappa: float = Field(default=5.0, gt=0.0, description="cap = kappa / m")
    eps_floor: float = Field(default=0.05, ge=0.0, le=1.0)
    stop_h_dom: float = Field(default=0.9, ge=0.0, le=1.0)
    stop_h_mode: float = Field(default=0.8, ge=0.0, le=1.0)
    max_rounds: int | None = Field(default=None, ge=1)


class WeightReason(StrEnum):
    """The factor with the largest log-contribution to an option's weight (docs/methods.md §6)."""

    RARITY = "rarity"
    INFORMATIVE_FAILURE = "informative_failure"
    VALIDITY = "validity"
    DIFFICULTY = "difficulty"
    FLOOR = "floor"
    CAP = "cap"
    NONE = "none"  # every factor equal across the options: the weight stays uniform


class OptionStats(Record):
    """What §6 knows of one option at one level: ``n``, ``f``, ``v`` and its difficulty bin."""

    option: str
    n: int = Field(default=0, ge=0, description="accepted trajectories so far (all rounds)")
    f: float = Field(default=0.0, ge=0.0, le=1.0, description="informative failure rate")
    v: float = Field(default=0.5, gt=0.0, le=1.0, description="Laplace-smoothed validity rate")
    bin: int = Field(default=0, ge=0, description="difficulty bin (difficulty level only)")
    failures: int = Field(default=0, ge=0, description="informative failures, last round")
    rollouts: int = Field(default=0, ge=0, description="valid rollouts, last round")
    valid: int = Field(default=0, ge=0)
    attempted: int = Field(default=0, ge=0)


class WeightChange(Record):
    """One option's weight for the next round and why it moved (one stored row, §6)."""

    round: int = 0
    level: str
    parent: str | None = Field(default=None, description="the domain, at the cluster level")
    option: str
    n: int
    f: float
    v: float
    bin: int = 0
    h_norm: float
    alpha: float
    s: float
    q: float = Field(description="after the temperature")
    q_capped: float = Field(description="after water_fill_cap")
    p_old: float
    p_new: float
    reason: WeightReason
    contributions: dict[str, float] = Field(default_factory=dict)


class RolloutOutcome(Record):
    """One rollout as evolution counts it (docs/methods.md §6).

    ``mode`` is the measured mode (§5.2 rule label, or the codebook mode's majority label) and
    ``difficulty`` the measured CAC bin; each falls back to the cell's target when None.
    """

    trajectory_id: str
    round: int = 0
    domain: str
    cell: Cell
    mode: ReasoningMode | None = None
    difficulty: Difficulty | None = None
    accepted: bool = False
    passed: bool = False
    failure_class: FailureClass | None = None
    task_pass_rate: float | None = Field(default=None, ge=0.0, le=1.0)
    task_ebr: float | None = Field(default=None, ge=0.0, le=1.0)


class CellCatalog(Record):
    """The options evolution weighs: the domain catalog, the clusters, what each supports."""

    domains: list[str] = Field(default_factory=lambda: [d.value for d in Domain])
    clusters: dict[str, str] = Field(description="cluster_id -> domain")
    shapes: dict[str, list[PathShape]] = Field(
        default_factory=dict, description="cluster_id -> supported shapes (missing: all)"
    )
    modes: list[ReasoningMode] = Field(default_factory=lambda: list(ReasoningMode))
    difficulties: list[Difficulty] = Field(default_factory=lambda: list(Difficulty))


class RoundWeights(Record):
    """The next round's sampling weights, level -> option -> p, and every change's row.

    ``weights`` has the layout ``planning.cells.sample_cells`` takes; at the cluster level the
    weights sum to 1 within each domain.
    """

    round: int
    weights: dict[str, dict[str, float]]
    h_norm: dict[str, float] = Field(default_factory=dict)
    changes: list[WeightChange] = Field(default_factory=list)
