"""The GRPO reward: the verifier that judged the data, run on a live environment (methods.md §13).

TRL calls ``VerifierReward`` once per batch with the prompts, the completions (the assistant
and tool messages of the multi-turn rollout) and the per-completion environments
(``tool_env.TaskEnvironment``, whose tools ran the completion's calls against its own live
sandboxed environment). For each completion the reward is ``curation.verify.reward(verify(
trajectory, constraints, final_state))``: the same code, the same trajectory shape and the same
final-state read (code checks included) as the curation verdict. A sandbox or server fault
(``infra``) while acting or scoring gives ``None`` (TRL leaves the completion out of its group),
never ``0``. Each environment is closed once scored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trajsynth.curation.verify import reward as verdict_reward
from trajsynth.curation.verify import verify
from trajsynth.schemas import (
    FailureClass,
    FunctionCall,
    InfraError,
    Message,
    MessageRole,
    Termination,
    ToolCall,
    Trajectory,
    Verdict,
    canonical_json,
    content_id,
)
from trajsynth.training.tool_env import TaskEnvironment

__all__ = ["VerifierReward", "completion_trajectory", "score_completion", "turn_call_counts"]

log = logging.getLogger(__name__)


def _message(raw: Mapping[str, Any] | Message) -> Message:
    if isinstance(raw, Message):
        return raw
    data = {k: v for k, v in raw.items() if v is not None and k in Message.model_fields}
    return Message.model_validate(data)


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else canonical_json(arguments or {})


def turn_call_counts(completion: Sequence[Mapping[str, Any]]) -> list[int]:
    """Tool calls per assistant turn of a TRL completion (one entry per assistant message)."""
    return [len(m.get("tool_calls") or []) for m in completion if m.get("role") == "assistant"]


def completion_trajectory(
    prompt: Sequence[Mapping[str, Any]],
    completion: Sequence[Mapping[str, Any]],
    env: TaskEnvironment,
) -> Trajectory:
    """The completion as the rollout loop would have stored it: messages in the OpenAI
    format (call ids shared by assistant ``tool_calls`` and ``tool`` messages), the calls the
    environment recorded (turn numbers from the assistant message that made them), the final
    answer (last assistant text without tool calls) and the cluster's tool schemas."""
    records = env.calls
    messages = [_message(m) for m in prompt]
    calls = []
    next_call = 0
    pending: list[str] = []
    turn = -1
    for raw in completion:
        role = raw.get("role")
        if role == "assistant":
            turn += 1
            tool_calls = []
            for tc in raw.get("tool_calls") or []:
                fn = tc.get("function", tc)
                call_id = f"call_{next_call}"
                if next_call < len(records):
                    calls.append(records[next_call].model_copy(update={"turn": turn}))
                    call_id = records[next_call].call_id
                next_call += 1
                pending.append(call_id)
                tool_calls.append(
                    ToolCall(
                        id=call_id,
                        function=FunctionCall(
                            name=str(fn.get("name", "")),
                            arguments=_arguments_text(fn.get("arguments")),
                        ),
                    )
                )
            messages.append(
                Message(
                    role=MessageRole.ASSISTANT,
                    content=raw.get("content") or None,
                    tool_calls=tool_calls or None,
                )
            )
        elif role == "tool":
            messages.append(
                Message(
                    role=MessageRole.TOOL,
                    content=str(raw.get("content", "")),
                    name=raw.get("name"),
                    tool_call_id=pending.pop(0) if pending else None,
                )
            )
    # calls the environment ran whose messages TRL dropped (a result past the length budget)
    calls.extend(r.model_copy(update={"turn": max(turn, 0)}) for r in records[len(calls) :])
    final_answer = next(
        (
            m.content
            for m in reversed(messages)
            if m.role is MessageRole.ASSISTANT and m.content and not m.tool_calls
        ),
        None,
    )
    infra = env.infra_error
    return Trajectory(
        trajectory_id=content_id(
            "traj", {"row": env.row_id, "completion": [m.to_openai() for m in messages]}
        ),
        run_id="grpo",
        blueprint_id=env.row_id or "",
        tree_id="grpo",
        leaf_node_id="grpo",
        cluster_id=env.cluster.cluster_id,
        messages=messages,
        tools=env.openai_tools,
        calls=calls,
        final_answer=final_answer,
        termination=Termination.INFRA_ERROR if infra else Termination.ASSISTANT_DONE,
        failure_class=FailureClass.INFRA if infra else None,
        failure_detail=infra,
        n_turns=turn + 1,
    )


def score_completion(
    prompt: Sequence[Mapping[str, Any]],
    completion: Sequence[Mapping[str, Any]],
    env: TaskEnvironment,
    *,
    shaped: bool = True,
) -> tuple[float | None, Verdict | None]:
    """The reward of one completion and its verdict; ``(None, None)`` on an infra fault."""
    if env.infra_error:
        log.warning("reward of %s: infra fault, no reward: %s", env.row_id, env.infra_error)
        return None, None
    trajectory = completion_trajectory(prompt, completion, env)
    try:
        state = env._final_state()  # noqa: SLF001 - the training package's own class
    except InfraError as exc:
        log.warning("reward of %s: reading the final state failed, no reward: %s", env.row_id, exc)
        return None, None
    verdict = verify(trajectory, env.constraints, state)
    return verdict_reward(verdict, shaped=shaped), verdict


class VerifierReward:
    """TRL reward function: ``reward(prompts, completions, environments, **kw) -> [float|None]``.

    ``shaped`` (default) gives the verdict's score (``0.9·passed + 0.1·soft fraction``), the
    number curation stores; otherwise 1/0 by the verdict. ``close`` closes each environment
    after scoring it (its sandbox is not needed again until the next ``reset``).
    """

    __name__ = "verifier"

    def __init__(self, *, shaped: bool = True, close: bool = True) -> None:
        self.shaped = shaped
        self.close = close
        self.last_verdicts: list[Verdict | None] = []

    def __call__(
        self,
        prompts: Sequence[Sequence[Mapping[str, Any]]],
        completions: Sequence[Sequence[Mapping[str, Any]]],
        environments: Sequence[TaskEnvironment] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        **_: Any,
    ) -> list[float | None]:
        if environments is None:
            raise ValueError(
                "VerifierReward needs the per-completion environments (TRL's environment_factory)"
            )
        rewards: list[float | None] = []
        verdicts: list[Verdict | None] = []
        for prompt, completion, env in zip(prompts, completions, environments, strict=True):
            value, verdict = score_completion(prompt, completion, env, shaped=self.shaped)
            rewards.append(value)
            verdicts.append(verdict)
            if self.close:
                env._close()  # noqa: SLF001
        self.last_verdicts = verdicts
        if log_metric is not None:
            log_metric("reward/infra_none", float(sum(r is None for r in rewards)))
            scored = [v for v in verdicts if v is not None]
            if scored:
                log_metric("reward/pass_rate", sum(v.passed for v in scored) / len(scored))
        return rewards
