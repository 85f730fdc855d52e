"""Token-level uncertainty (docs/methods.md §1.3, §9.6): worked numbers and properties."""

from __future__ import annotations

import doctest
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trajsynth.agents import entropy
from trajsynth.agents.entropy import (
    K_TOK,
    candidate_disagreement,
    confidence,
    sampled_step_entropy,
    step_uncertainty,
    token_entropy,
    top_k_step_entropy,
)

LN = math.log


def test_doctests() -> None:
    failures, tried = doctest.testmod(entropy, optionflags=doctest.ELLIPSIS)
    assert tried > 10 and failures == 0


def test_token_entropy_worked_example() -> None:
    # p = 0.5, 0.25 shown; the remaining 0.25 is lumped into one outcome
    assert token_entropy([LN(0.5), LN(0.25)]) == pytest.approx(1.5 * LN(2), abs=1e-4)
    assert token_entropy([LN(0.5), LN(0.25)]) == pytest.approx(1.0397, abs=1e-4)


def test_token_entropy_of_a_full_distribution_is_shannon_entropy() -> None:
    probs = [0.4, 0.3, 0.2, 0.1]
    exact = -sum(p * LN(p) for p in probs)
    assert token_entropy([LN(p) for p in probs]) == pytest.approx(exact, abs=1e-9)


def test_top_logprobs_summing_past_one_leave_no_remainder() -> None:
    # rounding on a server can make the shown mass exceed 1: r is clipped at 0
    assert token_entropy([LN(0.7), LN(0.31)]) == pytest.approx(
        -(0.7 * LN(0.7) + 0.31 * LN(0.31)), abs=1e-9
    )


def test_logprobs_near_the_float_limit_do_not_overflow_the_means() -> None:
    huge = [-8.988465674311579e307, -8.98846567431158e307]
    assert sampled_step_entropy(huge) == pytest.approx(8.98846567431158e307)
    assert confidence(huge) == 0.0


@given(
    st.lists(st.floats(min_value=0.01, max_value=1.0), min_size=2, max_size=12),
    st.integers(min_value=1, max_value=12),
)
def test_top_k_entropy_is_a_lower_bound(weights: list[float], k: int) -> None:
    total = sum(weights)
    probs = sorted((w / total for w in weights), reverse=True)
    exact = -sum(p * LN(p) for p in probs)
    bound = token_entropy([LN(p) for p in probs[:k]])
    assert 0.0 <= bound <= exact + 1e-9


def test_step_entropy_uses_only_the_first_k_tok_tokens() -> None:
    flat = [LN(0.5), LN(0.5)]  # ln 2 each
    certain = [0.0]
    tops = [flat] * K_TOK + [certain] * 30
    assert top_k_step_entropy(tops) == pytest.approx(LN(2))
    assert top_k_step_entropy(tops, k_tok=40) == pytest.approx(LN(2) / 2)
    assert sampled_step_entropy([LN(0.5)] * K_TOK + [0.0] * 5) == pytest.approx(LN(2))


def test_confidence_is_the_geometric_mean_probability() -> None:
    assert confidence([LN(0.9), LN(0.4)]) == pytest.approx(math.sqrt(0.36))
    assert confidence([0.0, 0.0]) == pytest.approx(1.0)


def test_step_uncertainty_prefers_top_k_then_the_sampled_proxy() -> None:
    sampled = [LN(0.5), LN(0.25)]
    tops = [[LN(0.5), LN(0.25)], [0.0]]
    assert step_uncertainty(sampled, tops) == pytest.approx((0.5199, 0.3536), abs=1e-4)
    assert step_uncertainty(sampled, None) == pytest.approx((1.0397, 0.3536), abs=1e-4)
    # empty top lists (a server that sends none) fall back to the proxy too
    assert step_uncertainty(sampled, [[], []]) == pytest.approx((1.0397, 0.3536), abs=1e-4)
    assert step_uncertainty(None, None) == (None, None)
    assert step_uncertainty([], []) == (None, None)


def test_candidate_disagreement() -> None:
    assert candidate_disagreement(["a", "a", "b"]) == pytest.approx(0.5794, abs=1e-4)
    assert candidate_disagreement([("t", "h1"), ("t", "h1"), ("t", "h1")]) == 0.0
    assert candidate_disagreement(["a", "b", "c"]) == pytest.approx(1.0)
    assert candidate_disagreement(["a"]) is None
