"""The gold run: execute a planned path once against a fresh environment (METHODS.md §3 step 7).

References between calls (``RefArg``: "field ``items[0].id`` of step 2's observation") are
resolved from the observations the calls actually returned. Any tool error, or a reference that
points at nothing, rejects the path; infrastructure faults (``InfraError``) are raised, since
they say nothing about the path.
"""

from __future__ import annotations

import json
import logging
import re
from collections import deque
from collections.abc import Mapping
from typing import Any, Protocol

from trajsynth.schemas import (
    EnvState,
    GoldCall,
    GoldRun,
    JsonValue,
    LiteralArg,
    PlannedCall,
    Record,
    RefArg,
    SlotArg,
    ToolCluster,
)

__all__ = [
    "GoldEnvironment",
    "GoldFailure",
    "GoldResult",
    "find_field",
    "observation_value",
    "resolve_field",
    "run_gold_path",
]

log = logging.getLogger(__name__)

_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


class GoldEnvironment(Protocol):
    """What the gold run needs of ``mcp_servers.environment.Environment``."""

    async def call_tool(self, name: str, arguments: dict) -> Any: ...

    async def state(self) -> EnvState: ...


class GoldFailure(Record):
    """Why the gold run failed: the step, and the tool's error text or the missing field."""

    step: int
    tool: str
    detail: str


class GoldResult(Record):
    """A successful gold run and the path with every reference pointing at a real field."""

    run: GoldRun
    steps: list[PlannedCall]


def observation_value(result: Any) -> JsonValue:
    """The observation as JSON: the structured result, else the text parsed, else the text.

    >>> class R: structured = None; text = '{"price": 9.5}'
    >>> observation_value(R())
    {'price': 9.5}
    """
    structured = getattr(result, "structured", None)
    if structured is not None:
        return structured
    text = getattr(result, "text", "") or ""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _segments(path: str) -> list[str | int]:
    out: list[str | int] = []
    for name, index in _SEGMENT.findall(path.replace("[]", "[0]")):
        out.append(int(index) if index else name)
    return out


_MISSING = object()


def _get(value: Any, segments: list[str | int]) -> Any:
    for seg in segments:
        if isinstance(seg, int):
            if not isinstance(value, list) or seg >= len(value):
                return _MISSING
            value = value[seg]
        else:
            if isinstance(value, list) and value and isinstance(value[0], Mapping):
                value = value[0]  # a field of a list of objects: its first item
            if not isinstance(value, Mapping) or seg not in value:
                return _MISSING
            value = value[seg]
    return value


def resolve_field(observation: JsonValue, path: str) -> JsonValue:
    """The value at a dotted path (``items[0].id``, ``flights[].id``) of an observation.

    Raises ``KeyError`` naming the path when it points at nothing.

    >>> resolve_field({"items": [{"id": "i9"}, {"id": "i10"}]}, "items[0].id")
    'i9'
    >>> resolve_field({"result": [{"id": 3}]}, "result[].id")
    3
    """
    value = _get(observation, _segments(path))
    if value is _MISSING:
        raise KeyError(path)
    return value


def find_field(observation: JsonValue, field: str) -> str | None:
    """A concrete path to ``field`` in ``observation``: the path itself when it resolves,
    else the nearest key named like its last segment (breadth first, first list items), else
    ``id`` inside a container named after the field (``product_id`` -> ``products[0].id``).

    >>> find_field({"order": {"total": 5}}, "total")
    'order.total'
    >>> find_field({"products": [{"id": "P1"}]}, "product_id")
    'products[0].id'
    """
    if _get(observation, _segments(field)) is not _MISSING:
        return field.replace("[]", "[0]")
    segments = [s for s in _segments(field) if isinstance(s, str)]
    if not segments:
        return None
    leaf = segments[-1]
    holder = leaf[: -len("_id")] if leaf.endswith("_id") else None
    fallback: str | None = None
    queue: deque[tuple[Any, str, str | None]] = deque([(observation, "", None)])
    while queue:
        value, path, key = queue.popleft()
        if isinstance(value, list):
            if value:
                queue.append((value[0], f"{path}[0]", key))
            continue
        if not isinstance(value, Mapping):
            continue
        if leaf in value and value[leaf] is not None:
            return f"{path}.{leaf}".lstrip(".")
        if fallback is None and holder and "id" in value and key and key.startswith(holder):
            fallback = f"{path}.id".lstrip(".")
        for k, v in value.items():
            if isinstance(v, Mapping | list):
                queue.append((v, f"{path}.{k}".lstrip("."), str(k)))
    return fallback


