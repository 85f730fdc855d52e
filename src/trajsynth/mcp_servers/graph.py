"""Tool dependency graphs: which output field of one tool can feed a parameter of another.

Implements docs/methods.md §2 (edge inference, declared edges, Louvain splitting). The graph of a
cluster is a ``networkx.DiGraph`` over tool names; an edge u -> v carries ``out_field``,
``in_param``, ``score``, ``origin`` (declared / inferred) and ``verified``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

from trajsynth.mcp_servers.tags import READ_VERBS, WRITE_VERBS, name_tokens
from trajsynth.schemas import (
    EdgeOrigin,
    InputError,
    ToolAccess,
    ToolCluster,
    ToolEdge,
    ToolSpec,
)

__all__ = [
    "EDGE_THRESHOLD",
    "MAX_CLUSTER_TOOLS",
    "Embedder",
    "FieldRef",
    "ParamRef",
    "communities",
    "declared_edges",
    "dependency_graph",
    "draw_graph",
    "entry_tools",
    "infer_edges",
    "input_params",
    "name_sim",
    "normalize_name",
    "output_fields",
    "pair_score",
    "singular",
    "split_cluster",
    "type_ok",
]

log = logging.getLogger(__name__)

Embedder = Callable[[list[str]], np.ndarray]
"""Maps texts to one embedding row each (e.g. all-MiniLM-L6-v2's ``encode``)."""

EDGE_THRESHOLD = 0.75
MAX_CLUSTER_TOOLS = 40
NAME_WEIGHT = 0.6
DESC_WEIGHT = 0.4

_ID_LEAVES = frozenset({"id", "uuid", "identifier"})
# Containers that say nothing about what they hold (MCPServer wraps non-object returns in
# {"result": ...}); an id inside them is named after the tool's noun instead.
_GENERIC_CONTAINERS = frozenset(
    {"result", "results", "items", "item", "data", "records", "record", "rows", "row",
     "entries", "entry", "response", "output", "outputs", "value", "values", "list"}
)  # fmt: skip
_STOP_TOKENS = frozenset({"by", "for", "to", "from", "of", "all", "my", "a", "an", "the", "in"})


@dataclass(frozen=True)
class FieldRef:
    """One field of a tool's output: ``path`` as in the schema, ``name`` canonicalized."""

    path: str
    name: str
    json_type: str | None
    many: bool
    description: str = ""


@dataclass(frozen=True)
class ParamRef:
    """One top-level input parameter of a tool (``json_type`` is the item type of arrays)."""

    name: str
    json_type: str | None
    many: bool
    required: bool
    description: str = ""


# --------------------------------------------------------------------------- names


def singular(word: str) -> str:
    """Singular of an English plural, by suffix (docs/methods.md §2 step 1).

    ``ies -> y``, ``(s|x|z|ch|sh)es -> strip es``, ``s -> strip s`` (but not ``ss``). The
    sibilant condition on ``es`` is a trajsynth refinement of §2's plain "strip es", which
    would turn ``files`` into ``fil`` and ``messages`` into ``messag``.

    >>> [singular(w) for w in ["flights", "categories", "addresses", "files", "status"]]
    ['flight', 'category', 'address', 'file', 'status']
    """
    w = word
    if len(w) > 3 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 3 and w.endswith("es") and w[:-2].endswith(("s", "x", "z", "ch", "sh")):
        return w[:-2]
    if len(w) > 2 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


def normalize_name(name: str) -> str:
    """snake_case with camelCase folded: ``flightId`` and ``flight_id`` both give ``flight_id``.

    >>> normalize_name("flightId"), normalize_name("Flight-ID")
    ('flight_id', 'flight_id')
    """
    return "_".join(name_tokens(name))


def name_sim(a: str, b: str) -> float:
    """1.0 for equal normalized names, else the Jaccard index of their token sets (§2 step 2).

    >>> name_sim("flightId", "flight_id"), name_sim("flight_id", "return_flight_id")
    (1.0, 0.6666666666666666)
    """
    if normalize_name(a) == normalize_name(b):
        return 1.0
    ta, tb = set(name_tokens(a)), set(name_tokens(b))
    if not ta or not tb:
        return 0.0
    return len(ta & tb) / len(ta | tb)


def _singular_name(name: str) -> str:
    tokens = normalize_name(name).split("_")
    return "_".join([*tokens[:-1], singular(tokens[-1])]) if tokens and tokens[-1] else ""


def _tool_noun(tool_name: str) -> str | None:
    tokens = name_tokens(tool_name)
    if tokens and (tokens[0] in READ_VERBS or tokens[0] in WRITE_VERBS):
        tokens = tokens[1:]  # the verb ("get_order": the noun is "order", not the verb)
    nouns = [t for t in tokens if t not in _STOP_TOKENS]
    return singular(nouns[-1]) if nouns else None


# --------------------------------------------------------------------------- schemas


def _resolve(node: Any, root: Mapping[str, Any], depth: int = 0) -> dict[str, Any]:
    """Follow local ``$ref`` (``#/$defs/X``, ``#/definitions/X``) within the root schema."""
    while isinstance(node, Mapping) and "$ref" in node and depth < 20:
        ref = node["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return {}
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        node = target
        depth += 1
    return dict(node) if isinstance(node, Mapping) else {}


def _types(node: Mapping[str, Any], root: Mapping[str, Any]) -> list[str]:
    """The JSON types a schema node allows, ``null`` left out (anyOf/oneOf unions merged)."""
    raw = node.get("type")
    found: list[str] = []
    if isinstance(raw, str):
        found.append(raw)
    elif isinstance(raw, list):
        found.extend(t for t in raw if isinstance(t, str))
    for key in ("anyOf", "oneOf", "allOf"):
        for alt in node.get(key) or []:
            found.extend(_types(_resolve(alt, root), root))
    if not found and "properties" in node:
        found.append("object")
    if not found and "items" in node:
        found.append("array")
    return [t for t in dict.fromkeys(found) if t != "null"]


def _array_items(node: Mapping[str, Any], root: Mapping[str, Any]) -> dict[str, Any]:
    if "items" in node:
        return _resolve(node["items"], root)
    for key in ("anyOf", "oneOf"):
        for alt in node.get(key) or []:
            alt_node = _resolve(alt, root)
            if "array" in _types(alt_node, root):
                return _array_items(alt_node, root)
    return {}


def _properties(node: Mapping[str, Any], root: Mapping[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = dict(node.get("properties") or {})
    for key in ("anyOf", "oneOf", "allOf"):
        for alt in node.get(key) or []:
            props.update(_resolve(alt, root).get("properties") or {})
    return props


def _scalar(types: list[str]) -> str | None:
    """One representative type for compatibility checks (None: unknown, matches anything)."""
    if not types:
        return None
    for preferred in ("string", "integer", "number", "boolean", "object"):
        if preferred in types:
            return preferred
    return types[0]


def output_fields(tool_name: str, schema: Mapping[str, Any] | None) -> list[FieldRef]:
    """Flatten an output schema to field paths with canonical names (§2 step 1).

    An ``id``-like leaf inside a container named X becomes ``singular(X)_id``; inside no
    container, or a generic one (``result``, ``items``...), it is named after the tool's last
    noun (``search_flights`` -> ``flight_id``). A plural array-of-scalars leaf is singularized
    (``order_ids[]`` -> ``order_id``).

    >>> schema = {"type": "object", "properties": {"flights": {"type": "array",
    ...     "items": {"type": "object", "properties": {"id": {"type": "string"}}}}}}
    >>> [(f.path, f.name, f.json_type, f.many) for f in output_fields("search_flights", schema)]
    [('flights[]', 'flights', 'object', True), ('flights[].id', 'flight_id', 'string', True)]
    """
    if not schema:
        return []
    root = schema
    out: list[FieldRef] = []

    def walk(
        node_in: Any, path: str, key: str | None, container: str | None, many: bool, depth: int
    ) -> None:
        if depth > 8:
            return
        node = _resolve(node_in, root)
        types = _types(node, root)
        desc = str(node.get("description") or "")
        if "array" in types and not {"object", "string", "integer", "number"} & set(types):
            items = _array_items(node, root)
            item_types = _types(items, root)
            if "object" in item_types or _properties(items, root):
                walk(items, path + "[]", key, key, True, depth + 1)
                return
            leaf = key or "result"
            name = normalize_name(leaf)
            tokens = name.split("_")
            if tokens and tokens[-1] != singular(tokens[-1]):
                name = "_".join([*tokens[:-1], singular(tokens[-1])])
            out.append(FieldRef(path + "[]", name, _scalar(item_types), True, desc))
            return
        props = _properties(node, root)
        if props:
            if key is not None:
                out.append(FieldRef(path, normalize_name(key), "object", many, desc))
            for child_key, child in props.items():
                child_path = f"{path}.{child_key}" if path else child_key
                walk(child, child_path, child_key, key, many, depth + 1)
            return
        if key is None:  # a bare scalar output with no name
            return
        name = normalize_name(key)
        if name in _ID_LEAVES:
            holder = container
            if holder is None or normalize_name(holder) in _GENERIC_CONTAINERS:
                holder = _tool_noun(tool_name)
            if holder is not None:
                name = f"{singular(normalize_name(holder))}_id"
        out.append(FieldRef(path, name, _scalar(types), many, desc))

    walk(root, "", None, None, False, 0)
    return out


def input_params(schema: Mapping[str, Any] | None) -> list[ParamRef]:
    """The top-level parameters of an input schema, required ones first."""
    if not schema:
        return []
    root = schema
    node = _resolve(schema, root)
    required = {str(r) for r in node.get("required") or []}
    params: list[ParamRef] = []
    for name, sub_in in _properties(node, root).items():
        sub = _resolve(sub_in, root)
        types = _types(sub, root)
        many = "array" in types and not {"string", "integer", "number", "object"} & set(types)
        json_type = _scalar(_types(_array_items(sub, root), root)) if many else _scalar(types)
        params.append(
            ParamRef(name, json_type, many, name in required, str(sub.get("description") or ""))
        )
    params.sort(key=lambda p: not p.required)
    return params


def type_ok(field: FieldRef, param: ParamRef) -> bool:
    """Whether a field's JSON type can feed a parameter (§2 step 2).

    Array-of-T output may feed T (and T may feed an array-of-T parameter); an integer may feed
    a number; an unknown type on either side is compatible.
    """
    ft, pt = field.json_type, param.json_type
    if ft is None or pt is None:
        return True
    return ft == pt or (ft == "integer" and pt == "number")


def pair_score(name: float, desc: float | None, types_match: bool) -> float:
    """``type_ok · (0.6·name_sim + 0.4·desc_sim)``, or ``type_ok · name_sim`` without embeddings.

    >>> round(pair_score(1.0, 0.62, True), 3), pair_score(1.0, None, True)
    (0.848, 1.0)
    """
    if not types_match:
        return 0.0
    if desc is None:
        return name
    return NAME_WEIGHT * name + DESC_WEIGHT * desc


# --------------------------------------------------------------------------- edges


def _cosines(embed: Embedder, texts: list[str]) -> dict[str, np.ndarray]:
    unique = sorted({t for t in texts if t})
    if not unique:
        return {}
    matrix = np.asarray(embed(unique), dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix = matrix / np.maximum(norms, 1e-8)
    return {text: matrix[i] for i, text in enumerate(unique)}


def declared_edges(
    declared: Iterable[ToolEdge | Mapping[str, Any] | Sequence[str]], tool_names: Iterable[str]
) -> list[ToolEdge]:
    """Declared edges as ``ToolEdge`` with score 1 (§2 step 3).

    Accepts ``ToolEdge``, dicts (``source``/``target`` or ``u``/``v`` or ``from``/``to``, with
    optional ``out_field``/``in_param``) and tuples ``(u, v[, out_field, in_param])``.
    """
    names = set(tool_names)
    edges: list[ToolEdge] = []
    for item in declared:
        if isinstance(item, ToolEdge):
            u, v, out_field, in_param = item.source, item.target, item.out_field, item.in_param
        elif isinstance(item, Mapping):
            u = item.get("source", item.get("u", item.get("from")))
            v = item.get("target", item.get("v", item.get("to")))
            out_field = item.get("out_field", "")
            in_param = item.get("in_param", "")
        else:
            parts = list(item)
            if len(parts) not in (2, 4):
                raise InputError(f"declared edge {item!r}: expected (u, v) or (u, v, out, in)")
            u, v = parts[0], parts[1]
            out_field, in_param = (parts[2], parts[3]) if len(parts) == 4 else ("", "")
        for tool in (u, v):
            if tool not in names:
                raise InputError(f"declared edge {u!r} -> {v!r}: no tool named {tool!r}")
        edges.append(
            ToolEdge(
                source=str(u),
                target=str(v),
                out_field=str(out_field or ""),
                in_param=str(in_param or ""),
                score=1.0,
                origin=EdgeOrigin.DECLARED,
                verified=bool(item.verified) if isinstance(item, ToolEdge) else False,
            )
        )
    return edges


def infer_edges(
    tools: Sequence[ToolSpec],
    declared: Iterable[ToolEdge | Mapping[str, Any] | Sequence[str]] = (),
    *,
    embed: Embedder | None = None,
    threshold: float = EDGE_THRESHOLD,
    skip_echoes: bool = True,
) -> list[ToolEdge]:
    """Data-flow edges between tools (docs/methods.md §2 steps 1-3).

    For every ordered pair (u, v), u != v, every output field f of u and parameter p of v are
    scored ``type_ok · (0.6·name_sim + 0.4·desc_sim)`` (``desc_sim`` the cosine of the two
    descriptions' embeddings, 0 when either is missing), or ``type_ok · name_sim`` when
    ``embed`` is None. The best pair becomes the edge u -> v when its score is at least
    ``threshold``. Declared edges are added with score 1 and replace an inferred edge on the
    same pair. The result is sorted by (source, target).

    ``skip_echoes`` [trajsynth refinement of §2]: an output field that only echoes one of
    u's own parameters (``view_cart(user_id)`` returning ``user_id``) is not a source, since u
    does not produce that value; without this every tool that echoes ``user_id`` would feed
    every tool that takes one.
    """
    fields = {t.name: output_fields(t.name, t.output_schema) for t in tools}
    params = {t.name: input_params(t.input_schema) for t in tools}
    if skip_echoes:
        for t in tools:
            own = {_singular_name(p.name) for p in params[t.name]}
            fields[t.name] = [f for f in fields[t.name] if _singular_name(f.name) not in own]
    vectors: dict[str, np.ndarray] = {}
    if embed is not None:
        texts = [f.description for fs in fields.values() for f in fs]
        texts += [p.description for ps in params.values() for p in ps]
        vectors = _cosines(embed, texts)

    edges: dict[tuple[str, str], ToolEdge] = {}
    for u in tools:
        for v in tools:
            if u.name == v.name or not fields[u.name] or not params[v.name]:
                continue
            best: tuple[float, FieldRef, ParamRef] | None = None
            for p in params[v.name]:
                for f in fields[u.name]:
                    desc: float | None = None
                    if embed is not None:
                        a, b = vectors.get(f.description), vectors.get(p.description)
                        desc = float(a @ b) if a is not None and b is not None else 0.0
                    score = pair_score(name_sim(f.name, p.name), desc, type_ok(f, p))
                    if best is None or score > best[0] + 1e-12:
                        best = (score, f, p)
            if best is not None and best[0] >= threshold:
                score, f, p = best
                edges[(u.name, v.name)] = ToolEdge(
                    source=u.name,
                    target=v.name,
                    out_field=f.path,
                    in_param=p.name,
                    score=round(min(1.0, max(0.0, score)), 6),
                    origin=EdgeOrigin.INFERRED,
                )
    for edge in declared_edges(declared, [t.name for t in tools]):
        edges[(edge.source, edge.target)] = edge
    return [edges[k] for k in sorted(edges)]


# --------------------------------------------------------------------------- graphs


def dependency_graph(cluster: ToolCluster) -> nx.DiGraph:
    """The cluster's tools as nodes (``access``, ``description``, ``required``) and its edges."""
    graph = nx.DiGraph(cluster_id=cluster.cluster_id)
    for tool in cluster.tools:
        graph.add_node(
            tool.name,
            access=str(tool.access),
            description=tool.description,
            required=[p.name for p in input_params(tool.input_schema) if p.required],
        )
    for edge in cluster.edges:
        if edge.source in graph and edge.target in graph:
            graph.add_edge(
                edge.source,
                edge.target,
                out_field=edge.out_field,
                in_param=edge.in_param,
                score=edge.score,
                origin=str(edge.origin),
                verified=edge.verified,
            )
    return graph


def communities(graph: nx.DiGraph, max_size: int = MAX_CLUSTER_TOOLS) -> list[set[str]]:
    """Weakly connected components; one larger than ``max_size`` is split by Louvain (§2 step 5).

    Returned largest first, ties by smallest tool name, so the order is deterministic.
    """
    parts: list[set[str]] = []
    for component in nx.weakly_connected_components(graph):
        if len(component) <= max_size:
            parts.append(set(component))
            continue
        sub = graph.subgraph(component).to_undirected()
        found = nx.community.louvain_communities(sub, weight="score", seed=0)
        parts.extend(set(c) for c in found)
    return sorted(parts, key=lambda c: (-len(c), min(c)))


def split_cluster(cluster: ToolCluster, max_size: int = MAX_CLUSTER_TOOLS) -> list[ToolCluster]:
    """The cluster itself, or one cluster per Louvain community when a component is too large.

    Components that fit (single tools included) stay together in the last part, as
    single-call candidates (§2 step 5). Parts are named ``<cluster_id>.<k>``.
    """
    graph = dependency_graph(cluster)
    components = list(nx.weakly_connected_components(graph))
    if all(len(c) <= max_size for c in components):
        return [cluster]
    parts = [c for c in communities(graph, max_size) if c & _big(components, max_size)]
    rest = set().union(*(c for c in components if len(c) <= max_size))
    if rest:
        parts.append(rest)
    out: list[ToolCluster] = []
    for k, members in enumerate(parts, start=1):
        tools = [t for t in cluster.tools if t.name in members]
        edges = [e for e in cluster.edges if e.source in members and e.target in members]
        out.append(
            cluster.model_copy(
                update={"cluster_id": f"{cluster.cluster_id}.{k}", "tools": tools, "edges": edges}
            )
        )
    return out


def _big(components: list[set[str]], max_size: int) -> set[str]:
    return set().union(*(c for c in components if len(c) > max_size))


def _id_like(name: str) -> bool:
    tokens = name_tokens(name)
    return bool(tokens) and tokens[-1] in {"id", "ids", "uuid", "key", "token", "handle"}


def entry_tools(cluster: ToolCluster) -> list[str]:
    """Tools a task can start with: every required parameter is something a user can say.

    A required parameter is *not* user-providable when it is id-like (``*_id``, ``*_ids``,
    ``*_key``, ``*_token``...) and another tool of the cluster produces it (an edge into the
    tool on that parameter). Ids no tool produces (a user's own account id) count as known.
    """
    produced: dict[str, set[str]] = {}
    for edge in cluster.edges:
        if edge.in_param and edge.source != edge.target:
            produced.setdefault(edge.target, set()).add(edge.in_param)
    entries: list[str] = []
    for tool in cluster.tools:
        required = [p.name for p in input_params(tool.input_schema) if p.required]
        blocked = [p for p in required if _id_like(p) and p in produced.get(tool.name, set())]
        if not blocked:
            entries.append(tool.name)
    return entries


_READ_COLOUR = "#4C9BE8"
_WRITE_COLOUR = "#F28E2B"


def draw_graph(cluster: ToolCluster, path: str | Path) -> Path:
    """Draw the dependency graph as a PNG: read tools blue, write tools orange, edges labelled
    with the parameter they feed (declared edges solid, inferred dashed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    graph = dependency_graph(cluster)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = max(1, graph.number_of_nodes())
    size = min(24.0, 6.0 + 0.6 * n)
    fig = Figure(figsize=(size, size * 0.75), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_axis_off()
    ax.set_title(f"{cluster.cluster_id} ({cluster.domain}): {n} tools, {len(cluster.edges)} edges")
    if n <= 30:
        pos = nx.circular_layout(graph)  # no overlaps; labels stay readable
    else:
        pos = nx.spring_layout(graph, seed=0, k=2.5 / np.sqrt(n))
    colours = [
        _WRITE_COLOUR if graph.nodes[v]["access"] == str(ToolAccess.WRITE) else _READ_COLOUR
        for v in graph
    ]
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_color=colours, node_size=1400, alpha=0.9)
    nx.draw_networkx_labels(graph, pos, ax=ax, font_size=8)
    for origin, style in (
        (str(EdgeOrigin.DECLARED), "solid"),
        (str(EdgeOrigin.INFERRED), "dashed"),
    ):
        edgelist = [(u, v) for u, v, d in graph.edges(data=True) if d["origin"] == origin]
        if edgelist:
            nx.draw_networkx_edges(
                graph, pos, ax=ax, edgelist=edgelist, style=style, arrows=True,
                arrowsize=16, node_size=1400, connectionstyle="arc3,rad=0.08",
            )  # fmt: skip
    labels = {(u, v): d["in_param"] or "·" for u, v, d in graph.edges(data=True)}
    nx.draw_networkx_edge_labels(  # near the target: the label names the target's parameter
        graph, pos, edge_labels=labels, ax=ax, font_size=7, label_pos=0.3
    )
    ax.legend(
        handles=[
            Line2D([], [], marker="o", ls="", color=_READ_COLOUR, markersize=10, label="read"),
            Line2D([], [], marker="o", ls="", color=_WRITE_COLOUR, markersize=10, label="write"),
            Line2D([], [], color="black", ls="solid", label="declared edge"),
            Line2D([], [], color="black", ls="dashed", label="inferred edge"),
        ],
        loc="lower left",
        fontsize=8,
    )
    fig.savefig(out, format="png", bbox_inches="tight")
    log.debug("drew %s to %s", cluster.cluster_id, out)
    return out
