"""The user simulator: an LLM playing the user of a blueprint (tau2-bench's contract).

It sees the persona, the goal and the hidden facts, never the tool path or the constraints. It
reveals a hidden fact only when the assistant asks for it and ends the dialogue with an explicit
stop marker. Leaving the role (speaking as the assistant, emitting tool calls) or leaking a
hidden fact unasked ends the rollout with failure class ``simulator``: excluded from pass rates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from trajsynth.schemas import Blueprint, Message, MessageRole

__all__ = ["UserReply", "UserSimulator", "check_user_reply"]

STOP_MARKER = "###STOP###"

_ROLE_BREAK = re.compile(
    r"^\s*(assistant\s*:|as an ai\b|i am an ai\b|<tool_call>|\{\s*\"name\"\s*:)|functions\.",
    re.IGNORECASE,
)
_DONE_PHRASES = re.compile(
    r"\b(thanks?|thank you|that'?s all|that is all|perfect|great,? that|bye)\b", re.IGNORECASE
)


ECHO_THRESHOLD = 0.6
_WORD = re.compile(r"\w+")


def _overlap(reply: str, assistant: str) -> float:
    """Share of the reply's words that repeat the assistant's message (order-free)."""
    mine = set(_WORD.findall(reply.lower()))
    theirs = set(_WORD.findall(assistant.lower()))
    if len(mine) < 6 or not theirs:
        return 0.0
    return len(mine & theirs) / len(mine)


@dataclass(frozen=True)
class UserReply:
    text: str
    stop: bool
    role_break: str | None  # why the reply is out of role, or None


class UserSimulator(BaseModel):
    """Configuration only; ``agents.rollout`` owns the loop."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    system_prompt: str = Field(
        default=(
            "You are a customer talking to a service assistant. Stay in character.\n"
            "Who you are: {persona}\n"
            "What you want: {goal}\n"
            "Facts you know but say ONLY if the assistant asks for them: {hidden}\n"
            "Rules: write one or two short sentences as the customer. Never pretend to be the "
            "assistant. When your request is done, or the assistant gave you the answer, reply "
            "with a short thanks and then " + STOP_MARKER + "."
        )
    )
    temperature: float | None = Field(default=0.3)
    max_tokens: int = 96
    opening_from_goal: bool = Field(
        default=True,
        description="the first user message is the blueprint's goal, written by the planner",
    )

    def system_message(self, blueprint: Blueprint) -> Message:
        hidden = json.dumps(blueprint.hidden_info) if blueprint.hidden_info else "nothing else"
        return Message(
            role=MessageRole.SYSTEM,
            content=self.system_prompt.format(
                persona=blueprint.persona, goal=blueprint.goal, hidden=hidden
            ),
        )

    def view(self, blueprint: Blueprint, dialogue: Sequence[Message]) -> list[Message]:
        """The conversation from the user's side: roles flipped, tool traffic left out."""
        out = [self.system_message(blueprint)]
        for msg in dialogue:
            if msg.role is MessageRole.USER:
                out.append(Message(role=MessageRole.ASSISTANT, content=msg.content))
            elif msg.role is MessageRole.ASSISTANT and msg.content:
                out.append(Message(role=MessageRole.USER, content=msg.content))
        return out


def check_user_reply(
    text: str, blueprint: Blueprint, last_assistant: str, revealed: set[str]
) -> UserReply:
    """Classify a simulator reply: stop, in role, or out of role (and why).

    >>> from trajsynth.schemas import Blueprint
    >>> check_user_reply("Thanks! ###STOP###", None, "Your order ships today.", set()).stop
    True
    """
    stripped = text.strip()
    stop = STOP_MARKER in stripped
    clean = stripped.replace(STOP_MARKER, "").strip()
    if not clean and not stop:
        return UserReply(clean, False, "empty reply")
    if _ROLE_BREAK.search(clean):
        return UserReply(clean, stop, "spoke as the assistant or emitted a tool call")
    if _overlap(clean, last_assistant) >= ECHO_THRESHOLD:
        return UserReply(clean, stop, "echoed the assistant's message (spoke as the assistant)")
    if blueprint is not None:
        asked = "?" in last_assistant
        for slot, value in blueprint.hidden_info.items():
            shown = str(value)
            if slot in revealed or len(shown) < 3:
                continue
            if shown.lower() in clean.lower() and not asked:
                return UserReply(clean, stop, f"leaked hidden fact {slot!r} without being asked")
    if not stop and _DONE_PHRASES.search(clean) and len(clean) < 60:
        # A short thanks after an answer ends the dialogue even when the marker was forgotten.
        stop = True
    return UserReply(clean, stop, None)
