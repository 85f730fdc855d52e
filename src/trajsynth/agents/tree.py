"""Rollout trees: one blueprint grown as a tree of turns instead of N independent runs.

The shared prefix is generated once and every child continues from its parent's messages
(docs/methods.md §9.1). Where to branch follows ARPO's entropy rule with the AEPO guard (§9.2), the
width follows ECHO (§9.6), and dead ends are cut from the cheap signals of ``curation.signals``
(§7). Each child starts from a snapshot of the environment taken at its branch point, so a
write in one branch is never seen by a sibling; a branch point reached through read-only calls
since the last snapshot reuses that snapshot.

The tree is grown depth-first with one environment: a child's whole subtree is finished, the
environment is restored, and the next sibling starts. Depth-first order also keeps the
server's prompt cache warm, since consecutive requests share the longest prefixes.

Budgets (leaves, nodes, depth, children per node, generated tokens) are checked *before* each
generation with the largest reply a turn can produce, so none is ever exceeded.
"""

from __future__ import annotations

import json
import logging
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from trajsynth.agents.entropy import candidate_disagreement, step_uncertainty
from trajsynth.agents.rollout import (
    Episode,
    PathState,
    _Turn,
    act,
    assistant_reply,
    child_node,
    end_on_llm_fault,
    final_state,
    leaf_trajectory,
    opening_path,
    root_node,
)
from trajsynth.curation.signals import compute_signals
from trajsynth.llm.client import ChatResult
from trajsynth.schemas import (
    EnvState,
    InfraError,
    LLMUsage,
    Node,
    ObsClass,
    RolloutTree,
    Termination,
    ToolAccess,
    Trajectory,
    TreeConfig,
    content_id,
    stable_hash,
)
from trajsynth.schemas.sandbox import SnapshotHandle

__all__ = ["BranchDecision", "TreeLeaf", "TreeResult", "branch_probability", "grow_tree"]

log = logging.getLogger(__name__)

EPS = 1e-8
LOW_CONFIDENCE_QUANTILE = 0.2  # §9.6: below the tree's 20th percentile ...
LOW_CONFIDENCE_STREAK = 2  # ... for 2 consecutive segments


def branch_probability(
    dh: float, consecutive: int, *, alpha: float, beta: float, rho: float
) -> float:
    """``P_t = (alpha + beta·dH_t)·rho^c`` (docs/methods.md §9.2, AEPO guard).

    >>> round(branch_probability(0.6667, 0, alpha=0.5, beta=0.2, rho=0.5), 4)
    0.6333
    >>> round(branch_probability(0.6667, 1, alpha=0.5, beta=0.2, rho=0.5), 4)
    0.3167
    """
    return (alpha + beta * dh) * rho**consecutive


def relative_entropy_rise(h_t: float, h_init: float) -> float:
    """``dH_t = clip((H_t - H_init) / max(H_init, eps), -1, 1)`` (docs/methods.md §9.2).

    >>> round(relative_entropy_rise(2.0, 1.2), 4)
    0.6667
    """
    return max(-1.0, min(1.0, (h_t - h_init) / max(h_init, EPS)))


def echo_width(dh: float, conf_group: float, z_max: int) -> int:
    """``Z_t = 1 + round((Z_max - 1)·clip(dH_t, 0, 1)·(1 - conf_group))`` (docs/methods.md §9.6)."""
    return 1 + round((z_max - 1) * max(0.0, min(1.0, dh)) * (1.0 - conf_group))


class BranchDecision(dict[str, Any]):
    """What decided a node's number of children; stored as ``nodes.branch`` (JSON).

    Keys: ``after`` (root | tool | tool_error | user), ``source`` (logprobs | candidates |
    tool_error | planned), ``h`` and ``h_init`` (step entropies), ``dh``, ``consecutive``
    (branching ancestors), ``p``, ``u`` (the RNG draw), ``branched``, ``width``,
    ``limited_by`` (the budget that cut the width, if any).
    """


