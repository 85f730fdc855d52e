from __future__ import annotations

import pytest
from fakes.trajectories import call, make_trajectory, make_verdict

from trajsynth.curation.metrics import TaskFacts
from trajsynth.curation.metrics.tokens_per_success import tokens_per_success
from trajsynth.schemas import AgentRole, TaskTopology, UsageTotals

GOOD = call("get_order", {"order_id": "W1"}, {"order_id": "W1", "status": "delivered"})


def _traj(tid: str, tokens: int):
    usage = [UsageTotals(role=AgentRole.ASSISTANT, prompt_tokens=tokens, completion_tokens=0)]
    return make_trajectory(tid, [[GOOD]]).model_copy(update={"usage": usage})


def test_tokens_of_counted_rollouts_over_the_successes() -> None:
    trajs = [_traj("a", 100), _traj("b", 300), _traj("c", 1000)]
    verdicts = {
        "a": make_verdict("a", True),
        "b": make_verdict("b", False),
        "c": make_verdict("c", False, excluded=True),  # an infra fault costs nothing here
    }
    facts = TaskFacts(topology=TaskTopology(task_id="t"), trajectories=trajs, verdicts=verdicts)
    assert tokens_per_success(facts) == pytest.approx((100 + 300) / 1)


def test_no_success_has_no_value() -> None:
    trajs = [_traj("a", 100)]
    facts = TaskFacts(
        topology=TaskTopology(task_id="t"),
        trajectories=trajs,
        verdicts={"a": make_verdict("a", False)},
    )
    assert tokens_per_success(facts) is None
