"""Cheap per-trajectory signals and the triage score, with no model call (docs/methods.md §7).

Each signal is one small detector registered with ``@detector(name)`` (style.md §1) that reads a
``SignalContext`` (built in one pass over the messages) and returns the ``Signals`` fields it
owns. ``compute_signals`` runs them all and adds ``triage``. Thresholds marked (plano) come from
katanemo/plano's signals documentation, as docs/methods.md §7 says.

Decisions (docs/methods.md leaves them open):

- User turns are all user messages; repairs, gratitude and quit phrases are looked for only in
  the user's *replies* (user messages after the first assistant message), since the opening
  message is the task, not a reaction. A reply is a repair when it has a correction phrase or
  shares >= 0.5 token-Jaccard (stopwords removed) with the previous user message.
- Turns (stagnation) are assistant turns. ``no_progress`` needs at least 3 assistant turns: it
  holds when none of the last 3 reached a ``state_key`` (§1.2) not seen earlier in the rollout.
- Failure: calls of class error over all calls; infra-class calls count in neither (they never
  count against the policy). A call is malformed when its failure class is ``model`` or its
  arguments did not parse.
- Loop: one repetition instance per call whose ``canon_call`` already occurred twice in the
  previous 10 calls (so a third identical call is one instance), plus one per assistant text
  with bigram-Jaccard >= 0.60 to one of the previous 10 assistant texts (>= 0.85 is "exact",
  and also one instance). Flag when instances > 2 (plano).
- Exhaustion also counts ``tool_budget``: the termination enum has it and it is a budget.
- Disengagement "the simulator stops before the goal is met" needs the verdict: termination
  ``user_stop`` with a failed, non-excluded verdict. Without a verdict only phrases count.
"""

from __future__ import annotations

import logging
import re
from collections import Counter, deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from trajsynth.curation.topology import Step, Turn, trajectory_steps, turns
from trajsynth.schemas import (
    FailureClass,
    MessageRole,
    ObsClass,
    Registry,
    Signals,
    Termination,
    Trajectory,
    Verdict,
)

__all__ = [
    "EXHAUSTION_TERMINATIONS",
    "TRIAGE_WEIGHTS",
    "SignalContext",
    "SignalDetector",
    "bigram_jaccard",
    "compute_signals",
    "detector",
    "registered_detectors",
    "stagnation_efficiency",
    "token_jaccard",
    "triage_score",
]

log = logging.getLogger(__name__)

# docs/methods.md §7, "Uses" (2): flags as 0/1.
TRIAGE_WEIGHTS: Mapping[str, float] = {
    "misalignment": 1.0,
    "stagnation": 0.75,
    "disengagement": 1.0,
    "failure": 1.0,
    "loop": 1.0,
    "exhaustion": 0.5,
}
EXHAUSTION_TERMINATIONS = frozenset(
    {
        Termination.MAX_TURNS,
        Termination.CONTEXT_LIMIT,
        Termination.TOKEN_BUDGET,
        Termination.TOOL_TIMEOUT,
        Termination.EARLY_STOP,
        Termination.TOOL_BUDGET,
    }
)
MISALIGNMENT_RATIO = 0.3  # (plano)
REPHRASE_JACCARD = 0.5
TURN_BASELINE = 5  # (plano)
TURN_PENALTY = 0.3  # (plano)
EFFICIENCY_FLAG = 0.5
NO_PROGRESS_TURNS = 3
LOOP_WINDOW = 10
LOOP_SAME_CALL = 3
NEAR_REPEAT = 0.60  # (plano)
EXACT_REPEAT = 0.85  # (plano)
LOOP_INSTANCES = 2  # flag when instances exceed this (plano)