@dataclass
class TreeLeaf:
    path: PathState
    chain: list[Node]  # root first
    final_state: EnvState | None
    trajectory: Trajectory


@dataclass
class TreeResult:
    tree: RolloutTree
    nodes: list[Node]
    leaves: list[TreeLeaf]
    usage: list[LLMUsage] = field(default_factory=list)
    duplicate_replies: int = 0

    @property
    def trajectories(self) -> list[Trajectory]:
        return [leaf.trajectory for leaf in self.leaves]


@dataclass
class _Snapshot:
    handle: SnapshotHandle
    writes_at: int  # the number of write calls on the path when it was taken


def _sibling_key(result: ChatResult) -> str:
    """What makes a child new among its siblings: its calls (name and parsed arguments) when
    it makes any, else its words. Two siblings that make the same calls in other words reach
    the same state and would grow the same subtree, so the second is resampled instead."""
    message = result.message
    calls = message.tool_calls or []
    if calls:
        return stable_hash([(c.function.name, _parsed(c.function.arguments)) for c in calls])
    return stable_hash(" ".join((message.content or "").lower().split()))


def _parsed(arguments: str) -> Any:
    """The arguments as JSON when they parse, else the text (a model's output may not:
    broken JSON, an integer past Python's digit limit, nesting past the recursion limit)."""
    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):
        return arguments


def _action_key(result: ChatResult) -> str:
    """A candidate's action for disagreement (§1.3): its first call, or its text."""
    calls = result.message.tool_calls or []
    if calls:
        return f"{calls[0].function.name}:{calls[0].function.arguments}"
    return "say:" + " ".join((result.message.content or "").lower().split())[:64]


