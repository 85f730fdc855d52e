"""Rollout trees grown with a scripted fake LLM whose uncertainty is scripted too.

The fake answers every request from a policy of the request (assistant turns by how many the
path already has, the simulated user with the stop marker); ``probs`` sets each turn's token
distribution, so its step entropy, and the request's seed makes sibling replies distinct.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakes.llm import ScriptedLLM, say, tool_call
from fakes.shop import InProcessShop, plan_shop_task

from trajsynth.agents.assistant import Assistant
from trajsynth.agents.judge import judge, leaf_outcome
from trajsynth.agents.rollout import Episode
from trajsynth.agents.tree import TreeLeaf, grow_tree, node_values
from trajsynth.agents.user_sim import UserSimulator
from trajsynth.llm.client import OpenAILLMClient
from trajsynth.schemas import (
    Blueprint,
    Budgets,
    LLMConfig,
    Node,
    Termination,
    TreeConfig,
)

LOW = (0.97, 0.01, 0.01, 0.005, 0.005)  # a confident turn: low step entropy
HIGH = (0.3, 0.25, 0.2, 0.15, 0.1)  # an uncertain one
STOP = say("Thanks, that is all. ###STOP###")
DETERMINISTIC = TreeConfig(deterministic=True)


@pytest.fixture
async def task(tmp_path: Path) -> Blueprint:
    return await plan_shop_task(tmp_path)


def _assistant_turns(body: dict[str, Any]) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "assistant")


def _fake(policy) -> ScriptedLLM:
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        return (
            policy(body, _assistant_turns(body), body.get("seed", 0)) if body.get("tools") else STOP
        )

    return ScriptedLLM([answer] * 500)


async def _grow(
    bp: Blueprint,
    fake: ScriptedLLM,
    tmp_path: Path,
    *,
    leaves: int = 4,
    config: TreeConfig = DETERMINISTIC,
    budgets: Budgets | None = None,
    on_leaf=None,
):
    llm = OpenAILLMClient(
        LLMConfig(base_url="http://fake/v1", max_retries=0, logprobs=True),
        http_client=httpx.AsyncClient(transport=fake.transport),
    )
    async with InProcessShop("shop", tmp_path, seed=bp.seed) as env:
        episode = Episode(bp, env, llm, Assistant(), UserSimulator(), budgets or Budgets())
        return await grow_tree(
            episode, config, leaves=leaves, run_id="run_t", reply_token_cap=64, on_leaf=on_leaf
        )


def _shape(nodes: list[Node]) -> dict[int, list[int]]:
    """Depth -> sorted child counts: the tree's shape."""
    out: dict[int, list[int]] = {}
    for n in nodes:
        out.setdefault(n.depth, []).append(n.n_children)
    return {d: sorted(v) for d, v in sorted(out.items())}


async def test_uncertainty_after_a_tool_result_branches(task: Blueprint, tmp_path: Path) -> None:
    def policy(body, turns, seed):
        if turns == 0:
            return tool_call("search_products", {"query": f"mug {seed % 997}"}, probs=LOW)
        return say(f"I found these, option {seed % 997}.", probs=HIGH)

    result, budget = await _grow(task, _fake(policy), tmp_path)
    # 2 root samples (M/2); each search result is followed by an uncertain turn: 2 children
    assert _shape(result.nodes) == {0: [2], 1: [2, 2], 2: [0, 0, 0, 0]}
    assert len(result.leaves) == 4 == budget["leaves"]
    decisions = [n.branch for n in result.nodes if n.depth == 1]
    assert all(d["after"] == "tool" and d["source"] == "logprobs" for d in decisions)
    assert all(d["dh"] == 1.0 and math.isclose(d["p"], 0.7) for d in decisions)
    assert {t.termination for t in result.trajectories} == {Termination.USER_STOP}
    # every leaf is one root-to-leaf path; children continue from their parent's messages
    by_id = {n.node_id: n for n in result.nodes}
    for traj in result.trajectories:
        chain = [by_id[i] for i in traj.node_ids]
        assert chain[0].parent_id is None and chain[-1].n_children == 0
        assert all(b.parent_id == a.node_id for a, b in zip(chain, chain[1:], strict=False))
        assert traj.messages == [m for n in chain for m in n.messages]


