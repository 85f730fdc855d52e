"""Other reads that answer a read task's question, so the checks do not pin the gold run's tool.

The checks hold an episode to the read its answer comes from (``constraints._reading_call``:
the gold run's tool, matched on every argument it was given), so that a read of other inputs
cannot state its own value and pass. A server often has more than one read of the same thing,
though (``read_multiple_files(paths=[p])`` and ``read_text_file(path=p)``), and a model that
asks with the other one and states the right answer is right.

So, after the gold run, the cluster's other reads are tried in the state the gold read saw (the
gold calls before it replayed from the initial snapshot), each given the gold read's own values
under the same names (``paths=["docs/a.txt"]`` gives ``path="docs/a.txt"``; a one-item list
and its item stand for each other). A read is an **equivalent** when it takes every value the
gold read was given and nothing more (no required parameter left to guess), answers without an
error, and its answer holds every value the task's answer check asks for (``MAX_TRIED``
reads at most, those named most like the gold read first). Each equivalent goes
on the ``tool_called`` check as an alternative (``ToolCalled.alternatives``), matched on the
values it was given; a read of other inputs still fails, and so does an episode that reads
nothing. An answer that changes between reads (``AnswerContains.observed``: a clock) ties the
task to the read it is taken from, and an answer the read's own arguments state (``echo``)
would be held by any read that repeats its input, so such tasks get no alternatives.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from trajsynth.curation.verify import answer_contains_value
from trajsynth.mcp_servers.arguments import schema_kinds
from trajsynth.planning.gold import observation_value
from trajsynth.planning.mutants import LintEnvironment, name_words, observation_text
from trajsynth.planning.paths import declared_properties
from trajsynth.schemas import (
    AnswerContains,
    CallPattern,
    Constraint,
    GoldCall,
    JsonValue,
    SnapshotHandle,
    ToolAccess,
    ToolCalled,
    ToolCluster,
    ToolSpec,
)
from trajsynth.schemas.failures import MCPServerError
from trajsynth.schemas.results import result_error

__all__ = ["MAX_TRIED", "mapped_arguments", "with_equivalent_reads"]

log = logging.getLogger(__name__)

MAX_TRIED = 6  # reads tried per reading check, those named most like the gold read first
_READING = re.compile(r"^gold_run\.calls\[(\d+)\]\.arguments$")


def mapped_arguments(gold: GoldCall, spec: ToolSpec) -> dict[str, JsonValue] | None:
    """The gold read's values under ``spec``'s parameter names, or None when ``spec`` does not
    take each of them, or needs a value the gold read was not given.

    >>> from trajsynth.schemas import ToolSpec
    >>> read = ToolSpec(name="read_text_file", description="Read a file.",
    ...     input_schema={"type": "object", "properties": {"path": {"type": "string"}},
    ...                   "required": ["path"]})
    >>> mapped_arguments(GoldCall(tool="read_multiple_files",
    ...     arguments={"paths": ["docs/a.txt"]}, observation="..."), read)
    {'path': 'docs/a.txt'}
    """
    props = declared_properties(spec)
    given = {k: v for k, v in gold.arguments.items() if v is not None}
    out: dict[str, JsonValue] = {}
    for name, given_value in given.items():
        value: JsonValue = given_value
        param = next((p for p in props if name_words(p) == name_words(name)), None)
        if param is None or param in out:
            return None
        sub = props[param]
        kinds = schema_kinds(sub if isinstance(sub, Mapping) else {})
        if isinstance(value, list) and "array" not in kinds:
            if len(value) != 1:
                return None
            value = value[0]
        elif not isinstance(value, list) and kinds == {"array"}:
            one: list[JsonValue] = [value]
            value = one
        out[param] = value
    if not out or any(p not in out for p in spec.required_parameters()):
        return None
    return out


def _echoes(gold: GoldCall, values: Sequence[Any]) -> bool:
    """Whether the read's own arguments state every answer value (``echo(message)``): any
    read that repeats its input would answer the same, so none stands for it."""
    given = " ".join(observation_text(v) for v in gold.arguments.values() if v is not None)
    return all(answer_contains_value(given, v) for v in values)


async def _answers(
    env: LintEnvironment, tool: str, arguments: dict[str, JsonValue], values: Sequence[Any]
) -> bool:
    """Whether the read succeeds and its answer holds every value."""
    try:
        result = await env.call_tool(tool, dict(arguments))
    except MCPServerError as exc:  # a read that takes the server down is no equivalent
        log.debug("equivalent read %s failed: %s", tool, exc)
        return False
    observation = observation_value(result)
    if getattr(result, "is_error", False) or result_error(observation) is not None:
        return False
    # the text as the model reads it, and the structured result as JSON
    texts = [str(getattr(result, "text", "") or ""), observation_text(observation)]
    return all(any(answer_contains_value(t, v) for t in texts) for v in values)


async def _replayed(env: LintEnvironment, handle: SnapshotHandle, calls: Sequence[GoldCall]):
    await env.restore(handle)
    for call in calls:
        await env.call_tool(call.tool, dict(call.arguments))


async def with_equivalent_reads(
    env: LintEnvironment,
    handle: SnapshotHandle,
    cluster: ToolCluster,
    gold: Sequence[GoldCall],
    constraints: list[Constraint],
) -> list[Constraint]:
    """``constraints`` with each reading check's equivalent reads as its alternatives (module
    doc). Leaves ``env`` restored to ``handle`` when it tried any read."""
    values = [
        v
        for c in constraints
        if isinstance(c, AnswerContains) and c.hard and c.observed is None
        for v in c.values
    ]
    if not values or any(isinstance(c, AnswerContains) and c.observed for c in constraints):
        return constraints
    reads = sorted((t for t in cluster.tools if t.access is ToolAccess.READ), key=lambda t: t.name)
    out: list[Constraint] = []
    tried_any = False
    for c in constraints:
        index = _READING.match(c.derived_from) if isinstance(c, ToolCalled) else None
        if not isinstance(c, ToolCalled) or index is None or not c.hard:
            out.append(c)
            continue
        i = int(index.group(1))
        if i >= len(gold) or gold[i].tool != c.call.tool or _echoes(gold[i], values):
            out.append(c)
            continue
        fixed = set(cluster.server.args)
        own = name_words(c.call.tool)
        candidates = sorted(
            (
                (spec.name, args)
                for spec in reads
                if spec.name != c.call.tool
                and (args := mapped_arguments(gold[i], spec)) is not None
            ),
            key=lambda named: -len(own & name_words(named[0])),  # a read named alike first
        )[:MAX_TRIED]
        found: list[CallPattern] = []
        if candidates:  # reads change nothing: one replay serves them all
            tried_any = True
            await _replayed(env, handle, gold[:i])
        for tool, args in candidates:
            if await _answers(env, tool, args, values):
                matchers = {k: v for k, v in args.items() if k not in fixed}
                found.append(CallPattern(tool=tool, matchers=matchers))
        if found:
            log.debug("%s answers as %s", ", ".join(p.tool for p in found), c.call.tool)
            c = c.model_copy(update={"alternatives": [*c.alternatives, *found]})
        out.append(c)
    if tried_any:
        await env.restore(handle)
    return out
