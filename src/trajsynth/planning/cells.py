"""Drawing the cells a round plans blueprints for (docs/methods.md §6, hierarchical sampling).

A cell is (cluster, path shape, target mode, difficulty). Cells are drawn level by level —
domain, cluster within the domain, shape among the shapes the cluster's graph supports, target
mode, difficulty — so a sparse catalog never needs the full product. Round 0 is uniform at
every level except difficulty, which favours easy tasks (``DIFFICULTY_MIX``) so that even a
small model passes some. Later rounds pass ``weights`` from ``curation/evolution``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import networkx as nx

from trajsynth.curation.evolution import weighted_draw
from trajsynth.mcp_servers.graph import dependency_graph
from trajsynth.schemas import Cell, Difficulty, PathShape, ReasoningMode, ToolAccess, ToolCluster

__all__ = [
    "DIFFICULTY_MIX",
    "LEVELS",
    "SHAPE_MIX",
    "allowed_difficulties",
    "allowed_modes",
    "cluster_shares",
    "has_code_tool",
    "sample_cells",
    "supported_shapes",
]

# Round-0 difficulty mix: half the tasks easy (one or two calls).
DIFFICULTY_MIX: dict[Difficulty, float] = {
    Difficulty.EASY: 0.5,
    Difficulty.MEDIUM: 0.3,
    Difficulty.HARD: 0.2,
}
# Round-0 shape mix: one-call and chain tasks twice as likely as the branching shapes, which
# are never easy (three or more calls); with DIFFICULTY_MIX about 40% of cells come out easy.
SHAPE_MIX: dict[PathShape, float] = {
    PathShape.SINGLE: 2.0,
    PathShape.CHAIN: 2.0,
    PathShape.FAN_OUT: 1.0,
    PathShape.FAN_IN: 1.0,
    PathShape.DIAMOND: 1.0,
}
LEVELS = ("domain", "cluster", "path_shape", "target_mode", "difficulty")
_CODE_TOOL_WORDS = ("python", "run_code", "execute_code", "exec_code")


def has_code_tool(cluster: ToolCluster) -> bool:
    """Whether the cluster offers a sandboxed code tool (for ``code_compute``, §3 step 6)."""
    return any(word in t.name.lower() for t in cluster.tools for word in _CODE_TOOL_WORDS)


def supported_shapes(cluster: ToolCluster, graph: nx.DiGraph | None = None) -> list[PathShape]:
    """The path shapes the cluster's dependency graph can hold (§3 step 3), in enum order.

    >>> from trajsynth.schemas import ServerSpec, ServerKind, ToolSpec, ToolEdge, Domain
    >>> c = ToolCluster(cluster_id="c", domain=Domain.OTHER,
    ...     server=ServerSpec(kind=ServerKind.BUNDLED),
    ...     tools=[ToolSpec(name="a"), ToolSpec(name="b")],
    ...     edges=[ToolEdge(source="a", target="b", out_field="x", in_param="x", score=1.0)])
    >>> [s.value for s in supported_shapes(c)]
    ['single', 'chain']
    """
    g = graph if graph is not None else dependency_graph(cluster)
    g = nx.DiGraph((u, v) for u, v in g.edges if u != v)
    shapes = [PathShape.SINGLE] if cluster.tools else []
    if g.number_of_edges():
        shapes.append(PathShape.CHAIN)
    if any(g.out_degree(u) >= 2 for u in g):
        shapes.append(PathShape.FAN_OUT)
    if any(g.in_degree(v) >= 2 for v in g):
        shapes.append(PathShape.FAN_IN)
    for a in g:
        succ = sorted(g.successors(a))
        if any(
            set(g.successors(b)) & set(g.successors(c)) - {a, b, c}
            for i, b in enumerate(succ)
            for c in succ[i + 1 :]
        ):
            shapes.append(PathShape.DIAMOND)
            break
    return shapes


def allowed_modes(cluster: ToolCluster, shape: PathShape) -> list[ReasoningMode]:
    """Target modes a blueprint of this shape on this cluster can realise (§3, target modes)."""
    writes = any(t.access is ToolAccess.WRITE for t in cluster.tools)
    modes = []
    for mode in ReasoningMode:
        if mode is ReasoningMode.PARALLEL_FANOUT and shape is not PathShape.FAN_OUT:
            continue
        if mode is ReasoningMode.CODE_COMPUTE and not has_code_tool(cluster):
            continue
        if mode is ReasoningMode.EXPLORE_THEN_COMMIT and (shape is PathShape.SINGLE or not writes):
            continue
        if mode is ReasoningMode.VERIFY_AFTER_WRITE and not writes:
            continue
        modes.append(mode)
    return modes


def allowed_difficulties(shape: PathShape, mode: ReasoningMode) -> list[Difficulty]:
    """Bins whose call count the shape can have (§3 step 1: easy 1-2, medium 3-4, hard 5-7)."""
    if shape is PathShape.SINGLE:
        return [Difficulty.EASY]
    if shape is not PathShape.CHAIN or mode is ReasoningMode.EXPLORE_THEN_COMMIT:
        return [Difficulty.MEDIUM, Difficulty.HARD]  # three or more calls
    return list(Difficulty)


def _draw(
    rng: random.Random,
    options: Sequence[str],
    level: str,
    weights: Mapping[str, Mapping[str, float]] | None,
    default: Mapping[str, float] | None = None,
) -> str:
    given = (weights or {}).get(level)
    ws = []
    for option in options:
        if given is not None:
            ws.append(max(0.0, float(given.get(option, 0.0))))
        elif default is not None:
            ws.append(default.get(option, 0.0))
        else:
            ws.append(1.0)
    return weighted_draw(rng, options, ws)


def _shares(
    options: Sequence[str], level: str, weights: Mapping[str, Mapping[str, float]] | None
) -> list[float]:
    """Each option's probability at ``level``, as ``_draw`` would draw it."""
    given = (weights or {}).get(level)
    ws = [max(0.0, float(given.get(o, 0.0))) if given is not None else 1.0 for o in options]
    total = sum(ws)
    return [w / total for w in ws] if total > 0 else [1.0 / len(options)] * len(options)


