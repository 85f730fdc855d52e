"""Blueprints: a task before anyone acts it out (docs/methods.md §3)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from trajsynth.schemas._base import JsonValue, Record, canonical_json, stable_hash
from trajsynth.schemas.constraints import Constraint
from trajsynth.schemas.env import EnvState
from trajsynth.schemas.rollout import LLMUsage

__all__ = [
    "ArgBinding",
    "Blueprint",
    "BlueprintAttempt",
    "Cell",
    "Difficulty",
    "GoldCall",
    "GoldRun",
    "LiteralArg",
    "MutationLint",
    "PathShape",
    "PlannedCall",
    "ReasoningMode",
    "RefArg",
    "SlotArg",
]


class PathShape(StrEnum):
    SINGLE = "single"
    CHAIN = "chain"
    FAN_OUT = "fan_out"
    FAN_IN = "fan_in"
    DIAMOND = "diamond"


class Difficulty(StrEnum):
    EASY = "easy"
    MEDIUM = "medium"
    HARD = "hard"


class ReasoningMode(StrEnum):
    """Rule labels of docs/methods.md §5.2, also the planner's target modes."""

    CLARIFY_FIRST = "clarify_first"
    RECOVER_AFTER_ERROR = "recover_after_error"
    CODE_COMPUTE = "code_compute"
    VERIFY_AFTER_WRITE = "verify_after_write"
    EXPLORE_THEN_COMMIT = "explore_then_commit"
    PARALLEL_FANOUT = "parallel_fanout"
    DIRECT_EXECUTE = "direct_execute"


class Cell(Record):
    """The unit evolution puts weights on (docs/methods.md §6)."""

    cluster_id: str
    path_shape: PathShape
    target_mode: ReasoningMode
    difficulty: Difficulty


class LiteralArg(Record):
    kind: Literal["literal"] = "literal"
    value: JsonValue


class RefArg(Record):
    """The value of ``field`` (a dotted path) in the observation of planned step ``step``."""

    kind: Literal["ref"] = "ref"
    step: int = Field(ge=0)
    field: str


class SlotArg(Record):
    """A value the user knows (stated in the goal or in hidden_info)."""

    kind: Literal["slot"] = "slot"
    name: str


ArgBinding = Annotated[LiteralArg | RefArg | SlotArg, Field(discriminator="kind")]


class PlannedCall(Record):
    tool: str
    args: dict[str, ArgBinding] = Field(default_factory=dict)


class GoldCall(Record):
    tool: str
    arguments: dict[str, JsonValue]
    observation: JsonValue = None
    is_error: bool = False


class GoldRun(Record):
    calls: list[GoldCall]
    final_state: EnvState
    initial_state_hash: str


class MutationLint(Record):
    """What the mutation lint found (``planning.mutants``): wrong variants of the gold run
    replayed and scored against the constraints."""

    variants: int = Field(default=0, ge=0, description="wrong variants built and replayed")
    caught_first: int = Field(default=0, ge=0, description="variants the planned checks failed")
    survived: list[str] = Field(
        default_factory=list, description="variants the final checks still pass (kind: what)"
    )
    strengthened: list[str] = Field(default_factory=list, description="checks the lint added")
    final_state_catches: int = Field(
        default=0, ge=0, description="drop/change/error variants whose end state differs"
    )
    gold_passes: bool = True
    kinds: list[str] = Field(default_factory=list)
    readback: str = Field(
        default="", description="the read the probe search put on the final-state check"
    )
    readback_tried: int = Field(
        default=0, ge=0, description="reads the probe search tried (0: it did not search)"
    )

    @property
    def clean(self) -> bool:
        """No wrong variant passes and the gold run does."""
        return not self.survived and self.gold_passes


