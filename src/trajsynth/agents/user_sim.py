"""The user simulator: an LLM playing the user of a blueprint (tau2-bench's contract).

It sees the persona, the goal and the hidden facts, never the tool path or the constraints. It
reveals a hidden fact only when the assistant asks for it and ends the dialogue with an explicit
stop marker. A reply that leaves the role (speaks as the assistant, echoes it, emits tool calls)
or leaks a hidden fact unasked is never used: the turn is drawn again (``resamples`` times, each
with another seed and a higher temperature), and when every draw fails ``scripted_user_turn``
writes the turn from the blueprint without a model (the stop marker when the goal's checks look
met, the hidden facts the assistant asked for by name, else the goal restated). Only when that
fails the checks too does the rollout end with failure class ``simulator`` (excluded from pass
rates). The trajectory counts both (``user_resamples``, ``user_scripted``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from trajsynth.curation.verify import CHECKERS, VerifyContext
from trajsynth.schemas import (
    Blueprint,
    CodeTestsPass,
    EnvState,
    FinalState,
    Message,
    MessageRole,
    Termination,
    ToolCallRecord,
    Trajectory,
)

__all__ = [
    "UserReply",
    "UserSimulator",
    "asked_slots",
    "check_user_reply",
    "goal_looks_met",
    "scripted_user_turn",
]

STOP_MARKER = "###STOP###"

_ROLE_BREAK = re.compile(
    r"^\s*(assistant\s*:|as an ai\b|i am an ai\b|<tool_call>|\{\s*\"name\"\s*:)|functions\.",
    re.IGNORECASE,
)
# the assistant's lines said by the user: a small user model answers an answer by offering
# help ("Hello, I'm Alex. What can I do for you today?"), so nobody is asking anything
_OFFERS_HELP = re.compile(
    r"\b(how (can|may|could) i (help|assist)|what can i (do|help) (for|with) you"
    r"|(i'?m|i am) (ready|here|happy|glad) to (help|assist)"
    r"|what'?s your (request|question)|what is your (request|question)"
    r"|how can i be of (help|assistance)|is there anything (else )?i can (do|help))",
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
    resamples: int = Field(
        default=3,
        ge=0,
        description="draws of a user turn after one that failed the checks, before the "
        "scripted fallback",
    )
    scripted_fallback: bool = Field(
        default=True,
        description="when every draw failed, write the turn from the blueprint (off: the "
        "rollout ends as a simulator failure)",
    )
    stop_when_met: bool = Field(
        default=False,
        description="after an answer in words, thank and stop without a draw when "
        "``goal_looks_met`` (the end state is still verified by the judge)",
    )
    opening_from_goal: bool = Field(
        default=True,
        description="the first user message is the blueprint's goal, written by the planner",
    )

    def draw(self, base_seed: int, attempt: int) -> tuple[int, float | None]:
        """(seed, temperature) of draw ``attempt`` of one user turn (0: the first draw): each
        resample another seed and a higher temperature, so a model that parrots the assistant
        at one setting gets a different reply."""
        if attempt == 0:
            return base_seed, self.temperature
        base = 0.7 if self.temperature is None else self.temperature
        return base_seed + 7907 * attempt, round(min(1.0, base + 0.3 * attempt), 3)

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
    text: str, blueprint: Blueprint | None, last_assistant: str, revealed: set[str]
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
    if _OFFERS_HELP.search(clean):
        return UserReply(clean, stop, "offered help (spoke as the assistant)")
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


# --- the scripted fallback: a user turn written from the blueprint, no model -------------------

_GENERIC = {"id", "ids", "the", "of", "my", "a", "an", "value", "number", "no", "num"}


def _stem(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") else word


def _slot_words(slot: str) -> list[str]:
    # a slot numbered by the planner ("path_3": the third call's path) is asked for by its
    # name; nobody says the number
    words = [w for w in re.split(r"[_\W]+", slot.lower()) if w and not w.isdigit()]
    specific = [w for w in words if w not in _GENERIC]
    return [_stem(w) for w in (specific or words)]


def asked_slots(blueprint: Blueprint, last_assistant: str) -> list[str]:
    """The hidden slots the assistant's message asks for by name: a question (``?``, as the
    leak check reads "asked") naming every specific word of the slot ("order_id" -> "order",
    "departure_date" -> "departure" and "date"; plurals ignored)."""
    if "?" not in last_assistant:
        return []
    said = {_stem(w) for w in _WORD.findall(last_assistant.lower())}
    return [
        slot
        for slot in blueprint.hidden_info
        if (words := _slot_words(slot)) and all(w in said for w in words)
    ]


def _say(value: object) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(_say(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {_say(v)}" for k, v in value.items())
    return str(value)


def goal_looks_met(
    blueprint: Blueprint, calls: Sequence[ToolCallRecord], answer: str, tools: Sequence[dict]
) -> bool:
    """Whether the hard constraints that can be checked mid-dialogue (every kind but the end
    state and sandbox code tests) all hold on the calls so far and the assistant's last words,
    with at least one such constraint: the scripted user may then thank and stop."""
    checkable = [
        c for c in blueprint.constraints if c.hard and not isinstance(c, FinalState | CodeTestsPass)
    ]
    if not checkable:
        return False
    partial = Trajectory(
        trajectory_id="partial",
        run_id="partial",
        blueprint_id=blueprint.blueprint_id,
        tree_id="partial",
        leaf_node_id="partial",
        cluster_id=blueprint.cluster_id,
        messages=[],
        tools=list(tools),
        calls=list(calls),
        final_answer=answer or None,
        termination=Termination.USER_STOP,
    )
    ctx = VerifyContext.build(partial, EnvState(state_hash="unavailable", readable=False))
    for constraint in checkable:
        check = CHECKERS.find(constraint.kind)
        if check is None or not check(constraint, ctx)[0]:
            return False
    return True


def scripted_user_turn(
    blueprint: Blueprint,
    last_assistant: str,
    revealed: set[str],
    *,
    goal_met: bool = False,
) -> tuple[UserReply, list[str]] | None:
    """A user turn written from the blueprint when every simulator draw failed the checks:
    thanks and the stop marker when ``goal_met``; else the hidden facts the assistant asked for
    by name (never one it did not ask for); else the goal restated; else a short nudge. The
    first candidate that passes ``check_user_reply`` wins, with the slots it reveals; None when
    none does (the turn is then a ``simulator`` failure)."""
    candidates: list[tuple[str, list[str]]] = []
    if goal_met:
        candidates.append(("Thanks, that is all I needed. " + STOP_MARKER, []))
    slots = asked_slots(blueprint, last_assistant)
    if slots:
        facts = " ".join(
            f"My {slot.replace('_', ' ')} is {_say(blueprint.hidden_info[slot])}." for slot in slots
        )
        candidates.append((facts, slots))
    candidates.append((f"To repeat my request: {blueprint.goal}", []))
    candidates.append(("Please go ahead with my request.", []))
    for text, shown in candidates:
        allowed = revealed | set(shown)
        if any(
            _said(value, text)
            for slot, value in blueprint.hidden_info.items()
            if slot not in allowed
        ):
            continue  # never a fact the assistant did not ask for (a goal that holds one)
        checked = check_user_reply(text, blueprint, last_assistant, allowed)
        if checked.role_break is None:
            return checked, shown
    return None


def _said(value: object, text: str) -> bool:
    shown = _say(value)
    return len(shown) >= 3 and shown.lower() in text.lower()
