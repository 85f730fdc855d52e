"""Hygiene: whether a trajectory is a clean training example, whatever its task checked.

The constraints of a task say whether the outcome was reached; they say nothing of the junk
a rollout can carry on the way (a call to a tool that does not exist, a made-up tool result,
a failed call left standing, a conversation that never answers the user). A trajectory
*passes* only when its hard constraints hold and every hygiene check here holds too
(``curation.verify``); docs/verification.md states each check for users.

Each check is registered with ``@hygiene_check(name)`` (the same ``Registry`` mechanism as the
constraint checkers, docs/style.md §1) and returns ``(passed, detail)`` from a ``HygieneContext``.
They run on every trajectory of every cluster, with no model and no environment. The checks
that hold the answer to the tool results (grounded, consistent, informative; no redundant
call) live in ``curation.faithful``, registered the same way.

Decisions:

- A call *succeeded* when its arguments parsed and its observation is not an error.
- A failed call is *corrected* by a later call of the same tool that succeeded. That is the
  only recovery counted: a call to a tool that does not exist cannot be corrected, and a
  different tool succeeding later is not a correction of this one.
- Arguments are validated here against the offered tool's JSON schema (Draft 2020-12), not
  taken from the recorded failure class: an outside server may accept what its schema refuses.
- The conversation must end with the assistant's words to the user (text, no call); only a
  closing user message may follow them, and only when the user ended the conversation.
- "States the outcome": the answer holds every value the task's words asked the user to be
  told (``answer_contains`` constraints derived from ``blueprint.answer_values``, hard or
  soft), checked by the verifier's own ``answer_contains`` checker.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError, best_match

from trajsynth.schemas import (
    HygieneResult,
    MessageRole,
    ObsClass,
    Registry,
    Termination,
    ToolAccess,
    ToolCallRecord,
    Trajectory,
    canonical_json,
)
from trajsynth.schemas.results import result_error

__all__ = [
    "HygieneCheck",
    "HygieneContext",
    "check_hygiene",
    "corrected_by",
    "hygiene_check",
    "registered_checks",
]

ASKED_VALUES = "blueprint.answer_values"
"""``derived_from`` of the answer constraints that hold what the user asked to be told."""


@dataclass(frozen=True)
class HygieneContext:
    """The recorded run as the hygiene checks read it.

    ``schemas``: input schema by offered tool name (the tools the episode showed the model);
    ``answer``: the final answer; ``asked``: ``(held, detail)`` of each answer constraint that
    holds values the user asked to be told (the verifier checks them with its own checker);
    ``asked_values``: those values; ``access``: read or write by tool name where the cluster
    tagged it (else the tool's name decides, ``curation.digests.tool_access``)."""

    trajectory: Trajectory
    schemas: Mapping[str, Mapping[str, Any]]
    answer: str
    asked: Sequence[tuple[bool, str]] = field(default_factory=tuple)
    asked_values: Sequence[str | int | float] = field(default_factory=tuple)
    access: Mapping[str, ToolAccess] | None = None

    @property
    def calls(self) -> list[ToolCallRecord]:
        return list(self.trajectory.calls)


HygieneCheck = Callable[[HygieneContext], tuple[bool, str]]
CHECKS: Registry[HygieneCheck] = Registry("hygiene check")


def hygiene_check(name: str) -> Callable[[HygieneCheck], HygieneCheck]:
    """Register a hygiene check: ``(ctx) -> (passed, detail)``."""
    return CHECKS.register(name)


def registered_checks() -> list[str]:
    """The hygiene checks every trajectory is held to, sorted."""
    return CHECKS.names()


def succeeded(call: ToolCallRecord) -> bool:
    """A call happened: its arguments parsed and its result is no error, flagged or not (a
    server that answers ``Error: ...`` without ``isError``: ``schemas.results``)."""
    return (
        isinstance(call.arguments, Mapping)
        and call.obs_class != ObsClass.ERROR
        and result_error(call.observation) is None
    )


def corrected_by(calls: Sequence[ToolCallRecord], index: int) -> int | None:
    """The index of the first later call that corrects ``calls[index]`` (same tool,
    succeeded), or None."""
    tool = calls[index].tool
    return next(
        (j for j in range(index + 1, len(calls)) if calls[j].tool == tool and succeeded(calls[j])),
        None,
    )


def _show(indexes: Sequence[int], calls: Sequence[ToolCallRecord]) -> str:
    shown = [f"#{i} {calls[i].tool or '(no name)'}" for i in indexes[:4]]
    more = f" and {len(indexes) - 4} more" if len(indexes) > 4 else ""
    return ", ".join(shown) + more


def _schema_problem(raw: str, schema: Mapping[str, Any]) -> str | None:
    """Why raw arguments do not validate against ``schema``, or None."""
    try:
        args = json.loads(raw or "{}")
    except (ValueError, RecursionError):
        return "not valid JSON"
    if not isinstance(args, dict):
        return "not a JSON object"
    try:
        validator = jsonschema.Draft202012Validator(dict(schema))
        error = best_match(validator.iter_errors(args))
    except (SchemaError, RecursionError, TypeError) as exc:
        return f"the tool's schema cannot validate ({type(exc).__name__})"
    if error is None:
        return None
    where = ".".join(str(p) for p in error.path) or "arguments"
    return f"{where}: {error.message[:80]}"


# --- the checks ---------------------------------------------------------------------------


@hygiene_check("known_tools")
def _known_tools(ctx: HygieneContext) -> tuple[bool, str]:
    calls = ctx.calls
    unknown = [i for i, c in enumerate(calls) if c.tool not in ctx.schemas]
    if unknown:
        names = sorted({calls[i].tool for i in unknown})
        return False, f"call(s) {_show(unknown, calls)} name no offered tool: {names}"
    return True, f"{len(calls)} call(s), every one to an offered tool"


@hygiene_check("valid_arguments")
def _valid_arguments(ctx: HygieneContext) -> tuple[bool, str]:
    calls = ctx.calls
    left: list[str] = []
    fixed = 0
    for i, call in enumerate(calls):
        schema = ctx.schemas.get(call.tool)
        if schema is None:
            continue  # known_tools says so
        problem = _schema_problem(call.raw_arguments, schema)
        if problem is None:
            continue
        if corrected_by(calls, i) is None:
            left.append(f"#{i} {call.tool}: {problem}")
        else:
            fixed += 1
    if left:
        return False, "arguments break the schema, never corrected: " + "; ".join(left[:3])
    return True, "every call's arguments validate" + (f" ({fixed} corrected later)" * bool(fixed))


@hygiene_check("failures_corrected")
def _failures_corrected(ctx: HygieneContext) -> tuple[bool, str]:
    calls = ctx.calls
    failed = [i for i, c in enumerate(calls) if not succeeded(c) and c.tool in ctx.schemas]
    left = [i for i in failed if corrected_by(calls, i) is None]
    if left:
        return False, f"failed call(s) {_show(left, calls)} never corrected by a later call"
    if failed:
        pairs = ", ".join(f"#{i}->#{corrected_by(calls, i)}" for i in failed[:4])
        return True, f"{len(failed)} failed call(s), each corrected ({pairs})"
    return True, "no failed call"


@hygiene_check("results_paired")
def _results_paired(ctx: HygieneContext) -> tuple[bool, str]:
    pending: dict[str, int] = {}
    orphans: list[int] = []
    for i, message in enumerate(ctx.trajectory.messages):
        if message.role is MessageRole.ASSISTANT:
            for call in message.tool_calls or []:
                pending[call.id] = pending.get(call.id, 0) + 1
        elif message.role is MessageRole.TOOL:
            if pending.get(message.tool_call_id or "", 0) > 0:
                pending[message.tool_call_id or ""] -= 1
            else:
                orphans.append(i)
    unanswered = sorted(k for k, n in pending.items() if n > 0)
    if unanswered:
        return False, f"call(s) without a result: {unanswered[:4]}"
    if orphans:
        return False, f"tool message(s) {orphans[:4]} answer no earlier call"
    return True, "every call has its result"


@hygiene_check("unique_call_ids")
def _unique_call_ids(ctx: HygieneContext) -> tuple[bool, str]:
    ids = Counter(
        call.id
        for message in ctx.trajectory.messages
        if message.role is MessageRole.ASSISTANT
        for call in message.tool_calls or []
    )
    repeated = sorted(k for k, n in ids.items() if n > 1)
    if repeated:
        return False, f"call id(s) used more than once: {repeated[:4]}"
    return True, f"{len(ids)} distinct call id(s)"


@hygiene_check("no_repeated_failure")
def _no_repeated_failure(ctx: HygieneContext) -> tuple[bool, str]:
    seen: dict[str, int] = {}
    repeats: list[str] = []
    for i, call in enumerate(ctx.calls):
        if succeeded(call):
            continue
        key = canonical_json([call.tool, call.arguments if call.arguments is not None
                              else call.raw_arguments.strip()])  # fmt: skip
        if key in seen:
            repeats.append(f"#{i} repeats #{seen[key]} ({call.tool})")
        else:
            seen[key] = i
    if repeats:
        return False, "an identical failing call was made again: " + "; ".join(repeats[:3])
    return True, "no failing call repeated"


_TOOL_SYNTAX = re.compile(
    r"(?m)^[ \t]*functions\.[^\s:]*([ \t]+returned)?[ \t]*:|<tool_call>|<tool_response>"
)


# a language's null printed as the answer ("None.", the 135M model after a write): read as
# the word "none" it passed for an outcome
_NULL_WORDS = frozenset({"none", "null", "nil", "undefined", "nan"})
# a tool's name, a colon and a JSON object or list: the result pasted as the answer
# ("get_current_time:\n{\"timezone\": ...}"), the 135M model's answer on the time bench
_TOOL_DUMP = re.compile(r"\s*([\w.-]+)(?:\s+returned)?\s*:\s*[\[{]")


@hygiene_check("answered")
def _answered(ctx: HygieneContext) -> tuple[bool, str]:
    messages = list(ctx.trajectory.messages)
    end = len(messages)
    closing = 0
    while end and messages[end - 1].role is MessageRole.USER:
        end -= 1
        closing += 1
    if closing and ctx.trajectory.termination is not Termination.USER_STOP:
        return False, "the conversation ends on the user's turn, unanswered"
    if closing > 1:
        return False, f"{closing} user messages follow the last assistant turn"
    last = messages[end - 1] if end else None
    if last is None or last.role is not MessageRole.ASSISTANT:
        role = last.role.value if last is not None else "nothing"
        return False, f"the conversation ends on a {role} message, not the assistant's answer"
    if last.tool_calls:
        return False, "the last assistant turn is a tool call, not an answer"
    text = (last.content or "").strip()
    if not text:
        return False, "the last assistant turn is empty"
    if re.sub(r"[\W_]+", "", text).casefold() in _NULL_WORDS:
        return False, f"the last assistant turn says only {text!r}, a null value, not words"
    if _TOOL_SYNTAX.search(text):
        return False, "the last assistant turn writes tool-call syntax instead of words"
    dumped = _TOOL_DUMP.match(text)
    if dumped and dumped.group(1) in {*ctx.schemas, *(c.tool for c in ctx.calls)}:
        return False, f"the last assistant turn pastes {dumped.group(1)}'s output, not words"
    return True, f"ends with the assistant's answer ({len(text)} characters)"


@hygiene_check("outcome_stated")
def _outcome_stated(ctx: HygieneContext) -> tuple[bool, str]:
    if not ctx.asked:
        return True, "the task asked for no value to be stated"
    missing = [detail for held, detail in ctx.asked if not held]
    if missing:
        return False, "the answer does not state what the user asked: " + "; ".join(missing)
    return True, "; ".join(detail for _, detail in ctx.asked)


# --- running them -------------------------------------------------------------------------


def check_hygiene(ctx: HygieneContext) -> tuple[list[HygieneResult], bool]:
    """Every registered check on ``ctx``: the results in name order, and whether a failed
    call was corrected (a recovery) in a trajectory that is otherwise clean."""
    results = []
    for name in registered_checks():
        ok, detail = CHECKS.get(name)(ctx)
        results.append(HygieneResult(check=name, passed=ok, detail=detail))
    calls = ctx.calls
    recovered = all(r.passed for r in results) and any(not succeeded(c) for c in calls)
    return results, recovered


# The answer's checks (grounded, consistent, informative) and the redundant-call check live in
# their own module; importing it registers them, so every caller of check_hygiene runs them.
from trajsynth.curation import faithful as _faithful  # noqa: E402, F401
