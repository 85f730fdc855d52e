"""Constraints: the explicit, model-free success conditions of a task (docs/methods.md §4).

A constraint is data. ``curation.verify`` checks each kind against a trajectory and the final
environment state; the same code computes GRPO rewards.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from trajsynth.schemas._base import JsonValue, Record, stable_hash
from trajsynth.schemas.tools import ProbeCall

__all__ = [
    "AnswerContains",
    "AnswerMatches",
    "CallPattern",
    "CodeTestsPass",
    "Constraint",
    "ConstraintKind",
    "FinalState",
    "MaxCalls",
    "ObservedField",
    "Order",
    "ToolCalled",
    "ToolNotCalled",
    "readback_hash",
    "readback_key",
]


class CallPattern(Record):
    """A tool call whose listed argument fields equal the given values (after canonicalising)."""

    tool: str
    matchers: dict[str, JsonValue] = Field(default_factory=dict)


class _Constraint(Record):
    hard: bool = True
    derived_from: str = Field(default="gold_run", description="what in the blueprint made it")


class FinalState(_Constraint):
    """The canonical state hash after the trajectory equals the gold run's.

    With ``probes`` (an outside server's read-backs: reads the mutation lint found whose
    answer the gold run's writes change, where the cluster's own probes see nothing), the
    state compared is those reads' answers after the episode, kept in the end state's tables
    under ``readback_key``; ``gold_hash`` is the hash of the gold run's answers.
    """

    kind: Literal["final_state"] = "final_state"
    gold_hash: str
    # tables the gold run changed, for a readable diff when the hash differs
    gold_tables: dict[str, list[dict[str, JsonValue]]] = Field(default_factory=dict)
    probes: list[ProbeCall] = Field(default_factory=list)


def readback_key(index: int, probe: ProbeCall) -> str:
    """The end state's table holding a read-back's answer (``FinalState.probes``)."""
    return f"readback{index}:{probe.label}"


def readback_hash(
    probes: list[ProbeCall], tables: dict[str, list[dict[str, JsonValue]]]
) -> str | None:
    """The hash of the read-backs' answers in ``tables`` (None when one was not read)."""
    keys = [readback_key(i, p) for i, p in enumerate(probes)]
    if any(k not in tables for k in keys):
        return None
    return stable_hash({k: tables[k] for k in keys}, length=64)


class ToolCalled(_Constraint):
    """At least ``min_count`` successful calls match ``call`` or one of ``alternatives``.

    ``alternatives``: other reads the planner found to answer the same question with the same
    values (``planning.equivalent_reads``: ``read_text_file(path=p)`` for
    ``read_multiple_files(paths=[p])``); empty for writes, which the gold run's tool decides."""

    kind: Literal["tool_called"] = "tool_called"
    call: CallPattern
    min_count: int = Field(default=1, ge=1)
    alternatives: list[CallPattern] = Field(default_factory=list)

    @property
    def patterns(self) -> list[CallPattern]:
        return [self.call, *self.alternatives]


class ToolNotCalled(_Constraint):
    kind: Literal["tool_not_called"] = "tool_not_called"
    call: CallPattern


class Order(_Constraint):
    """The first call matching ``first`` comes before the first call matching ``then``."""

    kind: Literal["order"] = "order"
    first: CallPattern
    then: CallPattern


class ObservedField(Record):
    """Where an episode reads a value that changes between reads (a clock, a fresh token): the
    last successful call to ``tool`` whose arguments match ``matchers`` (the gold run's read:
    a reading for another city is not the one asked for), at ``path`` in its JSON
    observation. Empty ``matchers`` (constraints stored before them): any call of the tool."""

    tool: str
    path: list[str | int] = Field(min_length=1)
    matchers: dict[str, JsonValue] = Field(default_factory=dict)


class AnswerContains(_Constraint):
    """The final assistant message contains every value (numbers: rel. tol. 1e-6).

    With ``observed`` the value asked for changes between reads, so ``values`` only record the
    gold run's reading: the answer must state what the episode's own call returned there.
    """

    kind: Literal["answer_contains"] = "answer_contains"
    values: list[str | int | float] = Field(min_length=1)
    observed: ObservedField | None = None


class AnswerMatches(_Constraint):
    kind: Literal["answer_matches"] = "answer_matches"
    pattern: str


class MaxCalls(_Constraint):
    kind: Literal["max_calls"] = "max_calls"
    n: int = Field(ge=0)


class CodeTestsPass(_Constraint):
    """A check run in the sandbox after the rollout passes; its result is in EnvState.checks."""

    kind: Literal["code_tests_pass"] = "code_tests_pass"
    check_id: str
    test_source: str = Field(description="python run in the sandbox work directory; exit 0 = pass")


Constraint = Annotated[
    FinalState
    | ToolCalled
    | ToolNotCalled
    | Order
    | AnswerContains
    | AnswerMatches
    | MaxCalls
    | CodeTestsPass,
    Field(discriminator="kind"),
]

ConstraintKind = Literal[
    "final_state",
    "tool_called",
    "tool_not_called",
    "order",
    "answer_contains",
    "answer_matches",
    "max_calls",
    "code_tests_pass",
]