def cluster_shares(
    clusters: Sequence[ToolCluster], weights: Mapping[str, Mapping[str, float]] | None = None
) -> dict[str, float]:
    """Each cluster's share of the draws: its domain's weight times its weight within the
    domain (uniform where ``weights`` says nothing)."""
    by_domain: dict[str, list[str]] = {}
    for cluster in sorted(clusters, key=lambda c: c.cluster_id):
        if cluster.tools:
            by_domain.setdefault(str(cluster.domain), []).append(cluster.cluster_id)
    domains = sorted(by_domain)
    shares: dict[str, float] = {}
    for domain, d_share in zip(domains, _shares(domains, "domain", weights), strict=True):
        members = by_domain[domain]
        for cid, c_share in zip(members, _shares(members, "cluster", weights), strict=True):
            shares[cid] = d_share * c_share
    return shares


def _allot(shares: Mapping[str, float], n: int, rng: random.Random) -> list[str]:
    """``n`` cluster ids, each cluster ``floor`` or ``ceil`` of ``n`` times its share
    (systematic sampling: one uniform offset, then every 1/n; unbiased), in random order."""
    ids = [c for c in sorted(shares) if shares[c] > 0]
    if not ids:
        return []
    offset = rng.random()
    out: list[str] = []
    cumulative, k = 0.0, 0
    for cid in ids:
        cumulative += shares[cid] * n
        while k < n and k + offset < cumulative:
            out.append(cid)
            k += 1
    out += [ids[-1]] * (n - len(out))  # rounding at the top end
    rng.shuffle(out)
    return out


def sample_cells(
    clusters: Sequence[ToolCluster],
    n: int,
    rng: random.Random,
    weights: Mapping[str, Mapping[str, float]] | None = None,
) -> list[Cell]:
    """Draw ``n`` cells level by level: domain → cluster → shape → mode → difficulty (§6).

    Domain and cluster are allotted rather than drawn one cell at a time: each cluster gets
    ``floor`` or ``ceil`` of ``n`` times its share (``cluster_shares``), so twenty cells
    over four clusters give each five, where independent draws left one with none.

    ``weights`` maps a level name (``LEVELS``) to option → weight; a level without weights
    is uniform over its feasible options, except shape (``SHAPE_MIX``) and difficulty
    (``DIFFICULTY_MIX``), which favour short tasks so that even a small model passes some.
    Options that a cluster cannot realise (a diamond without one in the graph,
    ``parallel_fanout`` off the fan-out shape) are never drawn. Deterministic for a seeded
    ``rng``.
    """
    if n <= 0 or not clusters:
        return []
    by_domain: dict[str, list[ToolCluster]] = {}
    for cluster in sorted(clusters, key=lambda c: c.cluster_id):
        if cluster.tools:
            by_domain.setdefault(str(cluster.domain), []).append(cluster)
    if not by_domain:
        return []
    shapes = {c.cluster_id: supported_shapes(c) for cs in by_domain.values() for c in cs}
    cells: list[Cell] = []
    default_mix = {str(k): v for k, v in DIFFICULTY_MIX.items()}
    shape_mix = {str(k): v for k, v in SHAPE_MIX.items()}
    by_id = {c.cluster_id: c for cs in by_domain.values() for c in cs}
    for cluster_id in _allot(cluster_shares(list(by_id.values()), weights), n, rng):
        cluster = by_id[cluster_id]
        shape = PathShape(
            _draw(
                rng, [s.value for s in shapes[cluster.cluster_id]], "path_shape", weights, shape_mix
            )
        )
        modes = allowed_modes(cluster, shape) or [ReasoningMode.DIRECT_EXECUTE]
        mode = ReasoningMode(_draw(rng, [m.value for m in modes], "target_mode", weights))
        bins = [d.value for d in allowed_difficulties(shape, mode)]
        difficulty = Difficulty(_draw(rng, bins, "difficulty", weights, default_mix))
        cells.append(
            Cell(
                cluster_id=cluster.cluster_id,
                path_shape=shape,
                target_mode=mode,
                difficulty=difficulty,
            )
        )
    return cells
