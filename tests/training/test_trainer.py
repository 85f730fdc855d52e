"""The GRPOTrainer subclass: per-token advantages on assistant tokens, pinned TRL."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from trajsynth.schemas import AdvantageKind, TrainConfig
from trajsynth.training.trainer import (
    PINNED_TRL,
    CompletionSteps,
    RewardRecorder,
    batch_step_values,
    completion_steps,
    group_step_values,
    token_advantages,
    trainer_class,
    turn_spans,
)

pytestmark = pytest.mark.alone  # torch or transformers: every core


def _call_then_answer(answer: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "a", "arguments": {}}}],
        },
        {"role": "tool", "name": "a", "content": "x"},
        {"role": "assistant", "content": answer},
    ]


# completion tokens: turn 1 (2 tokens), tool result (2, mask 0), turn 2 (2), padding (1)
MASK = np.array([[1, 1, 0, 0, 1, 1, 0]] * 4)


def test_turn_spans_are_the_runs_of_the_mask():
    assert turn_spans(MASK[0]) == [(0, 2), (4, 6)]
    assert turn_spans(np.array([0, 1, 1])) == [(1, 3)]


def test_tree_gl_per_token_on_a_hand_built_batch():
    records = [
        completion_steps(_call_then_answer("yes"), None, 1.0),
        completion_steps(_call_then_answer("no"), None, 0.0),
        completion_steps(_call_then_answer("yes"), None, None),  # infra: no reward
        completion_steps(_call_then_answer("yes"), None, 1.0),
    ]
    assert records[0].turn_keys[0] == records[1].turn_keys[0]  # shared first turn
    assert records[0].turn_keys[1] != records[1].turn_keys[1]
    values = batch_step_values(AdvantageKind.TREE_GL, records, 2, TrainConfig())
    got = token_advantages(values, MASK)
    # V(root) = 0.5 = V(shared turn) -> 0; leaves: (0.5 + 0.5) / 1 = +-1 on the answer tokens
    np.testing.assert_allclose(got[0], [0, 0, 0, 0, 1, 1, 0], atol=1e-6)
    np.testing.assert_allclose(got[1], [0, 0, 0, 0, -1, -1, 0], atol=1e-6)
    # a group with one scorable completion has no signal
    np.testing.assert_allclose(got[2:], 0.0)


def test_gigpo_per_token_uses_step_groups():
    group = [
        CompletionSteps(1.0, ("k1", "k2"), (True, True), ("s0", "s1")),
        CompletionSteps(0.0, ("k1", "k3"), (True, True), ("s0", "s1")),
    ]
    cfg = TrainConfig(advantage=AdvantageKind.GIGPO)
    values = group_step_values(AdvantageKind.GIGPO, group, cfg)
    # A_E = +-0.5; step 0: G = 0.95 vs 0 -> +-0.475; step 1: G = 1 vs 0 -> +-0.5
    np.testing.assert_allclose(values[0], [0.975, 1.0])
    np.testing.assert_allclose(values[1], [-0.975, -1.0])
    got = token_advantages(values, MASK[:2])
    np.testing.assert_allclose(got[0], [0.975, 0.975, 0, 0, 1.0, 1.0, 0])


def test_tree_subgroup_whitens_over_assistant_tokens():
    group = [
        CompletionSteps(1.0, ("k1",), (True,), ("s",)),
        CompletionSteps(0.0, ("k2",), (True,), ("s",)),
    ]
    values = group_step_values(AdvantageKind.TREE_SUBGROUP, group, TrainConfig())
    got = token_advantages(values, MASK[:2], whiten=True)
    on = MASK[:2].astype(bool)
    assert abs(got[on].mean()) < 1e-6 and abs(got[on].std() - 1.0) < 1e-4
    assert (got[~on] == 0).all() and got[0, 0] > 0 > got[1, 0]


def test_fork_uses_each_turns_tool_success():
    group = [
        CompletionSteps(1.0, ("k1", "k2"), (True, True), ("a", "b")),
        CompletionSteps(1.0, ("k1", "k3"), (True, False), ("a", "c")),
    ]
    values = group_step_values(AdvantageKind.FORK, group, TrainConfig())
    np.testing.assert_allclose([values[0][1], values[1][1]], [0.05, -0.05], atol=1e-6)
    with pytest.raises(ValueError, match="grpo"):
        group_step_values(AdvantageKind.GRPO, group, TrainConfig())


@pytest.mark.slow
def test_trainer_is_built_on_the_pinned_trl():
    import trl

    assert trl.__version__ == PINNED_TRL
    cls = trainer_class()
    assert issubclass(cls, trl.GRPOTrainer) and cls.__name__ == "TrajsynthGRPOTrainer"


@pytest.mark.slow
def test_the_override_replaces_trl_advantages_with_per_token_ones(monkeypatch):
    import torch
    import trl

    cls = trainer_class()
    completions = [_call_then_answer("yes"), _call_then_answer("no")] * 2
    trl_output = {
        "prompt_ids": torch.zeros((4, 3), dtype=torch.long),
        "prompt_mask": torch.ones((4, 3), dtype=torch.long),
        "completion_ids": torch.zeros((4, 7), dtype=torch.long),
        "completion_mask": torch.tensor([[1, 1, 1, 1, 1, 1, 0]] * 4),
        "tool_mask": torch.tensor([[1, 1, 0, 0, 1, 1, 1]] * 4),
        "advantages": torch.tensor([1.0, -1.0, 1.0, -1.0]),
    }

    def verifier(completions: list[Any], **_: Any) -> list[float | None]:
        return [1.0, 0.0, None, 1.0]  # None: an infra fault, left out of its group

    def fake_super(self: Any, inputs: Any) -> dict[str, Any]:
        # what TRL's _calculate_rewards does: call each reward function with the batch
        for func in self.reward_funcs:
            func(prompts=[[]] * 4, completions=completions, environments=[None] * 4)
        return dict(trl_output)

    monkeypatch.setattr(trl.GRPOTrainer, "_generate_and_score_completions", fake_super)
    trainer = cls.__new__(cls)
    trainer.recorder = RewardRecorder()
    trainer.reward_funcs = [trainer.recorder.wrap(0, verifier, is_async=False)]
    trainer.train_config = TrainConfig(advantage=AdvantageKind.TREE_GL)
    trainer.num_generations = 2
    trainer.reward_weights = torch.ones(1)
    trainer.accelerator = SimpleNamespace(process_index=0)
    trainer.model = SimpleNamespace(training=True)
    trainer._metrics = {"train": defaultdict(list)}
    out = trainer._generate_and_score_completions([{}] * 4)
    assert out["advantages"].shape == (4, 7)
    expected = torch.tensor(
        [[0, 0, 0, 0, 1, 1, 0], [0, 0, 0, 0, -1, -1, 0], [0] * 7, [0] * 7], dtype=torch.float32
    )
    torch.testing.assert_close(out["advantages"], expected)
    assert len(trainer.step_records) == 4 and trainer.step_records[2].reward is None
    assert trainer._metrics["train"]["advantages/tree_gl_abs_mean"] == [pytest.approx(0.25)]
    trainer.train_config = TrainConfig()  # grpo: TRL's own advantages stay
    assert out is not trainer._generate_and_score_completions([{}] * 4)
    torch.testing.assert_close(
        trainer._generate_and_score_completions([{}] * 4)["advantages"], trl_output["advantages"]
    )


@pytest.mark.slow
def test_early_stop_cuts_a_rollout_after_the_turn_its_regret_crosses_the_reference():
    """ESPO on a hand-built batch: rollout 0's regret is over the reference from turn 1, so
    its mask ends after turn 1 and its record keeps one turn at ``r_fail``; rollout 1's regret
    is 0 (kept); rollout 2 crosses at its only turn, which is its last (nothing to cut)."""
    import torch

    from trajsynth.schemas import EarlyStopConfig
    from trajsynth.training.early_stop import EarlyStopRule, ReferenceCurves

    cls = trainer_class()
    # prompt 3 tokens, completion 8: three turns of 2 tokens with a tool result between them
    mask = np.array([[1, 1, 0, 1, 1, 0, 1, 1], [1, 1, 0, 1, 1, 0, 1, 1], [1, 1, 0, 0, 0, 0, 0, 0]])
    # every completion token is 0; rollouts 0 and 2 put 5 more logit on token 1 (regret 5 a
    # token), rollout 1 on token 0 (regret 0)
    logits = torch.tensor([[0.0, 5.0], [5.0, 0.0], [0.0, 5.0]])[:, None, :].repeat(1, 11, 1)

    class Model:
        training = True

        def __call__(self, input_ids: Any, attention_mask: Any) -> Any:
            assert input_ids.shape == (3, 11) and attention_mask.shape == (3, 11)
            return SimpleNamespace(logits=logits)

    trainer = cls.__new__(cls)
    trainer.model = Model()
    trainer.train_config = TrainConfig(early_stop=EarlyStopConfig(enabled=True, r_fail=-0.5))
    trainer._stop_rule = EarlyStopRule(margin=0.2, patience=1, j_min=1)
    trainer._references = ReferenceCurves(min_successes=1)
    trainer._references.add_round("c", [[1.0, 2.0, 3.0]])  # q(j); stop above 1.2, 2.4, 3.6
    trainer.tokens_saved_total = 0
    trainer._metrics = {"train": defaultdict(list)}
    output = {
        "prompt_ids": torch.zeros((3, 3), dtype=torch.long),
        "prompt_mask": torch.ones((3, 3), dtype=torch.long),
        "completion_ids": torch.zeros((3, 8), dtype=torch.long),
        "completion_mask": torch.as_tensor(mask),
    }
    keys = ("t1", "t2", "t3")
    records = [
        CompletionSteps(0.0, keys, (True,) * 3, keys, "c"),
        CompletionSteps(0.0, keys, (True,) * 3, keys, "c"),
        CompletionSteps(0.0, keys[:1], (True,), keys[:1], "c"),
    ]
    new_records, new_mask, rewards = trainer._early_stop(output, records, mask)
    np.testing.assert_array_equal(new_mask[0], [1, 1, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(new_mask[1:], mask[1:])
    assert new_records[0] == CompletionSteps(-0.5, ("t1",), (True,), ("t1",), "c")
    assert new_records[1:] == records[1:]
    np.testing.assert_allclose(rewards, [-0.5, 0.0, 0.0])
    assert trainer.tokens_saved_total == 4 and mask[0].sum() == 6  # the caller's mask is kept
    assert trainer._metrics["train"]["early_stop/stopped"] == [1.0]


def test_reward_recorder_keeps_the_batch_and_sums_like_trl():
    import asyncio

    recorder = RewardRecorder()
    completions = [[{"role": "assistant", "content": str(i)}] for i in range(3)]

    async def judge(completions: list[Any], **_: Any) -> list[float | None]:
        return [0.5, None, None]

    shaped = recorder.wrap(0, lambda completions, **_: [1.0, 0.0, None], is_async=False)
    judged = recorder.wrap(1, judge, is_async=True)
    assert shaped(completions=completions, environments=["e0", "e1", "e2"]) == [1.0, 0.0, None]
    assert asyncio.run(judged(completions=completions)) == [0.5, None, None]
    assert recorder.completions == completions and recorder.environments == [None] * 3
    # weighted sum over the functions that scored; NaN only where none did
    np.testing.assert_allclose(recorder.scalar_rewards([1.0, 2.0])[:2], [2.0, 0.0])
    assert np.isnan(recorder.scalar_rewards([1.0, 2.0])[2])
    recorder.clear()
    assert recorder.scalar_rewards([1.0]).shape == (0,)
