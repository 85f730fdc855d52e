"""RunConfig: the plain, hashable description of one run (stored with it, hashed into ids)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from trajsynth.schemas._base import Record, stable_hash
from trajsynth.schemas.sandbox import SandboxKind, SandboxLimits

__all__ = ["Budgets", "LLMConfig", "RolloutMode", "RunConfig"]


class RolloutMode(StrEnum):
    LINEAR = "linear"
    TREE = "tree"


class LLMConfig(Record):
    """Where the LLM is and how to sample. The API key is never part of it."""

    base_url: str | None = Field(default=None, description="None: start the embedded server")
    model: str = "SmolLM2-135M-Instruct"
    temperature: float = Field(default=0.3, ge=0.0, le=2.0)
    top_p: float = Field(default=0.95, gt=0.0, le=1.0)
    max_tokens: int = Field(default=256, ge=1)
    logprobs: bool = True
    top_logprobs: int = Field(default=5, ge=0, le=20)
    max_concurrency: int = Field(default=4, ge=1)
    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)
    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=3, ge=0)


class Budgets(Record):
    max_turns: int = Field(default=6, ge=1, description="assistant turns per rollout")
    max_tool_calls: int = Field(default=12, ge=0)
    max_tokens: int = Field(default=6000, ge=1, description="generated tokens per rollout")
    tool_timeout_s: float = Field(default=20.0, gt=0)


class RunConfig(Record):
    tasks: int = Field(default=12, ge=1, description="blueprints per round")
    clusters: list[str] = Field(default_factory=list, description="empty: every cluster")
    seed: int = 0
    rounds: int = Field(default=1, ge=1)
    samples: int = Field(default=1, ge=1, description="rollouts per task")
    rollout_mode: RolloutMode = RolloutMode.LINEAR
    llm: LLMConfig = Field(default_factory=LLMConfig)
    budgets: Budgets = Field(default_factory=Budgets)
    sandbox: SandboxKind = SandboxKind.AUTO
    sandbox_limits: SandboxLimits = Field(default_factory=SandboxLimits)
    planner_retries: int = Field(default=2, ge=0)
    assistant_tool_choice: Literal["auto", "required"] | None = Field(
        default=None,
        description=(
            "tool_choice on assistant turns that follow a user message; None: 'required' for "
            "the embedded SmolLM2 (it almost never calls a tool under 'auto'), else 'auto'"
        ),
    )
    assistant_tool_choice_after_tool: Literal["auto", "none"] | None = Field(
        default=None,
        description=(
            "tool_choice right after tool results; None: 'none' for the embedded SmolLM2 (it "
            "repeats calls instead of answering), else 'auto'"
        ),
    )

    def config_hash(self) -> str:
        return stable_hash(self.model_dump(mode="json"), length=16)
