"""What of an outside server the model never sees: harness controls and fixed parameters.

A benchmark server may carry tools for its harness (``reset_state``, ``get_call_log``) and
parameters that route calls (``state_key``). Such a tool is never a task's target, never a
discovery reader (a call log changes after every call, so every tool looked like a write) and
never offered to the policy; such a parameter is removed from the schema the model sees, and
the environment injects its fixed value (``--arg``) into every call that had it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trajsynth.mcp_servers.tags import name_tokens
from trajsynth.schemas import JsonValue, ToolSpec

__all__ = ["is_control", "visible_tools"]

_RESET = frozenset({"reset", "reseed", "teardown"})
_STATE = frozenset({"state", "env", "environment", "db", "database", "all", "harness"})
_LOG = frozenset({"log", "logs", "trace", "history"})
_CALLS = frozenset({"call", "calls", "request", "requests", "tool"})


def is_control(name: str) -> bool:
    """Whether a tool's name says it controls the harness, not the service.

    >>> [is_control(n) for n in ("reset_state", "get_call_log", "reset_password", "get_order")]
    [True, True, False, False]
    """
    tokens = set(name_tokens(name))
    if tokens & _RESET and (tokens & _STATE or tokens <= _RESET):
        return True
    return bool(tokens & _LOG and tokens & _CALLS)


def visible_tools(
    specs: Sequence[ToolSpec],
    *,
    hide: Sequence[str] = (),
    hide_params: Sequence[str] = (),
    fixed: Mapping[str, JsonValue] | None = None,
) -> tuple[list[ToolSpec], list[str]]:
    """The tools the model sees, and the names of those hidden (``hide`` and controls).

    A parameter in ``hide_params`` or ``fixed`` leaves the schema; its fixed value, when there
    is one, goes in ``ToolSpec.injected``."""
    fixed = dict(fixed or {})
    drop = set(hide_params) | set(fixed)
    shown: list[ToolSpec] = []
    hidden: list[str] = []
    for spec in specs:
        if spec.name in hide or is_control(spec.name):
            hidden.append(spec.name)
            continue
        props = spec.input_schema.get("properties")
        if not isinstance(props, Mapping) or not drop & set(props):
            shown.append(spec)
            continue
        gone = sorted(drop & set(props))
        schema = dict(spec.input_schema)
        schema["properties"] = {k: v for k, v in props.items() if k not in gone}
        required = schema.get("required")
        if isinstance(required, list):
            schema["required"] = [r for r in required if r not in gone]
        injected = {k: fixed[k] for k in gone if k in fixed}
        shown.append(spec.model_copy(update={"input_schema": schema, "injected": injected}))
    return shown, hidden