_CORRECTION = re.compile(
    r"\b(i meant|i mean\b|that'?s not|that is not|to clarify|correction|let me rephrase|"
    r"my mistake|i was wrong|not what i (asked|meant|said)|no,\s)",
    re.IGNORECASE,
)
_QUIT = re.compile(
    r"\b(speak to a human|talk to a human|real person|live agent|contact support|"
    r"help ?desk|i'?m done|forget it|i give up|never ?mind)\b",
    re.IGNORECASE,
)
_GRATITUDE = re.compile(
    r"\b(thank you|thanks|thx|appreciate it|that'?s great|awesome|love it|got it|"
    r"that worked|perfect|great)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[a-z0-9']+")
_STOPWORDS = frozenset(
    {
        "a", "an", "the", "and", "or", "but", "if", "then", "so", "to", "of", "in", "on", "at",
        "for", "with", "by", "from", "as", "is", "are", "was", "were", "be", "been", "am", "do",
        "does", "did", "i", "me", "my", "we", "our", "you", "your", "it", "its", "this", "that",
        "these", "those", "there", "here", "please", "can", "could", "would", "will", "just",
        "not", "no", "yes", "ok", "okay",
    }
)  # fmt: skip


def _words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def token_jaccard(a: str, b: str) -> float:
    """Jaccard of word sets with stopwords removed; 0 when either side is empty.

    >>> token_jaccard("cancel order W1 please", "please cancel the order W1")
    1.0
    """
    x = {w for w in _words(a) if w not in _STOPWORDS}
    y = {w for w in _words(b) if w not in _STOPWORDS}
    return len(x & y) / len(x | y) if x and y else 0.0


def _bigrams(text: str) -> frozenset[tuple[str, str]]:
    words = _words(text)
    return frozenset(zip(words, words[1:], strict=False))


def bigram_jaccard(a: str, b: str) -> float:
    """Jaccard of word-bigram sets (plano's repetition measure); 0 when either has none.

    >>> bigram_jaccard("let me check that order", "let me check that order")
    1.0
    """
    x, y = _bigrams(a), _bigrams(b)
    return len(x & y) / len(x | y) if x and y else 0.0


def stagnation_efficiency(turns: int, baseline: int = TURN_BASELINE) -> float:
    """``1 / (1 + 0.3·max(0, turns - baseline))`` (plano, docs/methods.md §7).

    >>> round(stagnation_efficiency(9), 5)
    0.45455
    """
    return 1.0 / (1.0 + TURN_PENALTY * max(0, turns - baseline))


# --- the context detectors read -------------------------------------------------------------


@dataclass
class SignalContext:
    """A trajectory as the detectors read it; expensive parts are computed once, on demand."""

    trajectory: Trajectory
    verdict: Verdict | None = None
    write_tools: Collection[str] | None = None
    user_turns: list[str] = field(default_factory=list)
    user_replies: list[str] = field(default_factory=list)
    assistant_texts: list[str] = field(default_factory=list)
    known_steps: tuple[str, list[Step]] | None = None  # the caller's trajectory_steps

    @classmethod
    def build(
        cls,
        trajectory: Trajectory,
        verdict: Verdict | None = None,
        write_tools: Collection[str] | None = None,
    ) -> SignalContext:
        ctx = cls(trajectory, verdict, write_tools)
        seen_assistant = False
        for message in trajectory.messages:
            if message.role is MessageRole.USER:
                text = message.content or ""
                ctx.user_turns.append(text)
                if seen_assistant:
                    ctx.user_replies.append(text)
            elif message.role is MessageRole.ASSISTANT:
                seen_assistant = True
                if message.content and message.content.strip():
                    ctx.assistant_texts.append(message.content)
        return ctx

    @cached_property
    def turns(self) -> list[Turn]:
        return turns(self.trajectory)

    @cached_property
    def steps(self) -> tuple[str, list[Step]]:
        """The start state key and the steps of the rollout (``curation.topology``)."""
        if self.known_steps is not None:
            return self.known_steps
        return trajectory_steps(self.trajectory, write_tools=self.write_tools)

    @cached_property
    def turn_states(self) -> list[set[str]]:
        """The new state keys each assistant turn reached (empty: the turn changed nothing)."""
        start, steps = self.steps
        out: list[set[str]] = [set() for _ in self.turns]
        seen = {start}
        for step in steps:
            if step.error or step.state in seen:
                continue
            seen.add(step.state)
            while len(out) <= step.turn:
                out.append(set())
            out[step.turn].add(step.state)
        return out


