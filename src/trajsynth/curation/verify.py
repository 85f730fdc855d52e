"""Verification: check every constraint of a task against one trajectory (docs/methods.md §4).

``verify(trajectory, constraints, final_state)`` is a pure function of the recorded run and the
environment's final canonical state; the GRPO stage calls the same function for its rewards
(``reward``). Each constraint kind has one small checker, registered with ``@checker(kind)``
(docs/style.md §1), that returns ``(passed, detail)``. Every trajectory is also held to the hygiene
checks of ``curation.hygiene`` (registered with ``@hygiene_check``): it *passes* only when its
hard constraints hold and it is a clean example (docs/verification.md). This module is the one
place that decides ``passed``; ``apply_judgement`` adds an optional model judge's say.

Decisions (docs/methods.md leaves them open):

- A call *happened* only if its arguments parsed and its observation was not an error
  (``obs_class != error``): ``tool_called`` and ``order`` count only such calls, since a refused
  call changed nothing.
- ``tool_not_called`` counts every *attempt*, errors included: trying a forbidden write is a
  violation even when the server refused it. A call whose arguments did not parse matches only
  a pattern without matchers.
- Matchers check only the fields they list (dotted paths reach into objects; nested objects
  match by subset). Values compare after canonicalization (``curation.canon``): numbers with
  relative tolerance 1e-6 (a numeric string matches a number), strings casefolded and stripped
  except identifiers, which must be equal. Lists match as multisets unless the schema marks them
  ordered (``x-ordered`` or ``prefixItems``): argument lists are id sets in practice, and the
  final-state hash catches order where it changes state.
- The answer is ``trajectory.final_answer`` or else the last assistant message with text.
- A set without a single hard constraint verifies nothing, so it never passes.
- ``final_state`` on an unreadable state fails with "state not readable".
"""

from __future__ import annotations

import logging
import math
import re
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter

from trajsynth.curation.canon import (
    field_schema,
    is_identifier,
    parse_json_maybe,
    resolve_schema,
    value_at,
)
from trajsynth.curation.hygiene import ASKED_VALUES, HygieneContext, check_hygiene
from trajsynth.curation.hygiene import succeeded as call_succeeded
from trajsynth.schemas import (
    AnswerContains,
    AnswerMatches,
    CallPattern,
    CodeTestsPass,
    Constraint,
    ConstraintResult,
    EnvState,
    FailureClass,
    FinalState,
    JsonValue,
    JudgeResult,
    MaxCalls,
    MessageRole,
    ObsClass,
    ObservedField,
    Order,
    Registry,
    ToolCalled,
    ToolCallRecord,
    ToolNotCalled,
    Trajectory,
    Verdict,
    canonical_json,
    content_id,
)
from trajsynth.schemas.constraints import readback_hash
from trajsynth.schemas.results import result_error

__all__ = [
    "Checker",
    "VerifyContext",
    "answer_contains_value",
    "answer_text",
    "apply_judgement",
    "offered_tools",
    "call_matches",
    "checker",
    "extract_numbers",
    "match_value",
    "observed_reading",
    "reads_as_error",
    "registered_kinds",
    "reward",
    "state_diff",
    "verify",
]

log = logging.getLogger(__name__)

REL_TOL = 1e-6
_EXCLUDED = (FailureClass.INFRA, FailureClass.SIMULATOR)
_CONSTRAINT = TypeAdapter(Constraint)


# --- what a checker sees -------------------------------------------------------------------


