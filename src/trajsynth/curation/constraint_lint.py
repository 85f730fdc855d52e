"""Lint a blueprint's constraints before anyone is scored by them (docs/methods.md §4).

A verifier that passes everything is worse than none: the planner rejects a constraint set
that a do-nothing trajectory (no calls, an empty answer, the initial state) already satisfies,
one that checks no outcome at all, and one that refers to tools or fields that do not exist.
Each problem is a readable reason, stored with the rejected blueprint attempt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from trajsynth.curation.canon import field_schema, resolve_schema
from trajsynth.curation.verify import verify
from trajsynth.schemas import (
    AnswerContains,
    AnswerMatches,
    CallPattern,
    CodeTestsPass,
    Constraint,
    ConstraintResult,
    EnvState,
    FinalState,
    MaxCalls,
    Message,
    MessageRole,
    Order,
    Termination,
    ToolCalled,
    ToolNotCalled,
    ToolSpec,
    Trajectory,
)
from trajsynth.schemas.constraints import readback_hash

__all__ = [
    "DO_NOTHING_PASSES",
    "HYGIENE_PASSES_NOTHING",
    "NO_OUTCOME",
    "OUTCOME_KINDS",
    "do_nothing_trajectory",
    "lint_constraints",
]

DO_NOTHING_PASSES = "a do-nothing trajectory already passes"
HYGIENE_PASSES_NOTHING = "the hygiene checks pass a do-nothing trajectory"
NO_OUTCOME = "checks no outcome"
# Kinds that check what the trajectory achieved; tool_not_called and max_calls only restrict.
OUTCOME_KINDS = frozenset(
    {"final_state", "tool_called", "order", "answer_contains", "answer_matches", "code_tests_pass"}
)


def do_nothing_trajectory(tools: Sequence[ToolSpec] = ()) -> Trajectory:
    """A trajectory that makes no call and answers nothing: the baseline every set must fail."""
    return Trajectory(
        trajectory_id="lint_do_nothing",
        run_id="lint",
        blueprint_id="lint",
        tree_id="lint",
        leaf_node_id="lint",
        cluster_id="lint",
        messages=[
            Message(role=MessageRole.USER, content="Please help me."),
            Message(role=MessageRole.ASSISTANT, content=""),
        ],
        tools=[t.to_openai() for t in tools],
        final_answer="",
        termination=Termination.ASSISTANT_DONE,
    )


def _patterns(c: Any) -> list[CallPattern]:
    if isinstance(c, ToolCalled):
        return c.patterns
    if isinstance(c, ToolNotCalled):
        return [c.call]
    if isinstance(c, Order):
        return [c.first, c.then]
    return []


def _pattern_issues(where: str, p: CallPattern, tools: Mapping[str, ToolSpec]) -> list[str]:
    spec = tools.get(p.tool)
    if spec is None:
        return [f"{where}: unknown tool {p.tool!r}"]
    props = resolve_schema(spec.input_schema).get("properties")
    if not isinstance(props, Mapping) or not props:
        return []  # the schema does not list its fields: nothing to check against
    issues = []
    for path in p.matchers:
        head, *rest = path.split(".")
        if path in props:
            continue
        if head not in props:
            issues.append(f"{where}: {p.tool} has no argument {path!r}")
            continue
        sub = field_schema(spec.input_schema, head)
        for part in rest:
            if "properties" not in sub:
                break
            if part not in sub["properties"]:
                issues.append(f"{where}: {p.tool} has no argument {path!r}")
                break
            sub = field_schema(sub, part)
    return issues


def _contradicts(called: CallPattern, forbidden: CallPattern) -> bool:
    """Every call that satisfies ``called`` also matches ``forbidden``."""
    return called.tool == forbidden.tool and all(
        k in called.matchers and called.matchers[k] == v for k, v in forbidden.matchers.items()
    )


def _sanity(
    constraints: Sequence[Any], tools: Mapping[str, ToolSpec], state: EnvState
) -> list[str]:
    issues: list[str] = []
    for i, c in enumerate(constraints):
        where = f"constraint {i} ({c.kind})"
        for p in _patterns(c):
            issues += _pattern_issues(where, p, tools)
        if isinstance(c, Order) and c.first == c.then:
            issues.append(f"{where}: a call cannot precede itself")
        if isinstance(c, AnswerMatches):
            try:
                if re.compile(c.pattern).search("") is not None:
                    issues.append(f"{where}: pattern {c.pattern!r} matches an empty answer")
            except re.error as exc:
                issues.append(f"{where}: pattern {c.pattern!r} does not compile: {exc}")
        if isinstance(c, AnswerContains) and any(not str(v).strip() for v in c.values):
            issues.append(f"{where}: an empty value is contained in every answer")
        if isinstance(c, FinalState):
            if not c.gold_hash:
                issues.append(f"{where}: empty gold hash")
            elif c.probes:  # read-backs: compared when the initial state carries them
                if readback_hash(c.probes, state.tables) == c.gold_hash:
                    issues.append(f"{where}: the read-back answers as in the initial state")
            elif not state.readable:
                issues.append(f"{where}: the environment state is not readable")
            elif c.gold_hash == state.state_hash:
                issues.append(f"{where}: the gold state equals the initial state")
        if isinstance(c, CodeTestsPass):
            if not c.test_source.strip():
                issues.append(f"{where}: empty test source")
            elif state.checks.get(c.check_id) is True:
                issues.append(f"{where}: check {c.check_id!r} already passes initially")
    hard = [c for c in constraints if c.hard]
    for i, c in enumerate(constraints):
        if not (c.hard and isinstance(c, ToolNotCalled)):
            continue
        for j, other in enumerate(constraints):
            if (
                other.hard
                and isinstance(other, ToolCalled)
                and all(_contradicts(p, c.call) for p in other.patterns)
            ):
                issues.append(
                    f"constraint {i} (tool_not_called) forbids what constraint {j} requires"
                )
    needed = sum(c.min_count for c in hard if isinstance(c, ToolCalled))
    for i, c in enumerate(hard):
        if isinstance(c, MaxCalls) and c.n < needed:
            issues.append(f"constraint {i} (max_calls): {c.n} calls < {needed} required calls")
    return issues


def lint_constraints(
    constraints: Sequence[Constraint], initial_state: EnvState, tools: Sequence[ToolSpec]
) -> list[str]:
    """Reasons to reject a constraint set; an empty list means it is fit to verify with.

    Runs ``verify`` on a do-nothing trajectory against ``initial_state``: if its constraints
    pass, the set is rejected with ``DO_NOTHING_PASSES``; if the hygiene checks pass it (they
    never should: it does not answer), with ``HYGIENE_PASSES_NOTHING``. A set with no hard
    outcome constraint (only ``max_calls``, ``tool_not_called`` or soft ones) is rejected
    with ``NO_OUTCOME``.
    Sanity: tools and matcher fields exist, regexes compile and cannot match an empty answer,
    answer values are not blank, a final state differs from the initial one, required and
    forbidden calls do not contradict, ``max_calls`` leaves room for the required calls.
    """
    if not constraints:
        return ["no constraints", NO_OUTCOME]
    by_name = {t.name: t for t in tools}
    issues: list[str] = []
    results: list[ConstraintResult] = []
    if any(c.hard for c in constraints):  # without a hard constraint nothing can pass anyway
        baseline = verify(do_nothing_trajectory(tools), constraints, initial_state)
        results = baseline.results
        # the constraints alone must fail it: hygiene fails every do-nothing trajectory (it
        # never answers), which says nothing about whether the set checks an outcome
        if baseline.constraints_passed:
            issues.append(DO_NOTHING_PASSES)
        if baseline.clean:
            issues.append(HYGIENE_PASSES_NOTHING)
    if not any(c.hard and c.kind in OUTCOME_KINDS for c in constraints):
        issues.append(NO_OUTCOME)
    issues += _sanity(constraints, by_name, initial_state)
    explained = {"final_state", "code_tests_pass", "answer_matches"}  # said more precisely above
    for r in results:
        if r.hard and r.passed and r.kind in OUTCOME_KINDS - explained:
            issues.append(f"constraint {r.index} ({r.kind}) passes without doing anything")
    return list(dict.fromkeys(issues))
