"""Advantage estimators of the GRPO stage (docs/methods.md §9.2-§9.5, §10, §13), in plain numpy.

Every estimator takes plain records and returns plain arrays, so the trainer (``trainer.py``)
and the tests share one implementation:

- a **tree group** is a list of :class:`TreeLeaf`: one leaf per rollout, with its reward and
  its node path from the stored tree (``Trajectory.node_ids``: node ids from the first assistant
  turn down to the leaf). Two leaves share the node at depth ``d`` when their paths agree on the
  first ``d`` ids; the root (depth 0) is the whole group. Step ``t`` of a leaf (its ``t``-th
  assistant turn, from 0) is the node ``path[: t + 1]``.
- a **step group** is a list of :class:`StepTrajectory`: one rollout with its reward and, per
  assistant turn, the anchor key of the state it acted from (``state_key``, docs/methods.md §1.2).

Estimators that give one value per leaf return an array of shape ``(n_leaves,)``; per-step
estimators return one array per leaf with one value per step. ``std`` is the sample standard
deviation (``ddof=1``, as ``torch.std`` in TRL and in GiGPO's code); ``eps = 1e-8``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

__all__ = [
    "EPS",
    "GigpoResult",
    "HgpoResult",
    "StepTrajectory",
    "TreeLeaf",
    "arpo_hard",
    "discounted_returns",
    "fork",
    "fork_step_rewards",
    "gigpo",
    "grpo",
    "hgpo",
    "hgpo_trajectories",
    "history_keys",
    "leaves_from_paths",
    "tree_gl",
    "tree_subgroup",
    "whiten",
]

EPS = 1e-8


@dataclass(frozen=True)
class TreeLeaf:
    """One leaf of a rollout tree: its node path (first turn to leaf) and its reward.

    ``exec_ok`` (for ``fork``) says per step whether that node's tool calls all succeeded;
    ``None`` counts every step as ok.
    """

    path: tuple[Hashable, ...]
    reward: float
    exec_ok: tuple[bool, ...] | None = None

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError("a leaf needs a non-empty node path")
        if self.exec_ok is not None and len(self.exec_ok) != len(self.path):
            raise ValueError(f"exec_ok has {len(self.exec_ok)} entries for {len(self.path)} steps")


@dataclass(frozen=True)
class StepTrajectory:
    """One rollout as a sequence of steps (assistant turns) for step-level grouping.

    ``anchors[t]`` is the anchor key of the state step ``t`` acted from; ``step_rewards``
    defaults to the whole reward on the last step (outcome reward only).
    """

    reward: float
    anchors: tuple[Hashable, ...]
    step_rewards: tuple[float, ...] | None = None

    def rewards(self) -> np.ndarray:
        if self.step_rewards is not None:
            if len(self.step_rewards) != len(self.anchors):
                raise ValueError(
                    f"{len(self.step_rewards)} step rewards for {len(self.anchors)} steps"
                )
            return np.asarray(self.step_rewards, dtype=float)
        out = np.zeros(len(self.anchors))
        if len(out):
            out[-1] = self.reward
        return out


def _std(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def grpo(rewards: Sequence[float], *, scale: bool = True) -> np.ndarray:
    """Plain GRPO group advantages (reference for TRL's own): ``(R - mean) / (std + eps)``.

    >>> grpo([1.0, 0.0, 1.0, 0.0]).round(5).tolist()
    [0.86603, -0.86603, 0.86603, -0.86603]
    """
    r = np.asarray(rewards, dtype=float)
    centered = r - r.mean()
    return centered / (_std(r) + EPS) if scale else centered


def whiten(values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Whiten ``values`` over the entries where ``mask`` is set (TreePO's last step, §9.3)."""
    v = np.asarray(values, dtype=float)
    m = np.ones_like(v, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    sel = v[m]
    if sel.size == 0:
        return v.copy()
    out = (v - sel.mean()) / (float(sel.std()) + EPS)
    return np.where(m, out, 0.0)


def _prefix_groups(leaves: Sequence[TreeLeaf], depth: int) -> dict[tuple, list[int]]:
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, leaf in enumerate(leaves):
        if len(leaf.path) >= depth:
            groups[tuple(leaf.path[:depth])].append(i)
    return groups


def tree_subgroup(
    leaves: Sequence[TreeLeaf], *, variant: Literal["average", "group_size"] = "average"
) -> np.ndarray:
    """TreePO subgroup advantages, one per leaf, before whitening (docs/methods.md §9.3).

    ``a_d(i) = R_i - mean_{G_d(i)} R`` for d = 0 (the whole group) and every deeper ancestor
    shared by at least 2 leaves; ``A_i`` is their mean ("average") or their mean weighted by
    ``|G_d(i)|`` ("group_size"). Whiten over the batch's response tokens afterwards (``whiten``).

    >>> leaves = [TreeLeaf(("a", "x"), 1.0), TreeLeaf(("a", "y"), 0.0),
    ...           TreeLeaf(("b", "x"), 0.0), TreeLeaf(("b", "y"), 0.0)]
    >>> tree_subgroup(leaves).tolist()
    [0.625, -0.375, -0.125, -0.125]
    """
    if variant not in ("average", "group_size"):
        raise ValueError(f"unknown tree_subgroup variant {variant!r}")
    if not leaves:
        return np.zeros(0)
    r = np.array([leaf.reward for leaf in leaves], dtype=float)
    num = np.zeros(len(leaves))
    den = np.zeros(len(leaves))
    max_depth = max(len(leaf.path) for leaf in leaves)
    for d in range(max_depth + 1):
        for members in _prefix_groups(leaves, d).values():
            if d > 0 and len(members) < 2:
                continue
            mean = r[members].mean()
            weight = 1.0 if variant == "average" else float(len(members))
            for i in members:
                num[i] += weight * (r[i] - mean)
                den[i] += weight
    return num / den


def tree_gl(leaves: Sequence[TreeLeaf], *, leave_one_out: bool = False) -> list[np.ndarray]:
    """TreeRL global + local process reward per step (docs/methods.md §9.4, estimator ``tree_gl``).

    ``V(n)`` = mean reward of the leaves under node n; ``R(n) = (V(n) - V(root) + V(n) -
    V(parent)) / sqrt(|leaves(n)|)``, given to every token of the segment. With
    ``leave_one_out`` the leaf rewards are first centred by their leave-one-out mean (the
    released code's variant). Returns one array per leaf: ``R`` of each node on its path.

    >>> leaves = [TreeLeaf(("a", "x"), 1.0), TreeLeaf(("a", "y"), 0.0),
    ...           TreeLeaf(("b", "x"), 0.0), TreeLeaf(("b", "y"), 0.0)]
    >>> [a.round(5).tolist() for a in tree_gl(leaves)][:2]
    [[0.35355, 1.25], [0.35355, -0.75]]
    """
    r = np.array([leaf.reward for leaf in leaves], dtype=float)
    n = len(r)
    if leave_one_out and n > 1:
        r = r - (r.sum() - r) / (n - 1)
    value: dict[tuple, float] = {}
    count: dict[tuple, int] = {}
    max_depth = max((len(leaf.path) for leaf in leaves), default=0)
    for d in range(max_depth + 1):
        for key, members in _prefix_groups(leaves, d).items():
            value[key] = float(r[members].mean())
            count[key] = len(members)
    root = value.get((), 0.0)
    out = []
    for leaf in leaves:
        steps = []
        for t in range(len(leaf.path)):
            node = tuple(leaf.path[: t + 1])
            v, parent = value[node], value[tuple(leaf.path[:t])]
            steps.append(((v - root) + (v - parent)) / math.sqrt(count[node]))
        out.append(np.array(steps))
    return out


def fork(
    leaves: Sequence[TreeLeaf], *, lambda_e: float = 0.1, eta: float = 1.0
) -> list[np.ndarray]:
    """PORTool step advantages on a rewarded tree (docs/methods.md §9.5, estimator ``fork``).

    ``R(s) = max_{leaves under s} correct + lambda_e·exec_ok(s)``; ``A_fork(s) = R(s) -
    mean_{siblings incl. s} R`` (0 without a sibling); ``A(s in τ) = A_traj(τ) + eta·A_fork(s)``
    with ``A_traj = (R_τ - mean R) / (std R + eps)`` over the group. A leaf's reward is its
    ``correct`` value. Returns one array per leaf, one value per step.
    """
    a_traj = grpo([leaf.reward for leaf in leaves])
    step_r = fork_step_rewards(leaves, lambda_e=lambda_e)
    children: dict[tuple, list[tuple]] = defaultdict(list)
    for node in step_r:
        children[node[:-1]].append(node)
    a_fork: dict[tuple, float] = {}
    for siblings in children.values():
        mean = float(np.mean([step_r[s] for s in siblings]))
        for s in siblings:
            a_fork[s] = step_r[s] - mean if len(siblings) > 1 else 0.0
    return [
        np.array(
            [a_traj[i] + eta * a_fork[tuple(leaf.path[: t + 1])] for t in range(len(leaf.path))]
        )
        for i, leaf in enumerate(leaves)
    ]


def fork_step_rewards(leaves: Sequence[TreeLeaf], *, lambda_e: float = 0.1) -> dict[tuple, float]:
    """``R(s)`` of every node (keyed by its path prefix), as ``fork`` computes it (§9.5)."""
    best: dict[tuple, float] = {}
    ok: dict[tuple, bool] = {}
    for leaf in leaves:
        for t in range(len(leaf.path)):
            node = tuple(leaf.path[: t + 1])
            best[node] = max(best.get(node, -math.inf), float(leaf.reward))
            step_ok = True if leaf.exec_ok is None else bool(leaf.exec_ok[t])
            ok[node] = ok.get(node, True) and step_ok
    return {node: best[node] + lambda_e * float(ok[node]) for node in best}


def arpo_hard(leaves: Sequence[TreeLeaf], leaf_advantages: Sequence[float]) -> list[np.ndarray]:
    """ARPO "hard" attribution (docs/methods.md §9.2): a node shared by d leaves gets the mean of
    their advantages; a node on one leaf only keeps that leaf's. One array per leaf, per step.

    >>> leaves = [TreeLeaf(("a", "x"), 1.0), TreeLeaf(("a", "y"), 0.0)]
    >>> [a.tolist() for a in arpo_hard(leaves, [1.0, -1.0])]
    [[0.0, 1.0], [0.0, -1.0]]
    """
    adv = np.asarray(leaf_advantages, dtype=float)
    if len(adv) != len(leaves):
        raise ValueError(f"{len(adv)} advantages for {len(leaves)} leaves")
    under: dict[tuple, list[int]] = defaultdict(list)
    for i, leaf in enumerate(leaves):
        for t in range(len(leaf.path)):
            under[tuple(leaf.path[: t + 1])].append(i)
    return [
        np.array([adv[under[tuple(leaf.path[: t + 1])]].mean() for t in range(len(leaf.path))])
        for leaf in leaves
    ]


def discounted_returns(
    step_rewards: Sequence[float] | np.ndarray, gamma: float = 0.95
) -> np.ndarray:
    """``G_t = sum_k gamma^k r_{t+k}`` (docs/methods.md §10.1).

    >>> discounted_returns([0, 0, 0, 1]).round(6).tolist()
    [0.857375, 0.9025, 0.95, 1.0]
    """
    r = np.asarray(step_rewards, dtype=float)
    out = np.zeros_like(r)
    acc = 0.0
    for t in range(len(r) - 1, -1, -1):
        acc = r[t] + gamma * acc
        out[t] = acc
    return out


@dataclass(frozen=True)
class GigpoResult:
    """Per-step GiGPO values, one array per trajectory (what docs/methods.md §10.1 stores)."""

    advantages: list[np.ndarray]
    episode: np.ndarray  # A_E per trajectory
    step: list[np.ndarray]  # A_S per step
    returns: list[np.ndarray]  # G per step
    group_sizes: list[np.ndarray]  # |g(s)| per step
    size_histogram: dict[int, int] = field(default_factory=dict)


def gigpo(
    trajectories: Sequence[StepTrajectory],
    *,
    gamma: float = 0.95,
    omega: float = 1.0,
    norm: Literal["mean_norm", "mean_std_norm"] = "mean_norm",
) -> GigpoResult:
    """GiGPO episode + anchor-state step advantages (docs/methods.md §10.1).

    ``A_E = (R_i - mean R) / F_E`` over the trajectories (the paper's per-trajectory mean);
    steps with the same anchor form a step group, ``A_S = (G - mean_g G) / F_S`` (0 for a
    singleton); ``A = A_E + omega·A_S``; ``F = 1`` (mean_norm) or ``std + eps`` (mean_std_norm).
    """
    if norm not in ("mean_norm", "mean_std_norm"):
        raise ValueError(f"unknown GiGPO normalization {norm!r}")
    r = np.array([t.reward for t in trajectories], dtype=float)
    a_e = r - r.mean() if len(r) else r
    if norm == "mean_std_norm":
        a_e = a_e / (_std(r) + EPS)
    returns = [discounted_returns(t.rewards(), gamma) for t in trajectories]
    groups: dict[Hashable, list[tuple[int, int]]] = defaultdict(list)
    for i, traj in enumerate(trajectories):
        for t, anchor in enumerate(traj.anchors):
            groups[anchor].append((i, t))
    a_s = [np.zeros(len(t.anchors)) for t in trajectories]
    sizes = [np.ones(len(t.anchors), dtype=int) for t in trajectories]
    histogram: dict[int, int] = defaultdict(int)
    for members in groups.values():
        histogram[len(members)] += 1
        g = np.array([returns[i][t] for i, t in members])
        scale = (_std(g) + EPS) if norm == "mean_std_norm" else 1.0
        for (i, t), value in zip(members, g, strict=True):
            sizes[i][t] = len(members)
            if len(members) > 1:
                a_s[i][t] = (value - g.mean()) / scale
    advantages = [a_e[i] + omega * a_s[i] for i in range(len(trajectories))]
    return GigpoResult(
        advantages=advantages,
        episode=a_e,
        step=a_s,
        returns=returns,
        group_sizes=sizes,
        size_histogram=dict(sorted(histogram.items())),
    )


def history_keys(anchors: Sequence[Hashable], t: int, depth: int) -> tuple[Hashable, ...]:
    """``(s_t, s_{t-1}, ..., s_{t-depth})``, padded with ``None`` before the first step: the
    context key of HGPO's group ``G_depth`` (docs/methods.md §10.2)."""
    return tuple(anchors[t - k] if t - k >= 0 else None for k in range(depth + 1))


@dataclass(frozen=True)
class HgpoResult:
    """HGPO per step: the combined advantage, and per level ``A_k`` (NaN where the group was a
    singleton) and ``|G_k|`` (what docs/methods.md §10.2 stores)."""

    advantages: np.ndarray
    level_advantages: np.ndarray  # shape (n_steps, K + 1)
    level_sizes: np.ndarray  # shape (n_steps, K + 1)


def hgpo(
    returns: Sequence[float],
    contexts: Sequence[Sequence[Hashable]],
    *,
    depth: int = 2,
    alpha: float = 1.0,
) -> HgpoResult:
    """HGPO hierarchy-of-groups advantages over a flat list of steps (docs/methods.md §10.2).

    ``contexts[x] = (s_t, s_{t-1}, s_{t-2}, ...)`` (newest first; see ``history_keys``); group
    ``G_k(x)`` = steps whose first ``k + 1`` context entries equal x's. ``A_k(x) = G_x -
    mean_{G_k(x)} G`` where ``|G_k(x)| >= 2``; ``A(x) = sum_k w_k A_k / sum_k w_k`` over those
    k, ``w_k = (k + 1)^alpha``; 0 when every group is a singleton.
    """
    g = np.asarray(returns, dtype=float)
    if len(contexts) != len(g):
        raise ValueError(f"{len(contexts)} contexts for {len(g)} returns")
    n = len(g)
    level_adv = np.full((n, depth + 1), np.nan)
    level_size = np.zeros((n, depth + 1), dtype=int)
    for k in range(depth + 1):
        groups: dict[tuple, list[int]] = defaultdict(list)
        for x, ctx in enumerate(contexts):
            key = tuple(ctx[: k + 1])
            if len(key) < k + 1:
                key = key + (None,) * (k + 1 - len(key))
            groups[key].append(x)
        for members in groups.values():
            mean = g[members].mean()
            for x in members:
                level_size[x, k] = len(members)
                if len(members) >= 2:
                    level_adv[x, k] = g[x] - mean
    weights = (np.arange(depth + 1) + 1.0) ** alpha
    out = np.zeros(n)
    for x in range(n):
        used = ~np.isnan(level_adv[x])
        if used.any():
            out[x] = float((weights[used] * level_adv[x, used]).sum() / weights[used].sum())
    return HgpoResult(advantages=out, level_advantages=level_adv, level_sizes=level_size)


def hgpo_trajectories(
    trajectories: Sequence[StepTrajectory],
    *,
    gamma: float = 0.95,
    depth: int = 2,
    alpha: float = 1.0,
) -> list[np.ndarray]:
    """HGPO over a group of rollouts: returns per step from ``discounted_returns``, contexts from
    each rollout's anchor history (``history_keys``); one array per rollout."""
    flat_returns: list[float] = []
    flat_ctx: list[tuple] = []
    spans: list[tuple[int, int]] = []
    for traj in trajectories:
        start = len(flat_returns)
        flat_returns.extend(discounted_returns(traj.rewards(), gamma).tolist())
        flat_ctx.extend(history_keys(traj.anchors, t, depth) for t in range(len(traj.anchors)))
        spans.append((start, len(flat_returns)))
    result = hgpo(flat_returns, flat_ctx, depth=depth, alpha=alpha)
    return [result.advantages[a:b] for a, b in spans]


def leaves_from_paths(
    paths: Sequence[Sequence[Hashable]],
    rewards: Sequence[float],
    exec_ok: Mapping[int, Sequence[bool]] | None = None,
) -> list[TreeLeaf]:
    """``TreeLeaf`` records from stored node paths (``Trajectory.node_ids``) and rewards."""
    return [
        TreeLeaf(
            path=tuple(p),
            reward=float(r),
            exec_ok=tuple(exec_ok[i]) if exec_ok and i in exec_ok else None,
        )
        for i, (p, r) in enumerate(zip(paths, rewards, strict=True))
    ]
