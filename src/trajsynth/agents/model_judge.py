"""An optional model judge: a strong model scores a trajectory against a rubric (``[run.judge]``).

The verifier decides ``passed`` with no model (``curation.verify``); a user with a strong model
can add its say. Each judged trajectory is shown to the judge as a plain transcript under the
rubric (``JudgeConfig.rubric``), and the first ``SCORE: <0..1>`` of its answer is read. The
result is stored beside the verdict (``Verdict.judge``); it changes ``passed`` only when the
user set ``decides`` (``curation.verify.apply_judgement``). A judge that fails (an infra fault,
an answer with no score) gives a result with no score: never a pass it did not give.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from trajsynth.llm.client import LLMClient
from trajsynth.schemas import (
    AgentRole,
    InfraError,
    JudgeConfig,
    JudgeResult,
    Message,
    MessageRole,
    Trajectory,
)

__all__ = ["judge_messages", "judge_trajectories", "judge_trajectory", "read_score"]

log = logging.getLogger(__name__)

_SCORE = re.compile(r"SCORE\s*[:=]\s*([01](?:\.\d+)?|\.\d+)", re.I)
_MAX_TEXT = 600  # characters of one message or result shown to the judge


def read_score(text: str) -> float | None:
    """The first ``SCORE: x`` in ``text`` with ``0 <= x <= 1``, else None.

    >>> read_score("SCORE: 0.8 - the user was answered"), read_score("score=1"), read_score("9")
    (0.8, 1.0, None)
    """
    found = _SCORE.search(text)
    if found is None:
        return None
    value = float(found.group(1))
    return value if 0.0 <= value <= 1.0 else None


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + " …"


def judge_messages(trajectory: Trajectory, rubric: str) -> list[Message]:
    """The judge's request: the rubric, then the conversation as a plain transcript."""
    lines = []
    for m in trajectory.messages:
        if m.role is MessageRole.SYSTEM:
            continue
        if m.role is MessageRole.TOOL:
            lines.append(f"TOOL RESULT ({m.name or 'tool'}): {_clip(m.content or '')}")
            continue
        if m.content:
            lines.append(f"{m.role.value.upper()}: {_clip(m.content)}")
        for call in m.tool_calls or []:
            lines.append(f"ASSISTANT CALLS {call.function.name}({_clip(call.function.arguments)})")
    functions = [t.get("function") for t in trajectory.tools]
    offered = ", ".join(str(f.get("name")) for f in functions if isinstance(f, dict))
    body = f"Tools offered: {offered or 'none'}\n\n" + "\n".join(lines)
    return [
        Message(role=MessageRole.SYSTEM, content=rubric),
        Message(role=MessageRole.USER, content=body),
    ]


async def judge_trajectory(
    llm: LLMClient, trajectory: Trajectory, config: JudgeConfig, *, model: str
) -> JudgeResult:
    """The judge's result for one trajectory (no score when the judge failed)."""
    try:
        result = await llm.chat(
            judge_messages(trajectory, config.rubric),
            role=AgentRole.VERIFIER,
            temperature=0.0,
            max_tokens=config.max_tokens,
            seed=0,
        )
    except InfraError as exc:
        log.warning("model judge failed on %s: %s", trajectory.trajectory_id, exc)
        return JudgeResult(model=model, reason=f"judge unavailable: {exc}"[:300],
                           decides=config.decides)  # fmt: skip
    text = (result.message.content or "").strip()
    score = read_score(text)
    return JudgeResult(
        model=model,
        score=score,
        accept=None if score is None else score >= config.threshold,
        reason=(text if score is not None else f"no SCORE in the answer: {text}")[:300],
        decides=config.decides,
    )


async def judge_trajectories(
    llm: LLMClient, trajectories: Sequence[Trajectory], config: JudgeConfig, *, model: str
) -> dict[str, JudgeResult]:
    """Every trajectory judged, by id; infra and simulator failures are not judged."""
    out: dict[str, JudgeResult] = {}
    for trajectory in trajectories:
        if trajectory.failure_class is not None and trajectory.failure_class.value in (
            "infra",
            "simulator",
        ):
            continue
        out[trajectory.trajectory_id] = await judge_trajectory(llm, trajectory, config, model=model)
    return out
