"""Why a run produced little: its top failure reasons with counts, and what to change.

Read from the store after the run: the failed trajectories by failure class, the hard
constraints that failed most (by kind, with one detail as an example), and how the failed
rollouts stopped. Each reason carries one line of advice (a setting or option to change).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from pydantic import BaseModel

from trajsynth.store import Store

__all__ = ["Reason", "little_reasons", "produced_little"]

TOP = 3

_CLASS_HINT = {
    "model": "the policy got the task wrong: a larger model (--model/--base-url), or more "
    "--samples per task (tree rollouts branch where it is unsure)",
    "tool": "tool calls failed: `synth clusters show CLUSTER` lists the tools and their "
    "schemas; an outside server may need its state or credentials",
    "simulator": "the user simulator broke (excluded from pass rates): a model that follows "
    "the simulator prompt, a lower [run.llm] temperature, or more [run] user_resamples",
    "infra": "sandbox or server faults (excluded from pass rates): run `synth doctor`",
}
_STOP_HINT = {
    "max_turns": "rollouts ran out of turns: raise [run.budgets] max_turns in synth.toml",
    "tool_budget": "rollouts ran out of tool calls: raise [run.budgets] max_tool_calls",
    "token_budget": "rollouts ran out of tokens: raise [run.budgets] max_tokens",
    "context_limit": "conversations outgrew the context: serve more of it (llama-cpp-python "
    "--n_ctx, vLLM --max-model-len), or a model with a longer one",
    "tool_timeout": "tool calls timed out: raise [run.budgets] tool_timeout_s",
    "simulator_error": "the user simulator failed: see the simulator class above",
}


class Reason(BaseModel):
    """One reason, how many trajectories it hit, and what to change."""

    what: str
    count: int
    hint: str


def produced_little(passed: int, counted: int, trajectories: int) -> bool:
    """A run worth explaining: nothing at all, or fewer than half of the counted passed."""
    return trajectories == 0 or passed == 0 or (counted > 0 and passed / counted < 0.5)


def _failed(store: Store, run_id: str) -> list[dict[str, Any]]:
    return store.query(
        "SELECT t.failure_class, t.termination, v.results, v.hygiene FROM trajectories t "
        "JOIN verdicts v USING (trajectory_id) WHERE t.run_id = ? AND NOT v.passed",
        [run_id],
    )


def little_reasons(store: Store, run_id: str) -> list[Reason]:
    """The top failure classes, failed hard constraints and stops of the run's failed
    trajectories, most frequent first in each group."""
    rows = _failed(store, run_id)
    classes = Counter(str(r["failure_class"] or "model") for r in rows)
    stops = Counter(str(r["termination"]) for r in rows if str(r["termination"]) in _STOP_HINT)
    kinds: Counter[str] = Counter()
    example: dict[str, str] = {}
    for r in rows:
        results = r["results"]
        if isinstance(results, str):
            results = json.loads(results)
        for res in results or []:
            if res.get("hard") and not res.get("passed"):
                kinds[str(res.get("kind"))] += 1
                example.setdefault(str(res.get("kind")), str(res.get("detail") or ""))
    checks: Counter[str] = Counter()
    for r in rows:
        hygiene = r.get("hygiene")
        if isinstance(hygiene, str):
            hygiene = json.loads(hygiene)
        for res in hygiene or []:
            if not res.get("passed"):
                checks[str(res.get("check"))] += 1
                example.setdefault(f"hygiene {res.get('check')}", str(res.get("detail") or ""))
    out = [
        Reason(what=f"failure class {cls}", count=n, hint=_CLASS_HINT.get(cls, ""))
        for cls, n in classes.most_common(TOP)
    ]
    out += [
        Reason(
            what=f"constraint {kind} failed",
            count=n,
            hint=(f"e.g. {example[kind]}; " if example[kind] else "")
            + "`synth show trajectory ID` shows each constraint's verdict",
        )
        for kind, n in kinds.most_common(TOP)
    ]
    out += [
        Reason(
            what=f"hygiene check {check} failed",
            count=n,
            hint=(f"e.g. {example[f'hygiene {check}']}; " if example[f"hygiene {check}"] else "")
            + "not a clean example (docs/verification.md)",
        )
        for check, n in checks.most_common(TOP)
    ]
    out += [
        Reason(what=f"stopped by {stop}", count=n, hint=_STOP_HINT[stop])
        for stop, n in stops.most_common(TOP)
    ]
    return out