class _TreeGrower:
    def __init__(
        self,
        episode: Episode,
        config: TreeConfig,
        *,
        leaves: int,
        run_id: str,
        tree_id: str,
        reply_token_cap: int,
        on_leaf: Callable[[TreeLeaf], None] | None = None,
    ) -> None:
        self.ep = episode
        self.on_leaf = on_leaf
        self.cfg = config
        self.max_leaves = leaves
        self.run_id = run_id
        self.tree_id = tree_id
        # the most one turn can generate: an assistant reply and a simulated user's answer
        self.turn_reserve = reply_token_cap + (episode.user_sim.max_tokens or reply_token_cap)
        self.rng = random.Random(int(stable_hash({"tree": tree_id}, length=12), 16))
        self.nodes: dict[str, Node] = {}
        self.children: dict[str, list[str]] = {}
        self.decisions: dict[str, BranchDecision] = {}
        self.prunes: dict[str, str] = {}
        self.leaves: list[TreeLeaf] = []
        self.usage: list[LLMUsage] = []
        self.started_paths = 0
        self.generated = 0
        self.duplicates = 0
        self.h_init: float | None = None
        self.write_tools = {t.name for t in episode.env.tools if t.access is not ToolAccess.READ}
        self.t0 = time.perf_counter()

    # ---------------------------------------------------------------- budgets

    def _budget_left(self) -> str | None:
        """The budget that forbids another turn now, or None."""
        if len(self.nodes) >= self.cfg.max_nodes:
            return "nodes"
        if self.generated + self.turn_reserve > self.cfg.max_tree_tokens:
            return "tree_tokens"
        return None

    # ---------------------------------------------------------------- environment

    def _writes(self, path: PathState) -> int:
        return sum(1 for t in path.turns for c in t.calls if c.tool in self.write_tools)

    async def _snapshot_for(self, path: PathState, inherited: _Snapshot | None) -> _Snapshot:
        writes = self._writes(path)
        if inherited is not None and inherited.writes_at == writes:
            return inherited  # only reads since: the state is the same
        return _Snapshot(await self.ep.env.snapshot(), writes)

    # ---------------------------------------------------------------- generation

    def _seed(self, node: Node, k: int) -> int:
        return int(stable_hash({"node": node.node_id, "k": k}, length=8), 16)

    async def _reply(self, node: Node, path: PathState, k: int) -> ChatResult:
        result = await assistant_reply(self.ep, path, seed=self._seed(node, k))
        self.generated += result.usage.completion_tokens
        self.usage.append(result.usage)
        return result

    def _confidence_floor(self) -> float | None:
        confs = [n.confidence for n in self.nodes.values() if n.confidence is not None]
        if len(confs) < 5:
            return None
        return statistics.quantiles(confs, n=10, method="inclusive")[1]

    def _decide(
        self, node: Node, consecutive: int, first: ChatResult, candidates: Sequence[ChatResult]
    ) -> BranchDecision:
        """How many children ``node`` gets (docs/methods.md §9.2 with §9.6's width)."""
        cfg = self.cfg
        errored = any(c.obs_class is ObsClass.ERROR for c in node.calls)
        after = "tool_error" if errored else ("tool" if node.calls else "user")
        h_t, _ = step_uncertainty(first.token_logprobs, first.top_logprobs)
        if errored:
            source, dh = "tool_error", 1.0
        elif h_t is not None and self.h_init is not None:
            source, dh = "logprobs", relative_entropy_rise(h_t, self.h_init)
        else:
            source = "candidates"
            dh = candidate_disagreement([_action_key(c) for c in candidates]) or 0.0
        alpha = cfg.alpha if node.calls else cfg.alpha_after_user
        p = branch_probability(dh, consecutive, alpha=alpha, beta=cfg.beta, rho=cfg.rho)
        u = self.rng.random()
        branched = p > cfg.tau if cfg.deterministic else u < p
        confs = [n.confidence for n in self.nodes.values() if n.confidence is not None]
        conf_group = statistics.fmean(confs) if confs else 0.0
        width = max(2, echo_width(dh, conf_group, cfg.max_children)) if branched else 1
        limited_by = None
        if width > cfg.max_children:
            width, limited_by = cfg.max_children, "children"
        room = 1 + self.max_leaves - self.started_paths
        if width > room:
            width, limited_by = room, "leaves"
        return BranchDecision(
            after=after,
            source=source,
            h=h_t,
            h_init=self.h_init,
            dh=dh,
            consecutive=consecutive,
            p=p,
            u=u,
            branched=width > 1,
            width=width,
            limited_by=limited_by,
        )

    # ---------------------------------------------------------------- pruning

    def _prune_reason(self, path: PathState, chain: Sequence[Node]) -> str | None:
        """Why this branch is a dead end (docs/methods.md §7 signals, §9.6 guard), or None."""
        calls = [c for t in path.turns for c in t.calls]
        if calls and calls[-1].obs_class is ObsClass.ERROR:
            last = calls[-1]
            if any(
                c.obs_class is ObsClass.ERROR
                and c.tool == last.tool
                and c.raw_arguments == last.raw_arguments
                for c in calls[:-1]
            ):
                return f"repeated_failing_call: {last.tool}({last.raw_arguments[:80]})"
        partial = Trajectory(
            trajectory_id="partial",
            run_id=self.run_id,
            blueprint_id=self.ep.blueprint.blueprint_id,
            tree_id=self.tree_id,
            leaf_node_id=chain[-1].node_id,
            cluster_id=self.ep.blueprint.cluster_id,
            messages=path.messages,
            calls=calls,
            termination=Termination.PRUNED,
        )
        signals = compute_signals(partial, write_tools=self.write_tools)
        if signals.loop:
            return f"loop: {signals.repetition_instances} repeated actions"
        if signals.no_progress:
            floor = self._confidence_floor()
            recent = [n.confidence for n in chain[-LOW_CONFIDENCE_STREAK:]]
            if floor is None or any(c is None for c in recent):
                return "no_progress: no new state in the last turns"
            if all(c is not None and c < floor for c in recent):
                return f"no_progress: and confidence below {floor:.3f} for 2 turns"
        return None

    # ---------------------------------------------------------------- growth

    async def grow(self) -> None:
        path = opening_path(self.ep)
        root = root_node(self.tree_id, path)
        self.nodes[root.node_id] = root
        n_root = max(1, min(self.max_leaves, round(self.max_leaves * self.cfg.root_fraction)))
        self.started_paths = n_root
        snap = await self._snapshot_for(path, None) if self.max_leaves > 1 else None
        self.decisions[root.node_id] = BranchDecision(
            after="root", source="planned", branched=n_root > 1, width=n_root
        )
        await self._expand(root, [root], path, snap, consecutive=0, width=n_root)
        # ARPO's fallback: paths that ended early left budget; spend it on more root samples
        while self.started_paths < self.max_leaves and self._budget_left() is None:
            self.started_paths += 1
            self.decisions[root.node_id]["width"] += 1
            self.decisions[root.node_id]["fallback"] = (
                self.decisions[root.node_id].get("fallback", 0) + 1
            )
            added = await self._expand(
                root, [root], path, snap, consecutive=0, width=1, restore_first=True
            )
            if not added:
                break

    async def _expand(
        self,
        node: Node,
        chain: list[Node],
        path: PathState,
        snap: _Snapshot | None,
        *,
        consecutive: int,
        width: int | None = None,
        restore_first: bool = False,
    ) -> int:
        """Grow the children of ``node`` (whose turn is done) and their subtrees.

        ``width`` is given at the root; elsewhere it is decided from the first child's
        uncertainty. Returns the number of new children."""
        target = width or 1
        decided = width is not None
        pending: list[ChatResult] = []
        seen = {self.nodes[c].node_id for c in self.children.get(node.node_id, [])}
        reply_keys: set[str] = set()
        added = 0
        k = len(self.children.get(node.node_id, [])) * 4
        attempts = 0
        while added < target:
            limit = self._budget_left()
            if limit is not None:
                if added == 0 and not restore_first:
                    return await self._end_at(node, chain, path, limit)
                if not decided:
                    break
                self.decisions.setdefault(node.node_id, BranchDecision())["limited_by"] = limit
                break
            if attempts > target + 2:
                break  # the model keeps giving the same reply: no more distinct children
            attempts += 1
            child_path = path.fork()
            if pending:
                result = pending.pop(0)
            else:
                try:
                    result = await self._reply(node, child_path, k)
                except InfraError as exc:
                    child_path.turns.append(_Turn())
                    end_on_llm_fault(child_path, exc)
                    await self._leaf(child_path, chain)
                    return added
                k += 1
            key = _sibling_key(result)
            if key in reply_keys:
                self.duplicates += 1
                continue
            reply_keys.add(key)
            if not decided:
                candidates = [result]
                h_t, _ = step_uncertainty(result.token_logprobs, result.top_logprobs)
                if h_t is None and self.cfg.candidates > 1:
                    for _ in range(self.cfg.candidates - 1):
                        if self._budget_left() is not None:
                            break
                        extra = await self._reply(node, path, k)
                        k += 1
                        candidates.append(extra)
                        pending.append(extra)
                decision = self._decide(node, consecutive, result, candidates)
                self.decisions[node.node_id] = decision
                target = int(decision["width"])
                self.started_paths += target - 1
                decided = True
            if target > 1 or restore_first:
                snap = await self._snapshot_for(path, snap)
            if (added > 0 or restore_first) and snap is not None:
                await self.ep.env.restore(snap.handle)
            if node.depth == 0 and self.h_init is None:
                self.h_init, _ = step_uncertainty(result.token_logprobs, result.top_logprobs)
            turn_index = len(child_path.turns)
            turn = await act(
                self.ep,
                child_path,
                result,
                user_seed=self._seed(node, 1000 + turn_index + k),
                user_room=self.cfg.max_tree_tokens - self.generated,
            )
            self.generated += sum(u.completion_tokens for u in turn.usage[1:])
            self.usage.extend(turn.usage[1:])
            child = child_node(node, turn)
            if child.node_id in seen or child.node_id in self.nodes:
                self.duplicates += 1
                continue
            seen.add(child.node_id)
            self.nodes[child.node_id] = child
            self.children.setdefault(node.node_id, []).append(child.node_id)
            added += 1
            child_chain = [*chain, child]
            branched_here = bool(self.decisions.get(node.node_id, {}).get("branched"))
            next_consecutive = consecutive + 1 if branched_here and node.depth > 0 else 0
            await self._continue(child, child_chain, child_path, snap, next_consecutive)
        if decided and node.node_id in self.decisions and added < target:
            # a budget or repeated replies stopped the branch early: give the paths back
            self.started_paths -= target - max(added, 1)
        return added

    async def _continue(
        self,
        node: Node,
        chain: list[Node],
        path: PathState,
        snap: _Snapshot | None,
        consecutive: int,
    ) -> None:
        if not path.done and self.cfg.prune:
            reason = self._prune_reason(path, chain)
            if reason is not None:
                self.prunes[node.node_id] = reason
                path.end(Termination.PRUNED, None, reason)
        if path.done:
            await self._leaf(path, chain)
            return
        await self._expand(node, chain, path, snap, consecutive=consecutive)

    async def _end_at(self, node: Node, chain: list[Node], path: PathState, limit: str) -> int:
        """The budget ``limit`` (``_budget_left``'s name) ran out before ``node`` got a child:
        it becomes a pruned leaf."""
        reason = f"budget: {limit}"
        self.prunes[node.node_id] = reason
        ended = path.fork()
        ended.end(
            Termination.TOKEN_BUDGET if limit == "tree_tokens" else Termination.PRUNED, None, reason
        )
        await self._leaf(ended, chain)
        return 0

    async def _leaf(self, path: PathState, chain: list[Node]) -> None:
        state = await final_state(self.ep, path)
        trajectory = leaf_trajectory(
            self.ep,
            run_id=self.run_id,
            tree_id=self.tree_id,
            seed=self.ep.blueprint.seed,
            path=path,
            nodes=chain,
            final_state=state,
            wall_s=time.perf_counter() - self.t0,
        )
        self.leaves.append(TreeLeaf(path, list(chain), state, trajectory))
        if self.on_leaf is not None:  # progress belongs to the caller (STYLE: logging)
            self.on_leaf(self.leaves[-1])

    # ---------------------------------------------------------------- result

    def result(self) -> TreeResult:
        nodes = [
            n.model_copy(
                update={
                    "n_children": len(self.children.get(n.node_id, [])),
                    "prune_reason": self.prunes.get(n.node_id),
                    "branch_probability": (self.decisions.get(n.node_id) or {}).get("p"),
                }
            )
            for n in self.nodes.values()
        ]
        wall_s = time.perf_counter() - self.t0
        tree = RolloutTree(
            tree_id=self.tree_id,
            run_id=self.run_id,
            blueprint_id=self.ep.blueprint.blueprint_id,
            round=self.ep.blueprint.round,
            rollout_mode="tree",
            n_nodes=len(nodes),
            n_leaves=len(self.leaves),
            total_tokens=sum(u.prompt_tokens + u.completion_tokens for u in self.usage),
            wall_s=wall_s,
        )
        return TreeResult(tree, nodes, self.leaves, self.usage, self.duplicates)

    def budget_report(self) -> dict[str, Any]:
        return {
            "max_leaves": self.max_leaves,
            "leaves": len(self.leaves),
            "max_nodes": self.cfg.max_nodes,
            "nodes": len(self.nodes),
            "max_depth": self.ep.budgets.max_turns,
            "depth": max((n.depth for n in self.nodes.values()), default=0),
            "max_children": self.cfg.max_children,
            "max_tree_tokens": self.cfg.max_tree_tokens,
            "generated_tokens": self.generated,
            "duplicate_replies": self.duplicates,
        }

    def decision_of(self, node_id: str) -> dict[str, Any] | None:
        decision = self.decisions.get(node_id)
        return dict(decision) if decision is not None else None


