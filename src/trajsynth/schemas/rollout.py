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

    role: AgentRole = Field(description="planner, user simulator, assistant or verifier")
    model: str = Field(description="the model")
    prompt_tokens: int = Field(default=0, description="prompt tokens")
    completion_tokens: int = Field(default=0, description="completion tokens")
    latency_s: float = Field(default=0.0, description="seconds to answer")
    cached: bool = Field(default=False, description="answered from the cache")


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

    node_id: str = Field(description="content id of the node")
    tree_id: str = Field(description="its tree")
    parent_id: str | None = Field(
        default=None, description="the node it branched from (None at the root)"
    )
    depth: int = Field(default=0, description="turns from the root")
    messages: list[Message] = Field(default_factory=list, description="the messages it adds")
    calls: list[ToolCallRecord] = Field(
        default_factory=list, description="the tool calls made at this node, with results"
    )
    usage: list[LLMUsage] = Field(default_factory=list, description="tokens and time by role")
    step_entropy: float | None = Field(
        default=None, description="the policy's token entropy at the step (nats)"
    )
    confidence: float | None = Field(default=None, description="1 - normalised entropy")
    branch_probability: float | None = Field(
        default=None, description="probability it was branched on"
    )
    n_children: int = Field(default=0, description="children grown from it")
    snapshot_id: str | None = Field(
        default=None, description="the sandbox snapshot its children restore"
    )
    prune_reason: str | None = Field(
        default=None, description="why its branch was cut (None: not cut)"
    )
    value: float | None = Field(
        default=None, description="share of clean passes among the leaves below"
    )
    advantage: float | None = Field(default=None, description="value minus its parent's value")
    process_reward: float | None = Field(
        default=None, description="the step's reward as a process signal: TreeRL (G + L)/sqrt(n)"
    )
    n_leaves: int | None = Field(default=None, description="counted leaves below it")
    branch: dict[str, JsonValue] | None = Field(
        default=None, description="how its number of children was decided (docs/methods.md §9.2)"
    )


class RolloutTree(Record):
    """A task's rollouts grown as one tree (a linear sample is a one-leaf tree)."""

    tree_id: str = Field(description="content id of the rollout tree")
    run_id: str = Field(description="the run")
    blueprint_id: str = Field(description="the task")
    round: int = Field(default=0, description="the round")
    rollout_mode: str = Field(default="linear", description="tree or independent samples")
    n_nodes: int = Field(default=0, description="nodes grown")
    n_leaves: int = Field(default=0, description="finished branches")
    pass_rate: float | None = Field(default=None, description="share of counted leaves that passed")
    total_tokens: int = Field(default=0, description="prompt plus completion tokens of the tree")
    wall_s: float = Field(default=0.0, description="seconds to grow it")
    generated_tokens: int = Field(default=0, description="completion tokens of the tree")
    n_pruned: int = Field(default=0, description="branches cut early")
    n_passed: int | None = Field(default=None, description="leaves that passed")
    budget: dict[str, JsonValue] = Field(
        default_factory=dict, description="the budgets and what was spent"
    )


class Trajectory(Record):
    """A root-to-leaf path: the whole conversation of one rollout and how it ended."""

    trajectory_id: str = Field(description="content id of the rollout (root-to-leaf path)")
    run_id: str = Field(description="the run")
    blueprint_id: str = Field(description="the task")
    tree_id: str = Field(description="its tree")
    leaf_node_id: str = Field(description="the leaf it ends at")
    cluster_id: str = Field(description="the cluster")
    round: int = Field(default=0, description="the round")
    seed: int = Field(default=0, description="the rollout's seed")
    node_ids: list[str] = Field(default_factory=list, description="the nodes from root to leaf")
    messages: list[Message] = Field(description="the conversation, OpenAI chat format")
    tools: list[dict[str, JsonValue]] = Field(
        default_factory=list, description="the tool schemas the assistant saw"
    )
    calls: list[ToolCallRecord] = Field(
        default_factory=list, description="every tool call with its result"
    )
    final_answer: str | None = Field(default=None, description="the assistant's last words")
    termination: Termination = Field(description="why it ended (user stop, max turns, error, ...)")
    failure_class: FailureClass | None = Field(
        default=None, description="infra, simulator, tool or model (None: none)"
    )
    failure_detail: str | None = Field(default=None, description="the failure's message")
    attempts: int = Field(default=1, description="tries it took (infra retries)")
    usage: list[UsageTotals] = Field(default_factory=list, description="tokens and time by role")
    n_turns: int = Field(default=0, description="assistant turns")
    user_resamples: int = Field(
        default=0,
        ge=0,
        description="user-simulator draws made again after a reply failed its checks "
        "(echo, role, leak)",
    )
    user_scripted: int = Field(
        default=0,
        ge=0,
        description="user turns written from the blueprint without a model (every simulator "
        "draw failed)",
    )
    final_state_hash: str | None = Field(
        default=None, description="hash of the end state (final_states)"
    )
    wall_s: float = Field(default=0.0, description="seconds it took")
    source: Literal["rollout", "gold"] = Field(
        default="rollout",
        description="rollout (a policy acted it out) or gold (a blueprint's gold run replayed)",
    )

    @property
    def total_tokens(self) -> int:
        return sum(u.prompt_tokens + u.completion_tokens for u in self.usage)
