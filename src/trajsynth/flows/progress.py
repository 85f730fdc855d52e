"""Where flows report progress. The CLI installs a sink that drives a rich progress bar;
under a Prefect worker nothing is installed and progress goes to the flow's log.

Besides the per-stage counts (``report``), every assistant turn of every rollout is a
``turns`` event (``tick``): ``TurnReporter`` wraps a rollout's LLM client and ticks after
each assistant reply, so the display moves while a long tree grows, not only when it ends.
A tick's total is 0 (not known ahead: rollouts stop early); the rollout bar carries the ETA.

Every finished leaf (one trajectory of a tree, or one linear sample) is a ``leaves`` event
(``leaf``) with its outcome. Its total is the leaves still possible: a unit announces the most
it can grow (``expect_leaves``) and, when it ends, gives back those it did not grow
(``close_leaves``), so the total shrinks as trees stop early and the bar's ETA stays honest.
A retried unit announces its leaves again, so its earlier attempt's leaves stay counted.

Every LLM reply a rollout receives adds its tokens (prompt and completion, not those answered
from the cache) to a ``tokens`` event (``add_tokens``): a running total, total 0.
The sink is a context variable: Prefect's thread task runner copies the context into each
task, so ticks from task threads reach the same sink (a lock guards the shared count).

An LLM request that has waited more than a few seconds for its reply is a ``waiting`` event
(``llm_waiting``, the listener ``progress_sink`` installs for ``llm.waiting``): done is
the seconds waited, the message says who waits, on which try, and when it is retried
("waiting for the assistant's reply, 42 s (try 1 of 4; retried at 60 s) from URL"); when
the reply comes (or the try ends) one more event with an empty message clears it.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from trajsynth.llm.waiting import Waiting, wait_listener
from trajsynth.schemas import AgentRole, Message

__all__ = [
    "LEAF_OUTCOMES",
    "ProgressEvent",
    "TurnReporter",
    "add_tokens",
    "close_leaves",
    "expect_leaves",
    "leaf",
    "llm_waiting",
    "progress_sink",
    "report",
    "tick",
    "unit_leaves",
]

log = logging.getLogger(__name__)

ProgressEvent = tuple[str, int, int, str]  # (stage, done, total, message); total 0: unknown
_sink: ContextVar[Callable[[ProgressEvent], None] | None] = ContextVar(
    "trajsynth_progress", default=None
)
_counts: ContextVar[dict[str, int] | None] = ContextVar("trajsynth_progress_counts", default=None)
_lock = threading.Lock()

LEAF_OUTCOMES = ("passed", "failed", "pruned", "excluded")  # the order the note lists them


@dataclass
class _Leaves:
    """Leaves grown so far, by outcome, and per open unit the leaves it may still grow."""

    done: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    open: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.done + sum(self.open.values())

    def note(self) -> str:
        return ", ".join(f"{self.outcomes[o]} {o}" for o in LEAF_OUTCOMES if self.outcomes[o])


_leaves: ContextVar[_Leaves | None] = ContextVar("trajsynth_progress_leaves", default=None)


@contextmanager
def progress_sink(callback: Callable[[ProgressEvent], None]) -> Iterator[None]:
    token = _sink.set(callback)
    counts = _counts.set({})
    leaves = _leaves.set(_Leaves())
    try:
        with wait_listener(llm_waiting):
            yield
    finally:
        _leaves.reset(leaves)
        _counts.reset(counts)
        _sink.reset(token)


def report(stage: str, done: int, total: int, message: str = "") -> None:
    callback = _sink.get()
    if callback is None:
        log.info("%s %d/%d %s", stage, done, total, message)
    else:
        callback((stage, done, total, message))


def llm_waiting(notice: Waiting) -> None:
    """A request still waiting for its reply (``llm.waiting``), as a ``waiting`` event."""
    report("waiting", round(notice.waited_s), 0, "" if notice.done else notice.line())


def tick(stage: str, message: str = "") -> int:
    """One more event of an open-ended ``stage``; returns the count so far (under the sink)."""
    counts = _counts.get()
    if counts is None:
        log.debug("%s %s", stage, message)
        return 0
    with _lock:
        counts[stage] = n = counts.get(stage, 0) + 1
    report(stage, n, 0, message)
    return n


def add_tokens(n: int) -> int:
    """``n`` more tokens spent; returns the running total (0 with no sink: nothing counted)."""
    counts = _counts.get()
    if counts is None or n <= 0:
        return 0
    with _lock:
        counts["tokens"] = total = counts.get("tokens", 0) + n
    report("tokens", total, 0)
    return total


def expect_leaves(units: dict[str, int]) -> None:
    """Units (by label) that will grow at most this many leaves each; announcing a unit
    again (a retry) resets what it may still grow."""
    tally = _leaves.get()
    if tally is None or not units:  # no units (nothing planned): no empty, endless bar
        return
    with _lock:
        tally.open.update(units)
        event = ("leaves", tally.done, tally.total, tally.note())
    report(*event)


def close_leaves(label: str) -> None:
    """The unit ended (grown, or failed): leaves it did not grow will not come."""
    tally = _leaves.get()
    if tally is None:
        return
    with _lock:
        if tally.open.pop(label, 0) == 0:
            return  # nothing left to give back: the total did not change
        event = ("leaves", tally.done, tally.total, tally.note())
    report(*event)


@contextmanager
def unit_leaves(label: str, most: int) -> Iterator[None]:
    """A unit that grows at most ``most`` leaves while inside: announced on entry, what it
    did not grow given back on exit (raised or returned)."""
    expect_leaves({label: most})
    try:
        yield
    finally:
        close_leaves(label)


def leaf(label: str, outcome: str) -> int:
    """One finished leaf of unit ``label`` with its ``outcome`` (one of ``LEAF_OUTCOMES``);
    returns the leaves done so far (0 with no sink: the leaf is logged instead)."""
    tally = _leaves.get()
    if tally is None:
        log.info("leaf of %s: %s", label, outcome)
        return 0
    with _lock:
        tally.done += 1
        tally.outcomes[outcome] += 1
        if label in tally.open:
            tally.open[label] = max(0, tally.open[label] - 1)
        event = ("leaves", tally.done, tally.total, f"{label} {outcome}; {tally.note()}")
    report(*event)
    return event[1]


class TurnReporter:
    """An ``LLMClient`` that ticks ``turns`` after each assistant reply; everything else is
    the wrapped client's."""

    def __init__(self, client: Any, label: str) -> None:
        self._client = client
        self._label = label

    async def chat(self, messages: Sequence[Message], *, role: AgentRole, **kwargs: Any) -> Any:
        result = await self._client.chat(messages, role=role, **kwargs)
        usage = getattr(result, "usage", None)
        if usage is not None and not usage.cached:
            add_tokens(usage.prompt_tokens + usage.completion_tokens)
        if role is AgentRole.ASSISTANT:
            turn = 1 + sum(m.role.value == "assistant" for m in messages)
            tick("turns", f"{self._label} turn {turn}")
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)