async def test_confident_turns_stay_linear_and_the_root_tops_up(
    task: Blueprint, tmp_path: Path
) -> None:
    def policy(body, turns, seed):
        if turns == 0:
            return tool_call("search_products", {"query": f"mug {seed % 997}"}, probs=LOW)
        return say(f"Here is what I found, {seed % 997}.", probs=LOW)

    result, _ = await _grow(task, _fake(policy), tmp_path)
    # dH = 0 gives P = 0.5, not above tau: no branch; ARPO's fallback adds root samples
    assert _shape(result.nodes) == {0: [4], 1: [1, 1, 1, 1], 2: [0, 0, 0, 0]}
    root = next(n for n in result.nodes if n.depth == 0)
    assert root.branch["fallback"] == 2
    assert not any(n.branch and n.branch["branched"] for n in result.nodes if n.depth == 1)


async def test_siblings_with_the_same_calls_in_other_words_are_resampled(
    task: Blueprint, tmp_path: Path
) -> None:
    first_replies = iter(["mug", "mug", "lamp", "desk", "pen", "cable"])

    def policy(body, turns, seed):
        if turns == 0:
            # the second root reply repeats the first's search in other words
            query = next(first_replies)
            return tool_call("search_products", {"query": query}, probs=LOW, content=f"#{seed}")
        return say(f"I found these, option {seed % 997}.", probs=HIGH)

    result, budget = await _grow(task, _fake(policy), tmp_path)
    first_calls = [
        (n.calls[0].tool, n.calls[0].raw_arguments) for n in result.nodes if n.depth == 1
    ]
    assert len(first_calls) == len(set(first_calls)) == 2
    assert {json.loads(args)["query"] for _, args in first_calls} == {"mug", "lamp"}
    assert budget["duplicate_replies"] == 1


async def test_a_tool_error_branches_even_when_confident(task: Blueprint, tmp_path: Path) -> None:
    def policy(body, turns, seed):
        if turns == 0:
            return tool_call("get_product", {"product_id": f"no-{seed % 997}"}, probs=LOW)
        return say(f"Sorry, that product does not exist ({seed % 997}).", probs=LOW)

    result, _ = await _grow(task, _fake(policy), tmp_path, leaves=3)
    depth1 = [n for n in result.nodes if n.depth == 1]
    assert depth1 and all(n.branch["after"] == "tool_error" for n in depth1)
    assert all(n.branch["dh"] == 1.0 for n in depth1)
    # M=3: 2 root samples; the first error branches into 2, the second has no leaf left
    assert sorted(n.n_children for n in depth1) == [1, 2]
    assert sorted(n.branch["limited_by"] or "" for n in depth1) == ["", "leaves"]
    assert len(result.leaves) == 3


async def test_repeated_failing_call_is_pruned_with_its_signal(
    task: Blueprint, tmp_path: Path
) -> None:
    def policy(body, turns, seed):
        return tool_call(
            "get_product", {"product_id": "no-such-id"}, content=f"try {seed % 997}", probs=LOW
        )

    result, _ = await _grow(task, _fake(policy), tmp_path, leaves=2)
    pruned = [n for n in result.nodes if n.prune_reason]
    assert pruned and all(n.prune_reason.startswith("repeated_failing_call") for n in pruned)
    assert all(n.n_children == 0 for n in pruned)
    for traj in result.trajectories:
        assert traj.termination is Termination.PRUNED
        assert traj.failure_detail.startswith("repeated_failing_call")
        assert traj.leaf_node_id in {n.node_id for n in pruned}


async def test_each_leaf_is_seen_as_it_ends_with_its_outcome(
    task: Blueprint, tmp_path: Path
) -> None:
    """Per-leaf progress: ``on_leaf`` sees every leaf while the tree still grows,
    and a leaf cut as a dead end reads as ``pruned``."""
    seen: list[tuple[str, int]] = []
    fake = _fake(
        lambda body, turns, seed: tool_call(
            "get_product", {"product_id": "no-such-id"}, content=f"try {seed % 997}", probs=LOW
        )
    )

    def on_leaf(grown: TreeLeaf) -> None:
        trajectory, verdict = judge(task, grown.trajectory, grown.final_state, attempt=1)
        seen.append((leaf_outcome(trajectory, verdict), len(fake.requests)))

    result, _ = await _grow(task, fake, tmp_path, leaves=3, on_leaf=on_leaf)
    assert [o for o, _ in seen] == ["pruned"] * len(result.leaves)
    assert len(seen) == 3
    assert seen[0][1] < len(fake.requests)  # the first leaf was reported before the tree was done


