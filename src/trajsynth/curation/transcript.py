"""A trajectory as a person reads it: turns, tool calls with their arguments and results, the
verdict constraint by constraint, the signals that fired and the failure class.

One reading for every page that shows a trajectory (``synth show trajectory`` renders it with
rich, the dashboard with markdown), so the terminal and the browser never disagree. Long tool
results are folded: the first and last lines are kept and the middle is counted, not shown.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, Field

from trajsynth.schemas import Message, Signals, Trajectory, Verdict

__all__ = ["Entry", "ConstraintLine", "Transcript", "fold", "transcript"]

FOLD_LINES = 12
FOLD_CHARS = 1_200


class Entry(BaseModel):
    """One line of the dialogue: a turn, a call (``name`` and ``arguments``) or a result."""

    kind: Literal["system", "user", "assistant", "call", "result"]
    text: str = ""
    name: str | None = None
    arguments: str | None = None  # pretty JSON, or the raw text when it did not parse
    error: bool = False  # a result the tool marked as an error
    folded_lines: int = 0  # lines of a long result left out


class ConstraintLine(BaseModel):
    kind: str
    hard: bool
    passed: bool
    why: str


class Transcript(BaseModel):
    trajectory_id: str
    cluster_id: str
    termination: str
    failure_class: str | None = None
    failure_detail: str | None = None
    passed: bool | None = None  # None: not verified
    score: float | None = None
    excluded: bool = False
    entries: list[Entry] = Field(default_factory=list)
    constraints: list[ConstraintLine] = Field(default_factory=list)
    signals_fired: list[str] = Field(default_factory=list)
    constraints_passed: bool | None = None  # None: judged before hygiene, or not verified
    failed_checks: list[str] = Field(default_factory=list)  # hygiene checks that failed
    recovered: bool = False


def fold(text: str, *, max_lines: int = FOLD_LINES, max_chars: int = FOLD_CHARS) -> tuple[str, int]:
    """``text`` cut to its first and last lines when long; returns it and the lines left out.

    >>> fold("\\n".join(str(i) for i in range(30)), max_lines=4)
    ('0\\n1\\n…\\n28\\n29', 26)
    """
    lines = text.splitlines()
    if len(lines) <= max_lines and len(text) <= max_chars:
        return text, 0
    if len(lines) <= max_lines:  # few but long lines: cut by characters
        half = max_chars // 2
        return f"{text[:half]}…{text[-half:]}", 0
    head, tail = lines[: max_lines // 2], lines[-(max_lines // 2) :]
    return "\n".join([*head, "…", *tail]), len(lines) - len(head) - len(tail)


def _pretty(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), indent=1, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return arguments


def _entries(messages: list[Message], errors: dict[str, bool]) -> list[Entry]:
    out: list[Entry] = []
    for message in messages:
        role = str(message.role)
        if role == "tool":
            text, folded = fold(message.content or "")
            out.append(
                Entry(
                    kind="result",
                    text=text,
                    name=message.name,
                    error=errors.get(message.tool_call_id or "", False),
                    folded_lines=folded,
                )
            )
            continue
        if message.content:
            kind = role if role in ("system", "user", "assistant") else "assistant"
            out.append(Entry(kind=kind, text=message.content))
        for call in message.tool_calls or []:
            out.append(
                Entry(
                    kind="call",
                    name=call.function.name,
                    arguments=_pretty(call.function.arguments),
                )
            )
    return out


def _fired(signals: Signals | None) -> list[str]:
    if signals is None:
        return []
    flags = signals.model_dump()
    return sorted(k for k, v in flags.items() if isinstance(v, bool) and v)


def transcript(
    trajectory: Trajectory, verdict: Verdict | None = None, signals: Signals | None = None
) -> Transcript:
    """The reading of one trajectory (and its verdict and signals when stored)."""
    errors = {c.call_id: c.obs_class != "ok" for c in trajectory.calls}
    return Transcript(
        trajectory_id=trajectory.trajectory_id,
        cluster_id=trajectory.cluster_id,
        termination=str(trajectory.termination),
        failure_class=str(trajectory.failure_class) if trajectory.failure_class else None,
        failure_detail=trajectory.failure_detail,
        passed=verdict.passed if verdict else None,
        score=verdict.score if verdict else None,
        excluded=verdict.excluded if verdict else False,
        entries=_entries(trajectory.messages, errors),
        constraints=[
            ConstraintLine(kind=r.kind, hard=r.hard, passed=r.passed, why=r.detail)
            for r in (verdict.results if verdict else [])
        ]
        + [
            ConstraintLine(kind=f"hygiene: {h.check}", hard=True, passed=h.passed, why=h.detail)
            for h in (verdict.hygiene if verdict else [])
        ],
        signals_fired=_fired(signals),
        constraints_passed=verdict.constraints_passed if verdict else None,
        failed_checks=verdict.failed_checks if verdict else [],
        recovered=verdict.recovered if verdict else False,
    )
