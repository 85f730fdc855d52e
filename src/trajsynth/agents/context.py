"""Fit an episode's tools into the model's context (a large server's list would not fit).

A server with dozens of tools can list more schema than a small model's context holds (32
tools of an outside server asked SmolLM2's 4,096-token context for 4,481 tokens before the
user had said a word). When the whole set does not fit, an episode shows the model the tools
its blueprint needs plus the few tools nearest to them by embedding: the near ones are the
distractors that make choosing a tool a real choice, the far ones add only tokens.

The shown tools keep the cluster's order, so where a tool sits in the list never says that
the blueprint needs it. The selection is a plain function of its inputs (deterministic).
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from collections.abc import Callable, Sequence

import numpy as np

from trajsynth.curation.embeddings import load_embedder, onnx_available
from trajsynth.schemas import Blueprint, ToolSpec

__all__ = [
    "DEFAULT_DISTRACTORS",
    "TOOLS_SHARE",
    "fit_tools",
    "shown_tools",
    "tool_budget",
    "tool_tokens",
]

log = logging.getLogger(__name__)

Embedder = Callable[[Sequence[str]], np.ndarray]

# The share of the context the tool list may take: the rest holds the system prompt, the
# conversation (tool results are often the longest messages) and the reply.
TOOLS_SHARE = 0.5
DEFAULT_DISTRACTORS = 4
# Schemas are JSON: punctuation and short keys make it 3.2-3.7 characters a token for
# SmolLM2's tokenizer (the shop's 13 tools as the chat handler lists them: 1,834 tokens,
# estimated 1,856; the 36 tools of tests/agents/test_context.py: 2,669, estimated 3,156), not
# the 4 of prose; erring high only shows fewer distractors, erring low overflows the context.
_CHARS_PER_TOKEN = 3.0
_UNBOUNDED = 1 << 30


def tool_tokens(tool: ToolSpec) -> int:
    """Tokens the tool takes in the prompt, as the chat template lists it (name, description,
    parameters as JSON); an estimate that errs high.

    >>> tool_tokens(ToolSpec(name="now", description="The time."))
    15
    """
    text = f"\nfunctions.{tool.name}: {tool.description}\n{json.dumps(tool.input_schema)}"
    return math.ceil(len(text) / _CHARS_PER_TOKEN)


def tool_budget(context_tokens: int, share: float = TOOLS_SHARE) -> int:
    """The tokens a tool list may take in a context of ``context_tokens``.

    >>> tool_budget(4096)
    2048
    """
    return int(context_tokens * share)


def _words(text: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9]+", text.lower()) if len(w) > 2}


def _lexical(texts: Sequence[str]) -> np.ndarray:
    """Jaccard similarity of word sets: what ranks distractors when no embedder is given."""
    words = [_words(t) for t in texts]
    n = len(words)
    out = np.zeros((n, n), dtype=np.float32)
    for i in range(n):
        for j in range(n):
            union = words[i] | words[j]
            out[i, j] = len(words[i] & words[j]) / len(union) if union else 0.0
    return out


def _similarity(tools: Sequence[ToolSpec], embed: Embedder | None) -> np.ndarray:
    texts = [f"{t.name.replace('_', ' ')}: {t.description}" for t in tools]
    if embed is None:
        return _lexical(texts)
    vectors = np.asarray(embed(texts), dtype=np.float32)  # L2-normalised rows
    return vectors @ vectors.T


def fit_tools(
    blueprint: Blueprint,
    tools: Sequence[ToolSpec],
    *,
    context_tokens: int | None,
    embed: Embedder | None = None,
    distractors: int = DEFAULT_DISTRACTORS,
    share: float = TOOLS_SHARE,
    always: bool = False,
) -> list[ToolSpec]:
    """The tools an episode of ``blueprint`` shows the model.

    Every tool when they fit in ``share`` of ``context_tokens`` (or the context is unknown:
    ``None``); else the tools on the blueprint's path plus up to ``distractors`` others,
    nearest first (the largest cosine similarity to any needed tool; ``embed`` None ranks by
    shared words), each only if it still fits. The needed tools are always shown, even when
    they alone exceed the budget (a warning): without them the task cannot be done at all.
    ``always``: the needed tools plus ``distractors`` even when every tool would fit (an
    unknown context then bounds nothing).
    """
    tools = list(tools)
    if context_tokens is None and not always:
        return tools
    budget = tool_budget(context_tokens, share) if context_tokens is not None else _UNBOUNDED
    cost = [tool_tokens(t) for t in tools]
    if sum(cost) <= budget and not always:
        return tools
    needed_names = {step.tool for step in blueprint.tool_path}
    needed = [i for i, t in enumerate(tools) if t.name in needed_names]
    used = sum(cost[i] for i in needed)
    if used > budget:
        log.warning(
            "%s: the %d tools its path needs take ~%d tokens, over the %d of a %d-token "
            "context; shown without distractors",
            blueprint.blueprint_id, len(needed), used, budget, context_tokens,
        )  # fmt: skip
    shown = set(needed)
    if needed and distractors > 0:
        sim = _similarity(tools, embed)
        others = [i for i in range(len(tools)) if i not in shown]
        nearest = sorted(others, key=lambda i: (-float(sim[i, needed].max()), tools[i].name))
        added = 0
        for i in nearest:
            if added == distractors:
                break
            if used + cost[i] <= budget:
                shown.add(i)
                used += cost[i]
                added += 1
    return [t for i, t in enumerate(tools) if i in shown]


def shown_tools(
    blueprint: Blueprint,
    tools: Sequence[ToolSpec],
    *,
    context_tokens: int | None,
    distractors: int | None = None,
) -> list[ToolSpec] | None:
    """``fit_tools`` with the project's sentence embedder (all-MiniLM-L6-v2), loaded only
    when the tools do not fit; None when every tool is shown.

    ``distractors`` (``LLMConfig.distractors``) fixes the view whether or not the whole set
    fits: the needed tools plus that many nearest. Training rows and evals made with the same
    value show the model the same kind of list; a row then holds ~900 tokens instead of the
    ~2,400 of the shop's 13 schemas, which is most of an SFT step's cost on CPU."""
    if distractors is not None:
        if distractors >= len(tools) - len({s.tool for s in blueprint.tool_path}):
            return None  # the view would be every tool anyway
        return fit_tools(
            blueprint,
            tools,
            context_tokens=context_tokens,
            embed=_embedder(),
            distractors=distractors,
            always=True,
        )
    if context_tokens is None or sum(map(tool_tokens, tools)) <= tool_budget(context_tokens):
        return None
    return fit_tools(blueprint, tools, context_tokens=context_tokens, embed=_embedder())


_embedder_lock = threading.Lock()  # rollouts on several threads ask at once: one load


def _embedder() -> Embedder | None:
    try:
        # a few dozen tool texts: the backend that loads in 0.2 s (torch: 5 s), same vectors
        backend = "onnx" if onnx_available() else "torch"
        with _embedder_lock:
            return load_embedder(max_seq_length=64, backend=backend)
    except (ImportError, OSError) as exc:  # the model wheel missing: rank by shared words
        log.warning("no sentence embedder (%s); distractors ranked by shared words", exc)
        return None
