"""Rollouts as trees of nodes; a trajectory is one root-to-leaf path (docs/methods.md §9.1)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from trajsynth.schemas._base import JsonValue, Record
from trajsynth.schemas.failures import FailureClass
from trajsynth.schemas.messages import Message

__all__ = [
    "AgentRole",
    "LLMUsage",
    "Node",
    "ObsClass",
    "RolloutTree",
    "Termination",
    "ToolCallRecord",
    "Trajectory",
    "UsageTotals",
]


class AgentRole(StrEnum):
    PLANNER = "planner"
    USER = "user"
    ASSISTANT = "assistant"
    VERIFIER = "verifier"


class Termination(StrEnum):
    """Why a rollout stopped; the named stop condition that fired."""

    USER_STOP = "user_stop"  # the simulator said the goal is met (stop marker)
    ASSISTANT_DONE = "assistant_done"  # assistant answered and the user had nothing to add
    MAX_TURNS = "max_turns"
    TOOL_BUDGET = "tool_budget"
    TOKEN_BUDGET = "token_budget"
    CONTEXT_LIMIT = "context_limit"
    TOOL_TIMEOUT = "tool_timeout"
    EARLY_STOP = "early_stop"
    PRUNED = "pruned"
    SIMULATOR_ERROR = "simulator_error"
    INFRA_ERROR = "infra_error"
    # the tool server died while running the model's program, the sandbox alive: the
    # policy broke its own environment (a `model` failure, never excused as infra)
    ENVIRONMENT_BROKEN = "environment_broken"


class ObsClass(StrEnum):
    OK = "ok"
    EMPTY = "empty"
    ERROR = "error"


class LLMUsage(Record):
    """One LLM call: who made it, what it cost. Latency is volatile (never in an id)."""

    role: AgentRole
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cached: bool = False


class UsageTotals(Record):
    role: AgentRole
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0


class ToolCallRecord(Record):
    """One tool call the policy made, and what came back."""

    call_id: str
    tool: str
    raw_arguments: str
    arguments: dict[str, JsonValue] | None = None  # None when the raw text did not parse
    observation: str = ""
    obs_class: ObsClass = ObsClass.OK
    failure_class: FailureClass | None = None
    error_type: str | None = None
    latency_s: float = 0.0
    turn: int = 0


class Node(Record):
    """One assistant turn plus the tool results and user reply it produced."""

    node_id: str
    tree_id: str
    parent_id: str | None = None
    depth: int = 0
    messages: list[Message] = Field(default_factory=list)
    calls: list[ToolCallRecord] = Field(default_factory=list)
    usage: list[LLMUsage] = Field(default_factory=list)
    step_entropy: float | None = None
    confidence: float | None = None
    branch_probability: float | None = None
    n_children: int = 0
    snapshot_id: str | None = None
    prune_reason: str | None = None
    value: float | None = Field(default=None, description="mean score of the leaves below")
    advantage: float | None = Field(default=None, description="value minus the parent's")
    process_reward: float | None = Field(default=None, description="TreeRL (G + L)/sqrt(n)")
    n_leaves: int | None = Field(default=None, description="counted leaves below")
    branch: dict[str, JsonValue] | None = Field(
        default=None, description="how its number of children was decided (docs/methods.md §9.2)"
    )


class RolloutTree(Record):
    tree_id: str
    run_id: str
    blueprint_id: str
    round: int = 0
    rollout_mode: str = "linear"
    n_nodes: int = 0
    n_leaves: int = 0
    pass_rate: float | None = None
    total_tokens: int = 0
    wall_s: float = 0.0
    generated_tokens: int = 0
    n_pruned: int = 0
    n_passed: int | None = None
    budget: dict[str, JsonValue] = Field(default_factory=dict, description="limits and use")


class Trajectory(Record):
    """A root-to-leaf path: the whole conversation of one rollout and how it ended."""

    trajectory_id: str
    run_id: str
    blueprint_id: str
    tree_id: str
    leaf_node_id: str
    cluster_id: str
    round: int = 0
    seed: int = 0
    node_ids: list[str] = Field(default_factory=list)
    messages: list[Message]
    tools: list[dict[str, JsonValue]] = Field(default_factory=list)
    calls: list[ToolCallRecord] = Field(default_factory=list)
    final_answer: str | None = None
    termination: Termination
    failure_class: FailureClass | None = None
    failure_detail: str | None = None
    attempts: int = 1
    usage: list[UsageTotals] = Field(default_factory=list)
    n_turns: int = 0
    user_resamples: int = Field(
        default=0, ge=0, description="simulator draws made again after a reply failed its checks"
    )
    user_scripted: int = Field(
        default=0, ge=0, description="user turns written from the blueprint (every draw failed)"
    )
    final_state_hash: str | None = None
    wall_s: float = 0.0
    source: Literal["rollout", "gold"] = Field(
        default="rollout", description="'gold': a blueprint's gold run replayed"
    )

    @property
    def total_tokens(self) -> int:
        return sum(u.prompt_tokens + u.completion_tokens for u in self.usage)
