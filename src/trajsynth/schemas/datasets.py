"""Rows of the exported SFT and RL datasets (docs/design.md §11)."""

from __future__ import annotations

from pydantic import Field

from trajsynth.schemas._base import JsonValue, Record
from trajsynth.schemas.constraints import Constraint
from trajsynth.schemas.env import EnvSpec
from trajsynth.schemas.messages import Message

__all__ = ["RLRow", "SFTRow"]


class SFTRow(Record):
    """One trajectory in the layout TRL's SFTTrainer and HF chat templates read."""

    id: str
    messages: list[Message]
    tools: list[dict[str, JsonValue]]
    task_id: str
    cluster_id: str
    score: float
    verdict: bool
    metadata: dict[str, JsonValue] = Field(default_factory=dict)


class RLRow(Record):
    """One task: the prompt up to the first assistant turn, and how to judge a completion."""

    id: str
    prompt: list[Message]
    tools: list[dict[str, JsonValue]]
    env: EnvSpec
    constraints: list[Constraint]
    metadata: dict[str, JsonValue] = Field(default_factory=dict)