class Blueprint(Record):
    """A planned task. Each field's description is also its column's meaning in the store
    (``blueprints``); ``words_attempts``, ``reads_before_write``, ``usage`` and
    ``refused_paths`` are kept in memory only."""

    blueprint_id: str = Field(description="content id of the task (its blueprint)")
    cluster_id: str = Field(description="the cluster it runs against")
    domain: str = Field(description="the cluster's domain")
    cell: Cell = Field(
        description="the sampled cell: cluster, path shape, reasoning mode, difficulty"
    )
    initial_state_id: str = Field(description="seed of the environment's starting state")
    tool_path: list[PlannedCall] = Field(description="the planned tool calls, in order")
    slots: dict[str, JsonValue] = Field(
        default_factory=dict, description="values the planned path binds"
    )
    persona: str = Field(description="who the simulated user is")
    goal: str = Field(description="the user's goal in natural words")
    hidden_info: dict[str, JsonValue] = Field(
        default_factory=dict, description="what the user knows and reveals only when asked"
    )
    uses_code_tool: bool = Field(default=False, description="whether the task needs the code tool")
    n_writes: int = Field(default=0, description="write calls on the planned path")
    gold_run: GoldRun = Field(
        description="the planned path executed once: calls, results, end state"
    )
    constraints: list[Constraint] = Field(description="the checks that decide success")
    max_turns: int = Field(default=8, ge=1, description="turn budget of a rollout")
    seed: int = Field(description="the planning seed")
    round: int = Field(default=0, description="the round it was planned in (0-based)")
    # added by the planner (agents/planner): where the words came from ("llm", or the
    # deterministic "template" after the LLM's drafts failed), how many LLM drafts were tried,
    # WRIT's reads before each write (§14), and the planner's LLM calls (cost by role).
    words_source: Literal["llm", "template"] = Field(
        default="llm", description="llm or template (who wrote the goal)"
    )
    words_attempts: int = Field(default=0, ge=0, description="LLM drafts of the words tried")
    reads_before_write: list[int] = Field(
        default_factory=list, description="reads before each write on the path (§14)"
    )
    usage: list[LLMUsage] = Field(
        default_factory=list, description="the planner's LLM calls (stored in llm_calls)"
    )
    # the paths the planner tried and refused before this one, each "[reason] detail" (stored
    # as the accepted attempt's detail, ``BlueprintAttempt``)
    refused_paths: list[str] = Field(
        default_factory=list, description="paths tried and refused before this one"
    )
    # the mutation lint's figures (planning.mutants); None where it did not run
    mutation_lint: MutationLint | None = Field(
        default=None,
        description="the mutation lint: wrong variants of the gold run replayed, caught, "
        "survived, and the checks it added (null: not run)",
    )

    def signature(self) -> str:
        """The task as an exercise: its cluster, its tool path (the tools in order) and its
        constraints (canonical JSON). Two blueprints with one signature are the same exercise
        with other data and words: the leakage check (``training.splits``) and the held-out
        planner (``planning.heldout``) compare these."""
        path = [call.tool for call in self.tool_path]
        checks = sorted(canonical_json(c.model_dump(mode="json")) for c in self.constraints)
        return stable_hash([self.cluster_id, path, checks], length=24)


class BlueprintAttempt(Record):
    """A planned path that was rejected, with why; the validity rate of §6 counts these.
    Each field's description is also its column's meaning (``blueprint_attempts``); the
    planner's additions (the last three) are kept in memory only."""

    attempt_id: str = Field(description="content id of the attempt")
    round: int = Field(default=0, description="the round")
    cluster_id: str = Field(description="the cluster tried")
    cell: Cell = Field(description="the sampled cell")
    seed: int = Field(description="the attempt's seed")
    accepted: bool = Field(description="whether a blueprint came of it")
    reason: str = Field(default="", description="why it was rejected (a short class)")
    detail: str = Field(
        default="",
        description="the rejection's message; every path tried and refused, each "
        "'[reason] detail' joined by ' | ' (an accepted attempt: those before its blueprint)",
    )
    # added by the planner: the accepted blueprint, the words' origin, the LLM calls spent
    blueprint_id: str | None = None
    words_source: Literal["llm", "template"] | None = None
    usage: list[LLMUsage] = Field(default_factory=list)