async def grow_tree(
    episode: Episode,
    config: TreeConfig,
    *,
    leaves: int,
    run_id: str,
    reply_token_cap: int,
    on_leaf: Callable[[TreeLeaf], None] | None = None,
) -> tuple[TreeResult, dict[str, Any]]:
    """Grow one blueprint's rollout tree with at most ``leaves`` leaves.

    Returns the tree (nodes with their branch decisions and prune reasons, one trajectory per
    leaf with its final state) and the budget report (limits and what was used).
    ``on_leaf`` sees each leaf as it ends, before the tree is done (per-leaf progress)."""
    tree_id = content_id(
        "tree",
        {"run_id": run_id, "blueprint_id": episode.blueprint.blueprint_id, "mode": "tree"},
    )
    grower = _TreeGrower(
        episode,
        config,
        leaves=leaves,
        run_id=run_id,
        tree_id=tree_id,
        reply_token_cap=reply_token_cap,
        on_leaf=on_leaf,
    )
    await grower.grow()
    result = grower.result()
    result.nodes = [
        n.model_copy(update={"branch": grower.decision_of(n.node_id)}) for n in result.nodes
    ]
    report = grower.budget_report()
    result.tree = result.tree.model_copy(
        update={"generated_tokens": grower.generated, "budget": report}
    )
    return result, report


