"""Token-level uncertainty of one generated turn (docs/methods.md §1.3, confidence from §9.6).

Three estimates, best first, depending on what the backend returned:

* ``top_k_step_entropy``: the lumped top-k entropy ``H_tok`` per token, averaged over the
  first ``k_tok = 20`` generated tokens (llama.cpp and vLLM return top-k logprobs);
* ``sampled_step_entropy``: the proxy ``-ln p(sampled token)`` averaged the same way, when
  only the sampled token's logprob exists (TreeRL's fork-point ranking);
* ``candidate_disagreement``: with no logprobs at all, the normalised entropy of the
  canonical actions of ``m`` sampled candidates.

Every function is pure; logs are natural (nats).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence

__all__ = [
    "K_TOK",
    "candidate_disagreement",
    "confidence",
    "sampled_step_entropy",
    "step_uncertainty",
    "token_entropy",
    "top_k_step_entropy",
]

K_TOK = 20
"""Generated tokens a step entropy averages over (docs/methods.md §1.3)."""


def _mean(values: Sequence[float]) -> float:
    """The mean, each term divided first, so values near the float limit cannot overflow."""
    return math.fsum(v / len(values) for v in values)


def _plogp(p: float) -> float:
    return p * math.log(p) if p > 0.0 else 0.0


def token_entropy(top_logprobs: Sequence[float]) -> float:
    """``H_tok`` of one token from its top-k logprobs, the rest lumped (docs/methods.md §1.3).

    ``H_tok = -sum_{i<=k} p_i ln p_i - r ln r`` with ``r = max(0, 1 - sum p_i)``; nothing is
    renormalised, so the value is a lower bound of the full-vocabulary entropy.

    Two tokens at 0.5 and 0.25 leave r = 0.25, so H = 1.5 ln 2:

    >>> round(token_entropy([math.log(0.5), math.log(0.25)]), 4)
    1.0397
    >>> token_entropy([0.0])  # a certain token
    0.0
    >>> round(token_entropy([math.log(0.9)]), 4)  # 0.9 and a lumped 0.1
    0.3251
    """
    probs = [math.exp(lp) for lp in top_logprobs if lp is not None and not math.isnan(lp)]
    rest = max(0.0, 1.0 - sum(probs))
    return max(0.0, -sum(_plogp(p) for p in probs) - _plogp(rest))


def top_k_step_entropy(top_logprobs: Sequence[Sequence[float]], k_tok: int = K_TOK) -> float | None:
    """Step entropy: mean ``H_tok`` over the first ``k_tok`` generated tokens (§1.3).

    ``None`` when no token carries top-k logprobs.

    >>> half, quarter = math.log(0.5), math.log(0.25)
    >>> round(top_k_step_entropy([[half, quarter], [0.0]]), 4)  # (1.0397 + 0) / 2
    0.5199
    >>> top_k_step_entropy([]) is None
    True
    """
    tokens = [t for t in top_logprobs[:k_tok] if t]
    if not tokens:
        return None
    return _mean([token_entropy(t) for t in tokens])


def sampled_step_entropy(token_logprobs: Sequence[float], k_tok: int = K_TOK) -> float | None:
    """The cheaper proxy: mean ``-ln p(sampled token)`` over the first ``k_tok`` tokens (§1.3).

    >>> round(sampled_step_entropy([math.log(0.5), math.log(0.25)]), 4)  # (ln 2 + ln 4) / 2
    1.0397
    >>> sampled_step_entropy([]) is None
    True
    """
    values = [-lp for lp in token_logprobs[:k_tok] if lp is not None]
    if not values:
        return None
    return _mean(values)


def confidence(token_logprobs: Sequence[float]) -> float | None:
    """Segment confidence ``exp(mean log p)`` over all its tokens (docs/methods.md §9.6).

    The geometric mean of the sampled tokens' probabilities; ``None`` without logprobs.

    >>> round(confidence([math.log(0.5), math.log(0.25)]), 4)  # sqrt(0.5 * 0.25)
    0.3536
    >>> confidence([]) is None
    True
    """
    values = [lp for lp in token_logprobs if lp is not None]
    if not values:
        return None
    return math.exp(_mean(values))


def candidate_disagreement(actions: Sequence[Hashable]) -> float | None:
    """``H_act = H(canon_call distribution) / ln m`` over ``m`` sampled candidates (§1.3).

    ``actions`` are the candidates' canonical actions (``canon_call`` keys); 0 when all
    agree, 1 when all differ. ``None`` for fewer than two candidates.

    >>> round(candidate_disagreement(["a", "a", "b"]), 4)  # H(2/3, 1/3) / ln 3
    0.5794
    >>> candidate_disagreement(["a", "a", "a"]), round(candidate_disagreement(["a", "b", "c"]), 4)
    (0.0, 1.0)
    """
    m = len(actions)
    if m < 2:
        return None
    counts = Counter(actions).values()
    h = -sum(_plogp(c / m) for c in counts)
    return max(0.0, min(1.0, h / math.log(m)))


def step_uncertainty(
    token_logprobs: Sequence[float] | None,
    top_logprobs: Sequence[Sequence[float]] | None,
    k_tok: int = K_TOK,
) -> tuple[float | None, float | None]:
    """``(step entropy, confidence)`` from whatever logprobs a turn came back with.

    Uses the top-k estimate when top-k logprobs exist, else the sampled-token proxy; both
    are ``None`` when the backend returned no logprobs (then fall back to
    ``candidate_disagreement``).

    >>> lp = [math.log(0.5), math.log(0.25)]
    >>> [round(x, 4) for x in step_uncertainty(lp, [lp, [0.0]])]
    [0.5199, 0.3536]
    >>> [round(x, 4) for x in step_uncertainty(lp, None)]
    [1.0397, 0.3536]
    >>> step_uncertainty(None, None)
    (None, None)
    """
    entropy = top_k_step_entropy(top_logprobs, k_tok) if top_logprobs else None
    if entropy is None and token_logprobs:
        entropy = sampled_step_entropy(token_logprobs, k_tok)
    conf = confidence(token_logprobs) if token_logprobs else None
    return entropy, conf