def _fit(value: JsonValue, schema: Mapping[str, Any]) -> JsonValue:
    """A referenced value shaped for the parameter: one item wrapped for an array param,
    the first item of a list for a scalar param."""
    kinds: set[str] = set()
    raw = schema.get("type")
    if isinstance(raw, str):
        kinds.add(raw)
    for option in schema.get("anyOf") or []:
        if isinstance(option, Mapping) and isinstance(option.get("type"), str):
            kinds.add(option["type"])
    if "array" in kinds and not isinstance(value, list):
        return [value]
    if kinds and "array" not in kinds and isinstance(value, list) and value:
        return value[0]
    return value


async def run_gold_path(
    env: GoldEnvironment,
    cluster: ToolCluster,
    steps: list[PlannedCall],
    slots: Mapping[str, JsonValue],
    initial_state: EnvState,
) -> GoldResult | GoldFailure:
    """Run ``steps`` in order in ``env`` (already in its initial state) (METHODS.md §3 step 7).

    Literal and slot arguments are filled in; a ``RefArg`` is read from the observation of
    its step (``find_field`` makes it concrete, and the returned path stores the concrete
    field). The first tool error or dangling reference ends the run with a ``GoldFailure``.
    """
    calls: list[GoldCall] = []
    observations: list[JsonValue] = []
    resolved: list[PlannedCall] = []
    for i, step in enumerate(steps):
        props = cluster.tool(step.tool).input_schema.get("properties") or {}
        arguments: dict[str, JsonValue] = {}
        bindings = dict(step.args)
        for name, arg in step.args.items():
            if isinstance(arg, LiteralArg):
                arguments[name] = arg.value
            elif isinstance(arg, SlotArg):
                if arg.name not in slots:
                    return GoldFailure(step=i, tool=step.tool, detail=f"no slot {arg.name!r}")
                arguments[name] = slots[arg.name]
            else:
                assert isinstance(arg, RefArg)
                if arg.step >= i:
                    return GoldFailure(step=i, tool=step.tool, detail=f"{name}: forward ref")
                path = find_field(observations[arg.step], arg.field)
                if path is None:
                    detail = f"{name}: no field {arg.field!r} in the output of step {arg.step}"
                    return GoldFailure(step=i, tool=step.tool, detail=detail)
                value = resolve_field(observations[arg.step], path)
                schema = props.get(name) if isinstance(props, Mapping) else None
                arguments[name] = _fit(value, schema if isinstance(schema, Mapping) else {})
                bindings[name] = RefArg(step=arg.step, field=path)
        result = await env.call_tool(step.tool, arguments)
        observation = observation_value(result)
        is_error = bool(getattr(result, "is_error", False))
        calls.append(
            GoldCall(
                tool=step.tool, arguments=arguments, observation=observation, is_error=is_error
            )
        )
        if is_error:
            text = getattr(result, "text", "") or str(observation)
            return GoldFailure(step=i, tool=step.tool, detail=text[:500])
        observations.append(observation)
        resolved.append(PlannedCall(tool=step.tool, args=bindings))
    final = await env.state()
    run = GoldRun(calls=calls, final_state=final, initial_state_hash=initial_state.state_hash)
    return GoldResult(run=run, steps=resolved)