def node_values(
    nodes: Sequence[Node], leaf_chains: Sequence[Sequence[str]], scores: Sequence[float | None]
) -> dict[str, dict[str, float | int | None]]:
    """Per node: ``value`` V(n) = mean score of the counted leaves below it, ``advantage``
    L(n) = V(n) - V(parent) and TreeRL's ``process_reward`` R(n) = (G(n) + L(n)) /
    sqrt(|leaves(n)|) with G(n) = V(n) - V(root) (docs/methods.md §9.4). A leaf whose score is None
    (infra or simulator: not counted) adds nothing; a node with no counted leaf has no value.

    The tree of §9.3/§9.4 (leaf rewards 1, 0, 0, 0):

    >>> ns = [Node(node_id=i, tree_id="t", parent_id=p) for i, p in
    ...       [("r", None), ("a", "r"), ("b", "r"), ("a0", "a"), ("a1", "a"), ("b0", "b"),
    ...        ("b1", "b")]]
    >>> v = node_values(ns, [["r", "a", "a0"], ["r", "a", "a1"], ["r", "b", "b0"],
    ...                      ["r", "b", "b1"]], [1.0, 0.0, 0.0, 0.0])
    >>> round(v["a"]["process_reward"], 5), round(v["a0"]["process_reward"], 5)
    (0.35355, 1.25)
    >>> round(v["a1"]["process_reward"], 5), round(v["b0"]["process_reward"], 5)
    (-0.75, -0.25)
    """
    below: dict[str, list[float]] = {n.node_id: [] for n in nodes}
    for chain, score in zip(leaf_chains, scores, strict=True):
        if score is None:
            continue
        for node_id in chain:
            if node_id in below:
                below[node_id].append(score)
    value = {k: (statistics.fmean(v) if v else None) for k, v in below.items()}
    root_value = next((value[n.node_id] for n in nodes if n.parent_id is None), None)
    out: dict[str, dict[str, float | int | None]] = {}
    for n in nodes:
        v = value[n.node_id]
        parent_v = value.get(n.parent_id) if n.parent_id else None
        advantage = v - parent_v if v is not None and parent_v is not None else None
        process = None
        if v is not None and root_value is not None and n.parent_id is not None:
            local = advantage or 0.0
            process = ((v - root_value) + local) / math.sqrt(len(below[n.node_id]))
        out[n.node_id] = {
            "value": v,
            "advantage": advantage,
            "process_reward": process,
            "n_leaves": len(below[n.node_id]),
        }
    return out
