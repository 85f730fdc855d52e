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
    blueprint_id: str
    cluster_id: str
    domain: str
    cell: Cell
    initial_state_id: str
    tool_path: list[PlannedCall]
    slots: dict[str, JsonValue] = Field(default_factory=dict)
    persona: str
    goal: str
    hidden_info: dict[str, JsonValue] = Field(default_factory=dict)
    uses_code_tool: bool = False
    n_writes: int = 0
    gold_run: GoldRun
    constraints: list[Constraint]
    max_turns: int = Field(default=8, ge=1)
    seed: int
    round: int = 0
    # added by the planner (agents/planner): where the words came from ("llm", or the
    # deterministic "template" after the LLM's drafts failed), how many LLM drafts were tried,
    # WRIT's reads before each write (§14), and the planner's LLM calls (cost by role).
    words_source: Literal["llm", "template"] = "llm"
    words_attempts: int = Field(default=0, ge=0)
    reads_before_write: list[int] = Field(default_factory=list)
    usage: list[LLMUsage] = Field(default_factory=list)
    # the mutation lint's figures (planning.mutants); None where it did not run
    mutation_lint: MutationLint | None = None

    def signature(self) -> str:
        """The task as an exercise: its cluster, its tool path (the tools in order) and its
        constraints (canonical JSON). Two blueprints with one signature are the same exercise
        with other data and words: the leakage check (``training.splits``) and the held-out
        planner (``planning.heldout``) compare these."""
        path = [call.tool for call in self.tool_path]
        checks = sorted(canonical_json(c.model_dump(mode="json")) for c in self.constraints)
        return stable_hash([self.cluster_id, path, checks], length=24)


class BlueprintAttempt(Record):
    """A planned path that was rejected, with why; the validity rate of §6 counts these."""

    attempt_id: str
    cluster_id: str
    cell: Cell
    seed: int
    round: int = 0
    accepted: bool
    reason: str = ""
    detail: str = ""
    # added by the planner: the accepted blueprint, the words' origin, the LLM calls spent
    blueprint_id: str | None = None
    words_source: Literal["llm", "template"] | None = None
    usage: list[LLMUsage] = Field(default_factory=list)