def _tool_schemas(tools: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Input schema by tool name, from OpenAI ``tools`` entries (or ToolSpec-like dicts), for
    the tools that declare one."""
    return {name: schema for name, schema in offered_tools(tools).items() if schema}


def offered_tools(tools: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Input schema by name of every tool the episode offered (``{}`` when it has none)."""
    out: dict[str, Mapping[str, Any]] = {}
    for entry in tools:
        if not isinstance(entry, Mapping):
            continue
        function = entry.get("function")
        fn = function if isinstance(function, Mapping) else entry
        name = fn.get("name")
        params = fn.get("parameters") or fn.get("input_schema") or fn.get("inputSchema") or {}
        if isinstance(name, str) and name:
            out[name] = params if isinstance(params, Mapping) else {}
    return out


def answer_text(trajectory: Trajectory) -> str:
    """The final answer: ``final_answer``, else the last assistant message that has text."""
    if trajectory.final_answer and trajectory.final_answer.strip():
        return trajectory.final_answer
    for message in reversed(trajectory.messages):
        if message.role == MessageRole.ASSISTANT and message.content and message.content.strip():
            return message.content
    return ""


@dataclass(frozen=True)
class VerifyContext:
    """The recorded run as the checkers read it."""

    trajectory: Trajectory
    final_state: EnvState
    answer: str
    schemas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def build(cls, trajectory: Trajectory, final_state: EnvState) -> VerifyContext:
        return cls(
            trajectory=trajectory,
            final_state=final_state,
            answer=answer_text(trajectory),
            schemas=_tool_schemas(trajectory.tools),
        )

    @property
    def calls(self) -> list[ToolCallRecord]:
        return list(self.trajectory.calls)

    def succeeded(self, call: ToolCallRecord) -> bool:
        """A call happened: its arguments parsed and its observation is not an error."""
        return call_succeeded(call)

    def matches(self, pattern: CallPattern, call: ToolCallRecord) -> bool:
        return call_matches(pattern, call, self.schemas.get(pattern.tool))


def reads_as_error(call: ToolCallRecord) -> bool:
    """A recorded result that says it failed (``{"error": ...}``, ``Error: ...``) although
    nothing flagged it: a trajectory stored before errors were read from results, or from a
    server that never sets ``isError`` (``schemas.results.result_error``)."""
    return result_error(call.observation) is not None


Checker = Callable[[Any, VerifyContext], tuple[bool, str]]
CHECKERS: Registry[Checker] = Registry("constraint checker")


def checker(kind: str) -> Callable[[Checker], Checker]:
    """Register the checker of one constraint kind: ``(constraint, ctx) -> (passed, detail)``."""
    return CHECKERS.register(kind)


def registered_kinds() -> list[str]:
    """The constraint kinds that have a checker, sorted."""
    return CHECKERS.names()


# --- value and call matching ---------------------------------------------------------------

_CURRENCY = "$€£¥"
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_GROUPED = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_NUMBER_IN_TEXT = re.compile(
    r"(?<![\w.,])(?P<sign>[-+])?(?:[$€£¥]\s?)?(?P<sign2>-)?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
)


def _as_number(value: Any) -> float | None:
    """A number, or a string that is one ("54.20", "$54.20", "1,234.5"); else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    text = value.strip().replace(" ", "")
    sign = ""
    if len(text) > 1 and text[0] in "+-" and text[1] in _CURRENCY:
        sign, text = text[0], text[2:]
    elif text and text[0] in _CURRENCY:
        text = text[1:]
    if _GROUPED.fullmatch(text):
        text = text.replace(",", "")
    if not _PLAIN_NUMBER.fullmatch(text):
        return None
    number = float(sign + text)
    return number if math.isfinite(number) else None


def extract_numbers(text: str) -> list[float]:
    """Every number written in ``text``, formatting removed ("$1,234.50" -> 1234.5).

    Digits glued to letters ("W12", "i9") are part of a name, not a number.

    >>> extract_numbers("Refund of $54.20 for order #W1; 1,234.5 points, -3 left")
    [54.2, 1234.5, -3.0]
    """
    out = []
    for m in _NUMBER_IN_TEXT.finditer(text):
        end = m.end()
        if end < len(text) and (text[end].isalpha() or text[end] == "_"):
            continue
        negative = (m.group("sign") == "-") ^ (m.group("sign2") == "-")
        value = float(m.group("num").replace(",", ""))
        out.append(-value if negative else value)
    return out


def _id_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else canonical_json(value)


def _numbers_close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12)


def match_value(
    expected: Any, actual: Any, *, name: str | None = None, schema: Mapping[str, Any] | None = None
) -> bool:
    """Whether an argument value matches a matcher's value (see the module docstring).

    >>> match_value(54.2, "54.20"), match_value("Blue ", "blue")
    (True, True)
    >>> match_value("#W1", "#w1", name="order_id")
    False
    >>> match_value(["i9", "i3"], ["i3", "i9"], name="item_ids")
    True
    """
    sch = resolve_schema(schema)
    if expected is None:
        return actual is None
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            match_value(v, actual.get(k), name=str(k), schema=field_schema(sch, str(k)))
            for k, v in expected.items()
        )
    if isinstance(expected, list | tuple):
        return _match_list(list(expected), actual, name=name, schema=sch)
    if isinstance(expected, bool) or isinstance(actual, bool):
        return isinstance(expected, bool) and isinstance(actual, bool) and expected == actual
    if is_identifier(name, sch):
        return actual is not None and _id_text(expected) == _id_text(actual)
    exp_num, act_num = _as_number(expected), _as_number(actual)
    if exp_num is not None and act_num is not None:
        return _numbers_close(exp_num, act_num)
    if isinstance(expected, str) and isinstance(actual, str):
        return expected.strip().casefold() == actual.strip().casefold()
    return False


def _match_list(expected: list[Any], actual: Any, *, name: str | None, schema: Mapping) -> bool:
    if not isinstance(actual, list | tuple) or len(actual) != len(expected):
        return False
    items = schema.get("items") if isinstance(schema.get("items"), Mapping) else None
    ident = is_identifier(name, schema)
    item_name = name if ident else None

    def same(e: Any, a: Any) -> bool:
        if ident and not isinstance(e, Mapping | list):
            return a is not None and _id_text(e) == _id_text(a)
        return match_value(e, a, name=item_name, schema=items)

    if schema.get("x-ordered") or "prefixItems" in schema:
        return all(same(e, a) for e, a in zip(expected, actual, strict=True))
    return _multiset_match(expected, list(actual), same)


def _multiset_match(expected: list[Any], actual: list[Any], same: Callable[..., bool]) -> bool:
    """A perfect matching between two equal-length lists (backtracking; lists are short)."""
    if not expected:
        return True
    head, rest = expected[0], expected[1:]
    for i, candidate in enumerate(actual):
        if same(head, candidate) and _multiset_match(rest, actual[:i] + actual[i + 1 :], same):
            return True
    return False


_MISSING = object()


def _lookup(args: Mapping[str, Any], path: str, schema: Mapping[str, Any] | None) -> tuple:
    """(value or _MISSING, field name, field schema) for a matcher key (dotted paths allowed)."""
    if path in args:
        return args[path], path, field_schema(schema, path)
    value: Any = args
    sch: Mapping[str, Any] | None = schema
    part = path
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING, part, {}
        value, sch = value[part], field_schema(sch, part)
    return value, part, sch


def call_matches(
    pattern: CallPattern, call: ToolCallRecord, schema: Mapping[str, Any] | None = None
) -> bool:
    """Whether ``call`` is a call of ``pattern.tool`` whose listed argument fields match.

    ``schema`` is the tool's input schema (identifier and ordering hints); a call whose
    arguments did not parse matches only a pattern without matchers.
    """
    return call.tool == pattern.tool and not _mismatches(pattern, call, schema)


def _mismatches(
    pattern: CallPattern, call: ToolCallRecord, schema: Mapping[str, Any] | None
) -> list[str]:
    """The matcher fields ``call`` gets wrong (all of them when its arguments did not parse)."""
    if not pattern.matchers:
        return []
    args = call.arguments
    if not isinstance(args, Mapping):
        return list(pattern.matchers)
    bad = []
    for path, expected in pattern.matchers.items():
        actual, name, sch = _lookup(args, path, schema)
        if actual is _MISSING:
            actual = None
        if not match_value(expected, actual, name=name, schema=sch):
            bad.append(path)
    return bad


def _show(pattern: CallPattern) -> str:
    fields = ", ".join(f"{k}={canonical_json(v)}" for k, v in pattern.matchers.items())
    return f"{pattern.tool}({fields})"


def _closest(pattern: CallPattern, calls: Sequence[ToolCallRecord], ctx: VerifyContext) -> str:
    """Why the nearest call of the same tool did not match, for a readable detail."""
    same_tool = [(i, c) for i, c in enumerate(calls) if c.tool == pattern.tool]
    if not same_tool:
        return f"{pattern.tool} was never called"
    schema = ctx.schemas.get(pattern.tool)
    ranked = sorted(same_tool, key=lambda ic: len(_mismatches(pattern, ic[1], schema)))
    i, call = ranked[0]
    if not isinstance(call.arguments, Mapping):
        why = "arguments did not parse"
    elif bad := _mismatches(pattern, call, schema):
        got = []
        for path in bad:
            value = _lookup(call.arguments, path, schema)[0]
            got.append(f"{path}={canonical_json(None if value is _MISSING else value)}")
        why = "differs on " + ", ".join(got)
    else:
        shown = "an error result" if reads_as_error(call) else call.obs_class.value
        why = f"matches but its observation was {shown}"
    return f"closest: call #{i} {call.tool} {why}"


# --- the checkers, one per constraint kind -------------------------------------------------


def _n_rows(table_diff: JsonValue, key: str) -> int:
    """How many rows one table's :func:`state_diff` entry lists under ``key``."""
    rows = table_diff.get(key) if isinstance(table_diff, dict) else None
    return len(rows) if isinstance(rows, list) else 0


@checker("final_state")
def _check_final_state(c: FinalState, ctx: VerifyContext) -> tuple[bool, str]:
    state = ctx.final_state
    if c.probes:  # read-backs: their answers after the episode against the gold run's
        got = readback_hash(c.probes, state.tables)
        reads = ", ".join(p.label for p in c.probes)
        if got is None:
            return False, f"read-back ({reads}) not taken at the end of the episode"
        if got == c.gold_hash:
            return True, f"read-back ({reads}) answers as after the gold run"
        return False, f"read-back ({reads}) answers otherwise than after the gold run"
    if not state.readable:
        return False, "state not readable"
    if state.state_hash == c.gold_hash:
        return True, f"state hash {state.state_hash[:12]} equals the gold hash"
    diff = state_diff(c.gold_tables, state)
    changes = "; ".join(
        f"{table}: +{_n_rows(d, 'added')} -{_n_rows(d, 'removed')} rows"
        for table, d in diff.items()
    )
    return False, (
        f"state hash {state.state_hash[:12]} != gold {c.gold_hash[:12]}"
        + (f" ({changes})" if changes else "")
    )


@checker("tool_called")
def _check_tool_called(c: ToolCalled, ctx: VerifyContext) -> tuple[bool, str]:
    hits = [
        i
        for i, call in enumerate(ctx.calls)
        if ctx.succeeded(call) and any(ctx.matches(p, call) for p in c.patterns)
    ]
    shown = " or ".join(_show(p) for p in c.patterns)
    if len(hits) >= c.min_count:
        return True, f"{shown}: {len(hits)} successful matching call(s) {hits}"
    # the nearest miss is told of a pattern whose tool the episode did call, if any
    called = {call.tool for call in ctx.calls}
    nearest = next((p for p in c.patterns if p.tool in called), c.call)
    return False, (
        f"{shown}: {len(hits)} successful matching call(s), need {c.min_count}; "
        + _closest(nearest, ctx.calls, ctx)
    )


@checker("tool_not_called")
def _check_tool_not_called(c: ToolNotCalled, ctx: VerifyContext) -> tuple[bool, str]:
    hits = [i for i, call in enumerate(ctx.calls) if ctx.matches(c.call, call)]
    if not hits:
        return True, f"{_show(c.call)}: never attempted"
    return False, f"{_show(c.call)}: attempted at call(s) {hits}"


@checker("order")
def _check_order(c: Order, ctx: VerifyContext) -> tuple[bool, str]:
    def first(pattern: CallPattern) -> int | None:
        return next(
            (
                i
                for i, call in enumerate(ctx.calls)
                if ctx.succeeded(call) and ctx.matches(pattern, call)
            ),
            None,
        )

    a, b = first(c.first), first(c.then)
    if a is None or b is None:
        missing = _show(c.first) if a is None else _show(c.then)
        return False, f"no successful call matches {missing}"
    verb = "precedes" if a < b else "does not precede"
    return a < b, f"{_show(c.first)} (call #{a}) {verb} {_show(c.then)} (call #{b})"


def _scalar_text(value: str | int | float | bool) -> str | int | float:
    return str(value).lower() if isinstance(value, bool) else value


def answer_contains_value(answer: str, value: str | int | float) -> bool:
    """Whether ``answer`` states ``value`` (numbers formatting-insensitive, rel. tol. 1e-6).

    >>> answer_contains_value("Your refund is $54.20.", "54.2")
    True
    >>> answer_contains_value("Total: 1,234.5 points", 1234.5)
    True
    >>> answer_contains_value("Order W12", "W1")
    False
    >>> answer_contains_value("It lists milk, eggs and bread.", "milk\\neggs\\nbread\\n")
    True
    """
    number = _as_number(value)
    if number is not None:
        return any(_numbers_close(number, n) for n in extract_numbers(answer))
    hay = " ".join(answer.casefold().split())
    if _phrase_at(hay, str(value), 0) is not None:
        return True
    # a text of several lines (a file's content) stated as a list ("milk, eggs and bread")
    # still states each line, in its order
    lines = [line for line in str(value).splitlines() if line.strip()]
    if len(lines) < 2:
        return False
    at: int | None = 0
    for line in lines:
        at = _phrase_at(hay, line, at or 0)
        if at is None:
            return False
    return True


def _phrase_at(hay: str, text: str, start: int) -> int | None:
    """Where ``text`` (case and spacing aside, whole words) ends in ``hay`` from ``start``;
    None when it is not there. An empty text is everywhere."""
    needle = " ".join(text.casefold().split())
    if not needle:
        return start
    left = r"(?<!\w)" if re.match(r"\w", needle[0]) else ""
    right = r"(?!\w)" if re.match(r"\w", needle[-1]) else ""
    found = re.compile(left + re.escape(needle) + right).search(hay, start)
    return found.end() if found else None


def observed_reading(
    calls: Sequence[ToolCallRecord],
    where: ObservedField,
    schema: Mapping[str, Any] | None = None,
) -> str | int | float | bool | None:
    """The scalar the episode's last successful call to ``where.tool`` with the matched
    arguments returned at ``where.path`` (docs/methods.md §4, ``answer_contains`` of a value
    that changes between reads); ``LookupError`` when no such call returned one.
    """
    pattern = CallPattern(tool=where.tool, matchers=where.matchers)
    for call in reversed(calls):
        if not call_matches(pattern, call, schema) or call.obs_class == ObsClass.ERROR:
            continue
        try:
            value = value_at(parse_json_maybe(call.observation), where.path)
        except KeyError:
            continue
        if value is None or isinstance(value, str | int | float | bool):
            return value
    asked = f" with {canonical_json(where.matchers)}" if where.matchers else ""
    raise LookupError(f"no successful {where.tool} call{asked} returned {_dotted(where.path)}")


def _dotted(path: Sequence[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


@checker("answer_contains")
def _check_answer_contains(c: AnswerContains, ctx: VerifyContext) -> tuple[bool, str]:
    if not ctx.answer:
        return False, "no final assistant message"
    if c.observed is not None:
        try:
            reading = observed_reading(ctx.calls, c.observed, ctx.schemas.get(c.observed.tool))
        except LookupError as exc:
            return False, str(exc)
        where = f"{c.observed.tool}'s {_dotted(c.observed.path)}"
        if reading is None or not answer_contains_value(ctx.answer, _scalar_text(reading)):
            return False, f"answer lacks {canonical_json(reading)} ({where} in this episode)"
        return True, f"answer states {canonical_json(reading)} ({where} in this episode)"
    missing = [v for v in c.values if not answer_contains_value(ctx.answer, v)]
    if missing:
        return False, f"answer lacks {canonical_json(missing)}"
    return True, f"answer states {canonical_json(c.values)}"


@checker("answer_matches")
def _check_answer_matches(c: AnswerMatches, ctx: VerifyContext) -> tuple[bool, str]:
    try:
        regex = re.compile(c.pattern)
    except re.error as exc:
        return False, f"invalid pattern {c.pattern!r}: {exc}"
    m = regex.search(ctx.answer)
    if m is None:
        return False, f"answer does not match /{c.pattern}/"
    return True, f"answer matches /{c.pattern}/ at {m.start()}: {m.group(0)[:60]!r}"


@checker("max_calls")
def _check_max_calls(c: MaxCalls, ctx: VerifyContext) -> tuple[bool, str]:
    n = len(ctx.calls)
    return n <= c.n, f"{n} tool call(s), limit {c.n}"


@checker("code_tests_pass")
def _check_code_tests(c: CodeTestsPass, ctx: VerifyContext) -> tuple[bool, str]:
    result = ctx.final_state.checks.get(c.check_id)
    if result is None:
        return False, f"check {c.check_id!r} was not run"
    return result, f"check {c.check_id!r} {'passed' if result else 'failed'}"


# --- the verdict ---------------------------------------------------------------------------


def state_diff(
    gold_tables: Mapping[str, Sequence[dict[str, JsonValue]]], state: EnvState
) -> dict[str, JsonValue]:
    """Per table of ``gold_tables``: rows ``state`` has that gold lacks (added) and vice versa.

    >>> s = EnvState(state_hash="x", tables={"t": [{"a": 1}, {"a": 3}]})
    >>> state_diff({"t": [{"a": 1}, {"a": 2}]}, s)
    {'t': {'added': [{'a': 3}], 'removed': [{'a': 2}]}}
    """
    out: dict[str, JsonValue] = {}
    for table in sorted(gold_tables):
        gold = Counter(canonical_json(r) for r in gold_tables[table])
        have = Counter(canonical_json(r) for r in state.tables.get(table, []))
        added, removed = have - gold, gold - have
        if added or removed:
            rows = {canonical_json(row): row for row in state.tables.get(table, [])}
            rows.update({canonical_json(row): row for row in gold_tables[table]})
            out[table] = {
                "added": [rows[r] for r in sorted(added.elements())],
                "removed": [rows[r] for r in sorted(removed.elements())],
            }
    return out


def _as_constraint(c: Any) -> Any:
    return _CONSTRAINT.validate_python(c) if isinstance(c, Mapping) else c


def verify(
    trajectory: Trajectory, constraints: Sequence[Constraint], final_state: EnvState
) -> Verdict:
    """Check every constraint against the recorded run (docs/methods.md §4).

    ``final_state`` is the canonical state after the trajectory's state-mutating calls (the
    rollout's own environment, or a tau2-style replay into a fresh one). Constraints may be
    models or their JSON dicts (as the RL dataset carries them). ``passed`` = every hard
    constraint passes (and there is at least one); ``score = 0.9·passed + 0.1·soft fraction``,
    or ``1.0``/``0.0`` without soft constraints. Infra and simulator failures are ``excluded``.

    ``passed`` is clean and correct: every hard constraint holds (``constraints_passed``) and
    every hygiene check holds (``clean``, ``hygiene`` per check; ``curation.hygiene``).
    ``recovered``: clean, with a failed call a later call corrected.
    """
    ctx = VerifyContext.build(trajectory, final_state)
    results: list[ConstraintResult] = []
    diff: dict[str, JsonValue] = {}
    parsed = [_as_constraint(c) for c in constraints]
    for index, constraint in enumerate(parsed):
        check = CHECKERS.find(constraint.kind)
        if check is None:
            ok, detail = False, f"no checker for constraint kind {constraint.kind!r}"
        else:
            ok, detail = check(constraint, ctx)
        results.append(
            ConstraintResult(
                index=index, kind=constraint.kind, hard=constraint.hard, passed=ok, detail=detail
            )
        )
        if isinstance(constraint, FinalState) and not ok and final_state.readable and not diff:
            diff = state_diff(constraint.gold_tables, final_state)
    hard = [r for r in results if r.hard]
    soft = [r for r in results if not r.hard]
    constraints_passed = bool(hard) and all(r.passed for r in hard)
    asked = [
        _check_answer_contains(c, ctx)
        for c in parsed
        if isinstance(c, AnswerContains) and c.derived_from == ASKED_VALUES
    ]
    hygiene, recovered = check_hygiene(
        HygieneContext(
            trajectory=trajectory,
            schemas=offered_tools(trajectory.tools),
            answer=ctx.answer,
            asked=asked,
            asked_values=[
                v
                for c in parsed
                if isinstance(c, AnswerContains) and c.derived_from == ASKED_VALUES
                for v in c.values
            ],
        )
    )
    clean = all(h.passed for h in hygiene)
    passed = constraints_passed and clean
    if not hard:
        log.warning(
            "trajectory %s: no hard constraint, so nothing is verified", trajectory.trajectory_id
        )
    if soft:
        score = 0.9 * passed + 0.1 * statistics.fmean(r.passed for r in soft)
    else:
        score = 1.0 if passed else 0.0
    verdict_id = content_id(
        "verdict",
        {
            "trajectory_id": trajectory.trajectory_id,
            "calls": [[c.tool, c.raw_arguments, c.obs_class.value] for c in trajectory.calls],
            "answer": ctx.answer,
            "constraints": [c.model_dump(mode="json") for c in parsed],
            "state": [final_state.state_hash, final_state.checks, final_state.readable],
            "hygiene": [h.check for h in hygiene],
        },
    )
    return Verdict(
        verdict_id=verdict_id,
        trajectory_id=trajectory.trajectory_id,
        results=results,
        passed=passed,
        score=round(score, 12),
        state_hash=final_state.state_hash if final_state.readable else None,
        state_diff=diff,
        excluded=trajectory.failure_class in _EXCLUDED,
        constraints_passed=constraints_passed,
        clean=clean,
        hygiene=hygiene,
        recovered=recovered,
    )


def apply_judgement(verdict: Verdict, judgement: JudgeResult) -> Verdict:
    """``verdict`` with a model judge's result beside it. ``passed`` (and the score) change
    only when ``judgement.decides``: then a trajectory passes only if the judge accepts it
    too (no score read counts as not accepted)."""
    if not judgement.decides:
        return verdict.model_copy(update={"judge": judgement})
    passed = verdict.passed and judgement.accept is True
    score = verdict.score if passed == verdict.passed else verdict.score - 0.9 * verdict.passed
    return verdict.model_copy(
        update={"judge": judgement, "passed": passed, "score": round(max(0.0, score), 12)}
    )


def reward(verdict: Verdict, *, shaped: bool = False) -> float | None:
    """The RL reward of a verdict (docs/methods.md §4, §13).

    ``1.0``/``0.0`` by the verdict, or with ``shaped`` its score (``0.9·verdict + 0.1·soft
    fraction``); ``None`` for an excluded (infra or simulator) trajectory, never ``0.0``.
    """
    if verdict.excluded:
        return None
    if shaped:
        return verdict.score
    return 1.0 if verdict.passed else 0.0