SignalDetector = Callable[[SignalContext], dict[str, Any]]
DETECTORS: Registry[SignalDetector] = Registry("signal detector")


def detector(name: str) -> Callable[[SignalDetector], SignalDetector]:
    """Register a signal detector: ``(ctx) -> {Signals field: value}`` (docs/style.md §1)."""
    return DETECTORS.register(name)


def registered_detectors() -> list[str]:
    """The registered signal names, sorted."""
    return DETECTORS.names()


# --- the detectors (docs/methods.md §7 table) ----------------------------------------------------


@detector("misalignment")
def _misalignment(ctx: SignalContext) -> dict[str, Any]:
    """Repair turns / user turns; flag when > 0.3 (plano)."""
    repairs = 0
    offset = len(ctx.user_turns) - len(ctx.user_replies)
    for i, reply in enumerate(ctx.user_replies):
        previous = ctx.user_turns[offset + i - 1] if offset + i >= 1 else ""
        if _CORRECTION.search(reply) or token_jaccard(reply, previous) >= REPHRASE_JACCARD:
            repairs += 1
    ratio = repairs / len(ctx.user_turns) if ctx.user_turns else 0.0
    return {"misalignment_ratio": ratio, "misalignment": ratio > MISALIGNMENT_RATIO}


@detector("stagnation")
def _stagnation(ctx: SignalContext) -> dict[str, Any]:
    """Turn efficiency (plano, baseline 5) and no new state in the last 3 assistant turns."""
    n_turns = len(ctx.turns)
    efficiency = stagnation_efficiency(n_turns)
    no_progress = False
    if n_turns >= NO_PROGRESS_TURNS:
        last = ctx.turn_states[-NO_PROGRESS_TURNS:]
        no_progress = not any(last)
    return {
        "efficiency": efficiency,
        "no_progress": no_progress,
        "stagnation": efficiency < EFFICIENCY_FLAG or no_progress,
    }


@detector("disengagement")
def _disengagement(ctx: SignalContext) -> dict[str, Any]:
    """Quit/escalation phrases, or the simulator stopping before the goal was met."""
    phrase = any(_QUIT.search(reply) for reply in ctx.user_replies)
    verdict = ctx.verdict
    early_stop = (
        ctx.trajectory.termination is Termination.USER_STOP
        and verdict is not None
        and not verdict.excluded
        and not verdict.passed
    )
    return {"disengagement": phrase or early_stop}


@detector("satisfaction")
def _satisfaction(ctx: SignalContext) -> dict[str, Any]:
    """Gratitude/success phrases; confidence 0.6 / 0.8 / 0.95 for 1 / 2 / 3+ (plano)."""
    count = sum(len(_GRATITUDE.findall(reply)) for reply in ctx.user_replies)
    confidence = 0.0 if count == 0 else (0.6 if count == 1 else 0.8 if count == 2 else 0.95)
    return {
        "satisfaction_count": count,
        "satisfaction_confidence": confidence,
        "satisfaction": count >= 1,
    }


@detector("failure")
def _failure(ctx: SignalContext) -> dict[str, Any]:
    """Error-class calls / calls (infra calls left out); malformed calls counted apart."""
    calls = [c for c in ctx.trajectory.calls if c.failure_class is not FailureClass.INFRA]
    errors = sum(1 for c in calls if c.obs_class is ObsClass.ERROR)
    malformed = sum(
        1 for c in calls if c.failure_class is FailureClass.MODEL or c.arguments is None
    )
    rate = errors / len(calls) if calls else 0.0
    return {"failure_rate": rate, "malformed_calls": malformed, "failure": rate > 0}


