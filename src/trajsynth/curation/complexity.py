"""Cumulative action complexity, CAC (docs/methods.md §5.3), and the difficulty bins built on it.

Per tool-call step ``c_t = 1 + w_a·a_t + w_g·g_t + w_u·u_t + w_b·b_t + w_n·n_t`` (argument
structure, dependency depth, bound arguments, conditional call, new tool); ``CAC(τ)`` is
their sum. Difficulty bins are the CAC tertiles of round-0 accepted data, frozen.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from trajsynth.curation.canon import call_key, is_identifier, parse_json_maybe
from trajsynth.schemas import (
    CACBreakdown,
    CACStep,
    CACWeights,
    Difficulty,
    ObsClass,
    PlannedCall,
    RefArg,
    Trajectory,
)

__all__ = ["cac", "cac_tertiles", "difficulty_of"]

_TEXT_VALUE = re.compile(r"[\w#@./:+-]+")
_MAX_OBS_CHARS = 200_000


# --- cumulative action complexity (§5.3) -----------------------------------------------------


def _leaves_depth(value: Any) -> tuple[int, int]:
    """(leaf values given, container nesting depth) of one value; a scalar is depth 0."""
    if isinstance(value, Mapping):
        items = list(value.values())
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        return (0 if value is None else 1), 0
    leaves, depth = 0, 0
    for item in items:
        n, d = _leaves_depth(item)
        leaves += n
        depth = max(depth, d)
    return leaves, depth + 1


def _scalar_leaves(value: Any) -> list[Any]:
    if isinstance(value, Mapping):
        return [leaf for item in value.values() for leaf in _scalar_leaves(item)]
    if isinstance(value, list | tuple):
        return [leaf for item in value for leaf in _scalar_leaves(item)]
    return [] if value is None or isinstance(value, bool) else [value]


def _value_keys(value: Any, *, identifier: bool) -> list[str]:
    """Match keys of one argument value. Short strings and small integers are too common to
    signal data flow unless the argument is an identifier (``user_id=7``)."""
    keys = []
    if isinstance(value, str):
        text = value.strip()
        if text and (identifier or len(text) >= 3):
            keys.append("s:" + text)
        try:
            number = float(text)
        except ValueError:
            return keys
        if math.isfinite(number) and (identifier or not _small_int(number)):
            keys.append(f"n:{number!r}")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        if math.isfinite(number) and (identifier or not _small_int(number)):
            keys.append(f"n:{number!r}")
            if identifier:
                keys.append("s:" + str(value))
    return keys


def _small_int(x: float) -> bool:
    return x.is_integer() and abs(x) < 10


def _number_key(text: str) -> list[str]:
    try:
        number = float(text)
    except ValueError:
        return []
    return [f"n:{number!r}"] if math.isfinite(number) else []


def _observation_keys(observation: str) -> set[str]:
    """Every scalar value of an observation as a match key (JSON leaves, else text tokens)."""
    text = observation[:_MAX_OBS_CHARS]
    parsed = parse_json_maybe(text)
    keys: set[str] = set()
    if isinstance(parsed, Mapping | list):
        for leaf in _scalar_leaves(parsed):
            if isinstance(leaf, str):
                keys.add("s:" + leaf.strip())
                keys.update(_number_key(leaf))
            elif isinstance(leaf, int | float):
                keys.add(f"n:{float(leaf)!r}")
                keys.add("s:" + str(leaf))
        return keys
    if parsed is not None and not isinstance(parsed, str):
        if isinstance(parsed, int | float) and not isinstance(parsed, bool):
            keys.update({f"n:{float(parsed)!r}", "s:" + str(parsed)})
        return keys
    for token in _TEXT_VALUE.findall(text):
        token = token.strip(".,:;")
        if token:
            keys.add("s:" + token)
            keys.update(_number_key(token))
    return keys


def _planned_depths(planned: Sequence[PlannedCall] | None) -> dict[str, int]:
    """Depth of each tool along the planned path: 0 without refs, else 1 + max over refs."""
    if not planned:
        return {}
    depth: list[int] = []
    for k, call in enumerate(planned):
        refs = [a.step for a in call.args.values() if isinstance(a, RefArg) and a.step < k]
        depth.append(1 + max(depth[s] for s in refs) if refs else 0)
    out: dict[str, int] = {}
    for call, d in zip(planned, depth, strict=True):
        out.setdefault(call.tool, d)
    return out


def cac(
    trajectory: Trajectory,
    weights: CACWeights | None = None,
    *,
    branch_tools: Collection[str] = frozenset(),
    planned: Sequence[PlannedCall] | None = None,
) -> CACBreakdown:
    """Cumulative action complexity ``CAC(τ) = sum_t c_t`` (docs/methods.md §5.3).

    Per tool-call step: ``c_t = 1 + w_a·a_t + w_g·g_t + w_u·u_t + w_b·b_t + w_n·n_t`` with

    * ``a_t = log2(1 + L_t) + (D_t - 1)``: ``L_t`` non-null leaf values in the arguments
      (list items count), ``D_t`` nesting depth of the arguments (flat object = 1; objects and
      lists both nest). Arguments that did not parse count as ``{}``.
    * ``g_t``: 0 if no argument value equals a value of an earlier (non-error) observation,
      else ``1 + max g`` over the steps it takes values from (for each value, the latest step
      that showed it). When nothing matches but ``planned`` binds the tool to an earlier step
      (a ``ref``), the tool's depth along the planned path is used (``g_from_plan``).
    * ``u_t``: top-level arguments with at least one value bound to an earlier observation.
    * ``b_t = 1`` if the tool is in ``branch_tools`` (its blueprint node is a branch), or
      the previous observation was error/empty and this call differs (canonical call) from
      the one that failed.
    * ``n_t = 1`` for the first use of the tool in the trajectory.

    Strings shorter than 3 characters and integers below 10 are matched only in
    identifier-named arguments (``user_id=7``), so ``qty=1`` is not data flow. A trajectory
    with no tool calls has CAC 0.
    """
    w = weights or CACWeights()
    plan_depth = _planned_depths(planned)
    index: dict[str, int] = {}  # match key -> latest step whose observation showed it
    steps: list[CACStep] = []
    seen_tools: set[str] = set()
    prev_key: tuple[str, str] | None = None
    prev_class: ObsClass | None = None
    for t, call in enumerate(trajectory.calls):
        args = call.arguments if isinstance(call.arguments, Mapping) else {}
        leaves, depth = _leaves_depth(args)
        depth = max(depth, 1)
        a = math.log2(1 + leaves) + (depth - 1)
        sources: set[int] = set()
        bound = 0
        for name, value in args.items():
            ident = is_identifier(str(name))
            hit = False
            for leaf in _scalar_leaves(value):
                for key in _value_keys(leaf, identifier=ident):
                    if key in index:
                        sources.add(index[key])
                        hit = True
                        break
            bound += hit
        from_plan = False
        if sources:
            g = 1 + max(steps[s].g for s in sources)
        elif plan_depth.get(call.tool, 0) > 0:
            g, from_plan = plan_depth[call.tool], True
        else:
            g = 0
        key = call_key(call)
        branch = call.tool in branch_tools or (
            prev_class in (ObsClass.ERROR, ObsClass.EMPTY) and key != prev_key
        )
        first = call.tool not in seen_tools
        c = 1 + w.w_a * a + w.w_g * g + w.w_u * bound + w.w_b * int(branch) + w.w_n * int(first)
        steps.append(
            CACStep(
                index=t,
                tool=call.tool,
                leaves=leaves,
                depth=depth,
                a=a,
                g=g,
                u=bound,
                b=int(branch),
                n=int(first),
                sources=sorted(sources),
                g_from_plan=from_plan,
                c=c,
            )
        )
        seen_tools.add(call.tool)
        if call.obs_class is not ObsClass.ERROR and call.observation:
            for obs_key in _observation_keys(call.observation):
                index[obs_key] = t
        prev_key, prev_class = key, call.obs_class
    return CACBreakdown(
        cac=float(sum(s.c for s in steps)),
        n_steps=len(steps),
        n_distinct_tools=len(seen_tools),
        max_dep_depth=max((s.g for s in steps), default=0),
        n_bound_args=sum(s.u for s in steps),
        n_conditional=sum(s.b for s in steps),
        steps=steps,
    )


def cac_tertiles(values: Sequence[float]) -> tuple[float, float] | None:
    """The CAC tertile edges of round-0 accepted data, frozen as difficulty bins (§5.3).

    >>> cac_tertiles([1, 2, 3, 4, 5, 6, 7])
    (3.0, 5.0)
    >>> cac_tertiles([]) is None
    True
    """
    arr = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if arr.size == 0:
        return None
    lo, hi = np.quantile(arr, [1 / 3, 2 / 3])
    return float(lo), float(hi)


def difficulty_of(value: float, edges: tuple[float, float] | None) -> Difficulty | None:
    """The difficulty bin of one CAC value: below the first edge easy, below the second medium.

    >>> [difficulty_of(v, (3.0, 5.0)).value for v in (2.9, 3.0, 5.0)]
    ['easy', 'medium', 'hard']
    """
    if edges is None or value is None or not math.isfinite(value):
        return None
    if value < edges[0]:
        return Difficulty.EASY
    if value < edges[1]:
        return Difficulty.MEDIUM
    return Difficulty.HARD