@pytest.mark.parametrize(
    ("leaves", "config", "budgets"),
    [
        (8, TreeConfig(max_nodes=6, deterministic=True), Budgets()),
        (8, TreeConfig(max_tree_tokens=400, deterministic=True), Budgets()),
        (6, TreeConfig(max_children=2, alpha=1.0), Budgets(max_turns=4)),
        (3, TreeConfig(root_fraction=1.0, alpha=1.0, beta=0.0), Budgets(max_turns=3)),
    ],
)
async def test_budgets_are_never_exceeded(
    task: Blueprint, tmp_path: Path, leaves: int, config: TreeConfig, budgets: Budgets
) -> None:
    def policy(body, turns, seed):
        if turns % 2 == 0:
            return tool_call("search_products", {"query": f"q{seed % 991}"}, probs=HIGH)
        return say(f"Result {seed % 991}, anything else?", probs=HIGH)

    result, budget = await _grow(
        task, _fake(policy), tmp_path, leaves=leaves, config=config, budgets=budgets
    )
    assert len(result.leaves) <= leaves
    assert len(result.nodes) <= config.max_nodes
    assert budget["generated_tokens"] <= config.max_tree_tokens
    assert max(n.n_children for n in result.nodes if n.depth > 0) <= config.max_children
    assert max(n.depth for n in result.nodes) <= budgets.max_turns
    assert result.tree.n_leaves == len(result.leaves) >= 1


def test_node_values_match_the_treerl_example() -> None:
    """docs/methods.md §9.3/§9.4: leaves 1-0/2-0 (R=1), 1-0/2-1, 1-1/2-0, 1-1/2-1 (R=0)."""
    edges = [
        ("r", None),
        ("a", "r"),
        ("b", "r"),
        ("a0", "a"),
        ("a1", "a"),
        ("b0", "b"),
        ("b1", "b"),
    ]
    nodes = [Node(node_id=i, tree_id="t", parent_id=p) for i, p in edges]
    chains = [["r", "a", "a0"], ["r", "a", "a1"], ["r", "b", "b0"], ["r", "b", "b1"]]
    values = node_values(nodes, chains, [1.0, 0.0, 0.0, 0.0])
    assert values["r"]["value"] == 0.25 and values["r"]["advantage"] is None
    assert values["a"]["value"] == 0.5 and values["a"]["advantage"] == 0.25
    assert math.isclose(values["a"]["process_reward"], 0.35355, abs_tol=1e-4)
    assert math.isclose(values["b"]["process_reward"], -0.35355, abs_tol=1e-4)
    assert math.isclose(values["a0"]["process_reward"], 1.25, abs_tol=1e-4)
    assert math.isclose(values["a1"]["process_reward"], -0.75, abs_tol=1e-4)
    assert math.isclose(values["b0"]["process_reward"], -0.25, abs_tol=1e-4)
    # an infra leaf (score None) is not counted anywhere above it
    values = node_values(nodes, chains, [1.0, None, 0.0, 0.0])
    assert values["a"]["value"] == 1.0 and values["a"]["n_leaves"] == 1
    assert values["a1"]["value"] is None


async def test_a_parroting_user_is_resampled_then_scripted_within_the_tree_budget(
    task: Blueprint, tmp_path: Path
) -> None:
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("tools"):
            seed = body.get("seed", 0) % 991
            if _assistant_turns(body) % 2 == 0:
                return tool_call("search_products", {"query": f"q{seed}"}, probs=HIGH)
            return say(f"Result {seed}: here are the mugs you asked about today.", probs=HIGH)
        return say(body["messages"][-1]["content"])  # the user parrots the assistant

    config = TreeConfig(max_tree_tokens=2000, deterministic=True)
    result, budget = await _grow(
        task, ScriptedLLM([answer] * 500), tmp_path, leaves=4, config=config
    )
    assert budget["generated_tokens"] <= config.max_tree_tokens
    trajectories = [leaf.trajectory for leaf in result.leaves]
    assert trajectories and all(t.failure_class is None for t in trajectories)
    scripted = [t for t in trajectories if t.user_scripted]
    assert scripted and all(t.user_resamples >= 1 for t in scripted)