@detector("loop")
def _loop(ctx: SignalContext) -> dict[str, Any]:
    """Repeated canonical calls (3 within 10) and repeated assistant texts (plano bigrams)."""
    instances = 0
    window: deque[str] = deque(maxlen=LOOP_WINDOW)
    counts: Counter[str] = Counter()
    for step in ctx.steps[1]:
        if step.action == "ask_user":
            continue
        if counts[step.action] >= LOOP_SAME_CALL - 1:
            instances += 1
        if len(window) == window.maxlen:
            counts[window[0]] -= 1
        window.append(step.action)
        counts[step.action] += 1
    previous: deque[frozenset[tuple[str, str]]] = deque(maxlen=LOOP_WINDOW)
    for text in ctx.assistant_texts:
        grams = _bigrams(text)
        if grams and any(len(grams & p) / len(grams | p) >= NEAR_REPEAT for p in previous if p):
            instances += 1
        previous.append(grams)
    return {"repetition_instances": instances, "loop": instances > LOOP_INSTANCES}


@detector("exhaustion")
def _exhaustion(ctx: SignalContext) -> dict[str, Any]:
    """The rollout stopped on a budget (turns, tokens, context, tool time, early stop)."""
    return {"exhaustion": ctx.trajectory.termination in EXHAUSTION_TERMINATIONS}


# --- the entry point ------------------------------------------------------------------------


def triage_score(flags: Mapping[str, bool], weights: Mapping[str, float] = TRIAGE_WEIGHTS) -> float:
    """``1.0·misalign + 0.75·stagnation + 1.0·disengage + 1.0·failure + 1.0·loop +
    0.5·exhaustion`` with flags as 0/1 (docs/methods.md §7, "Uses" 2).

    >>> triage_score({"stagnation": True, "exhaustion": True, "satisfaction": True})
    1.25
    """
    return float(sum(w for name, w in weights.items() if flags.get(name)))


def compute_signals(
    trajectory: Trajectory,
    *,
    verdict: Verdict | None = None,
    write_tools: Collection[str] | None = None,
    weights: Mapping[str, float] = TRIAGE_WEIGHTS,
    steps: tuple[str, list[Step]] | None = None,
) -> Signals:
    """Every registered signal of one trajectory plus ``triage`` (docs/methods.md §7).

    O(messages + calls); no model call. ``verdict`` (optional) lets disengagement see a
    simulator that stopped before the goal was met; ``write_tools`` is passed to the state keys
    of the ``no_progress`` check (see ``curation.topology``); ``steps`` are that check's
    ``trajectory_steps`` when the caller has them already (curation computes them once, with
    the task's hidden info, for signals and topology alike). A trajectory with no messages or
    no calls gets defined values (rates 0, no flags).

    >>> from trajsynth.schemas import Message, Termination, Trajectory
    >>> t = Trajectory(trajectory_id="t", run_id="r", blueprint_id="b", tree_id="x",
    ...     leaf_node_id="l", cluster_id="c", termination=Termination.MAX_TURNS,
    ...     messages=[Message(role="user", content="hi")])
    >>> s = compute_signals(t)
    >>> s.exhaustion, s.triage
    (True, 0.5)
    """
    ctx = SignalContext.build(trajectory, verdict, write_tools)
    ctx.known_steps = steps
    values: dict[str, Any] = {}
    for name in registered_detectors():
        values.update(DETECTORS.get(name)(ctx))
    flags = {
        "misalignment": values["misalignment"],
        "stagnation": values["stagnation"],
        "disengagement": values["disengagement"],
        "failure": values["failure"],
        "loop": values["loop"],
        "exhaustion": values["exhaustion"],
    }
    return Signals(
        trajectory_id=trajectory.trajectory_id,
        triage=triage_score(flags, weights),
        **values,
    )
