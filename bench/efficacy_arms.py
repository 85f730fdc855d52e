"""The data of the efficacy bench's arms, and the keys its cache is read by (bench/efficacy.py).

Pure functions over SFT rows (``schemas.SFTRow``) and trajectories, so the arms' plumbing is
tested without a model (tests/bench/test_efficacy_arms.py):

* ``assistant_tokens``: the tokens the SFT loss trains on (the assistant mask of the chat
  template ``llm.chat_template.render`` gives the trainer), per row;
* ``take_budget``: rows drawn at random (seeded) until an assistant-token budget is spent, so
  every arm trains on the same number of loss tokens, whatever its rows' lengths;
* ``swap_values``: the format control. Each trajectory's tool-call argument values are
  swapped with another trajectory's values for the same tool and argument (reversed where
  no other trajectory has one), and the same strings swapped in the assistant's words, so
  the rows keep their template, roles, tools and nearly their length while the calls are on
  the wrong things; the caller keeps only those the verifier then fails;
* ``content_key``: what a cached model or eval is keyed by (its arguments, its data's hash and
  the code version), so a rerun never reports a stale arm.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from trajsynth.schemas import Message, SFTRow, Trajectory, stable_hash

__all__ = [
    "assistant_tokens",
    "code_version",
    "content_key",
    "swap_values",
    "take_budget",
]


def assistant_tokens(rows: Sequence[SFTRow], tokenizer: Any) -> list[int]:
    """Loss tokens of each row: the assistant mask's ones under the training template."""
    from trajsynth.llm.chat_template import render

    out = []
    for row in rows:
        _ids, mask = render([m.to_openai() for m in row.messages], row.tools, tokenizer)
        out.append(sum(mask))
    return out


def take_budget(
    rows: Sequence[Any], tokens: Sequence[int], budget: int, *, seed: int
) -> tuple[list[Any], int]:
    """Rows in a seeded random order, each kept while the running total stays within
    ``budget``; returns them and the tokens spent. Every arm is cut to one budget, the
    smallest arm's total, so none trains on more loss tokens than another.

    >>> take_budget(["a", "b", "c"], [5, 5, 5], 10, seed=0)[1]
    10
    """
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    kept, used = [], 0
    for i in order:
        if used + tokens[i] <= budget:
            kept.append(rows[i])
            used += tokens[i]
    return kept, used


def _swap_map(calls_by_traj: list[list[tuple[str, str, str]]], rng: random.Random) -> list[dict]:
    """For each trajectory, original string -> a value another trajectory gave the same
    tool's same argument (a different string), or the value scrambled where none exists."""
    pool: dict[tuple[str, str], set[str]] = defaultdict(set)
    for calls in calls_by_traj:
        for tool, arg, value in calls:
            pool[tool, arg].add(value)
    out = []
    for calls in calls_by_traj:
        mapping: dict[str, str] = {}
        for tool, arg, value in calls:
            if value in mapping:
                continue
            others = sorted(pool[tool, arg] - {value})
            mapping[value] = rng.choice(others) if others else _scrambled(value)
        out.append(mapping)
    return out


def _scrambled(value: str) -> str:
    """A value of the same length and characters that is not ``value`` (no other
    trajectory gave this argument a value to swap with): reversed, or rotated by one."""
    if value[::-1] != value:
        return value[::-1]
    rotated = value[1:] + value[:1]
    return rotated if rotated != value else value + "x"


def _scalar_args(arguments: dict[str, Any] | None) -> Iterable[tuple[str, str]]:
    for name, value in (arguments or {}).items():
        if isinstance(value, str) and value:
            yield name, value


def _swapped_message(message: Message, mapping: dict[str, str]) -> Message:
    if message.role != "assistant":
        return message
    content = message.content
    if content:
        for old, new in mapping.items():
            content = content.replace(old, new)
    calls = message.tool_calls
    if calls:
        calls = [
            c.model_copy(
                update={
                    "function": c.function.model_copy(
                        update={"arguments": _swap_json(c.function.arguments, mapping)}
                    )
                }
            )
            for c in calls
        ]
    return message.model_copy(update={"content": content, "tool_calls": calls})


def _swap_json(raw: str, mapping: dict[str, str]) -> str:
    try:
        data = json.loads(raw)
    except (TypeError, ValueError):
        return raw
    if not isinstance(data, dict):
        return raw
    swapped = {k: mapping.get(v, v) if isinstance(v, str) else v for k, v in data.items()}
    return json.dumps(swapped)


def swap_values(trajectories: Sequence[Trajectory], *, seed: int) -> list[Trajectory]:
    """The format control's trajectories: argument values swapped between trajectories (see
    the module doc); a trajectory with no string argument comes back as it was. The caller
    re-verifies every one and keeps those that now fail."""
    rng = random.Random(seed)
    calls_by_traj = [
        [(c.tool, a, v) for c in t.calls for a, v in _scalar_args(c.arguments)]
        for t in trajectories
    ]
    out = []
    for t, mapping in zip(trajectories, _swap_map(calls_by_traj, rng), strict=True):
        if not mapping:
            out.append(t)
            continue
        calls = [
            c.model_copy(
                update={
                    "arguments": {
                        k: mapping.get(v, v) if isinstance(v, str) else v
                        for k, v in (c.arguments or {}).items()
                    },
                    "raw_arguments": _swap_json(c.raw_arguments, mapping),
                }
            )
            for c in t.calls
        ]
        answer = t.final_answer
        if answer:
            for old, new in mapping.items():
                answer = answer.replace(old, new)
        out.append(
            t.model_copy(
                update={
                    "messages": [_swapped_message(m, mapping) for m in t.messages],
                    "calls": calls,
                    "final_answer": answer,
                }
            )
        )
    return out


def code_version(roots: Sequence[Path]) -> str:
    """A hash of every Python file under ``roots`` (the package and the bench): a cached
    result made by other code is never reused, committed or not."""
    digest = hashlib.sha256()
    for root in roots:
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for f in files:
            digest.update(str(f.relative_to(root.parent)).encode())
            digest.update(f.read_bytes())
    return digest.hexdigest()[:16]


def content_key(kind: str, *, args: dict[str, Any], data: str, code: str) -> str:
    """A cache entry's key: what it is, the arguments that made it, its data, the code."""
    return f"{kind}-{stable_hash([kind, args, data, code], length=16)}"


def cached(
    folder: Path, key: str, make: Callable[[Path], dict[str, Any]]
) -> tuple[dict[str, Any], bool]:
    """The result stored under ``folder/key/result.json``, or ``make(folder/key)``'s, stored
    whole once it returns; returns (result, reused)."""
    where = folder / key
    done = where / "result.json"
    if done.is_file():
        return json.loads(done.read_text()), True
    where.mkdir(parents=True, exist_ok=True)
    result = make(where)
    tmp = where / "result.json.tmp"
    tmp.write_text(json.dumps(result, indent=2, default=str))
    tmp.replace(done)
    return result, False
