"""Interaction topology: one quotient graph per task (docs/methods.md §1.2 and §8, TopoCurate).

All valid rollouts of one task are walked step by step. After every action the rollout is in a
*state* (``state_key``, §1.2); a failing call leads to an *error node* (``err_key``) instead, and
the last action leads to a terminal ``success`` or ``fail`` node (from the verdict). Equal keys
are one node, so rollouts that mean the same thing share a path. From that graph come the task
metrics (EBR, strategy entropy, pass rate, ``rl_score``) and the trajectory metrics (signature,
reflective recovery, semantic efficiency, redundancy).

Decisions (docs/methods.md leaves them open; change them here and there together):

- ``env_state_hash``: trajectories record no per-step environment hash, so the environment
  state after step t is stood for by the hash of the canonical calls (``canon_call``) of the
  write calls that succeeded (class ok or empty) up to t, in order.
- A call is a write when its tool is in ``write_tools``; without that set, a tool is a read only
  when its name starts with a read verb (``get``, ``list``, ``search`` ...), else a write (the
  conservative default of ``ToolSpec.access``). Pass the cluster's write tools when you have them.
- Actions are the tool calls in order, one ``ask_user`` per assistant turn that has text and no
  call (text is not hashed: what it changed shows in the revealed slots), and one terminal
  action: ``final_answer`` when the last assistant turn is text, else ``end:<termination>``.
- ``revealed_slots`` need the blueprint's ``hidden_info``: a slot is revealed once a user message
  contains its value (casefolded), as the rollout loop decides. Without it the set stays empty.
- ``len(τ)`` counts every edge τ traverses (self-loops included: a repeated read that learns
  nothing is redundancy); ``L*`` is measured on signatures as written. When no success of the
  task is error-free, ``L*`` falls back to the fewest charged edges (``len - e``) of a success.
- ``e(τ)``: in a successful τ every failing call was recovered from, so ``e`` counts them all;
  ``eff``/``redundancy`` are ``None`` for rollouts that did not succeed.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import networkx as nx
import numpy as np

from trajsynth.curation.canon import call_key, obs_digest, parse_json_maybe, sha1_hex
from trajsynth.curation.entropy import entropy, normalized_entropy
from trajsynth.schemas import (
    FailureClass,
    InputError,
    JsonValue,
    MessageRole,
    ObsClass,
    TaskTopology,
    ToolCallRecord,
    Trajectory,
    TrajectoryTopology,
    Verdict,
    canonical_json,
)

__all__ = [
    "FAIL",
    "READ_PREFIXES",
    "SUCCESS",
    "Step",
    "Turn",
    "build_quotient_graph",
    "env_state_hash",
    "err_key",
    "error_branch_ratio",
    "is_write_tool",
    "signature",
    "state_key",
    "task_metrics",
    "trajectory_metrics",
    "trajectory_steps",
    "turns",
]

log = logging.getLogger(__name__)

SUCCESS = "success"
FAIL = "fail"
EPS = 1e-8
_EXCLUDED = (FailureClass.INFRA, FailureClass.SIMULATOR)

# First name tokens that make a tool a read when no write set is given (a short list on
# purpose: a wrong "read" would merge states that differ, a wrong "write" only splits them).
READ_PREFIXES: frozenset[str] = frozenset(
    {
        "get", "list", "search", "find", "read", "fetch", "lookup", "query", "show", "describe",
        "view", "check", "count", "browse", "inspect", "retrieve", "calculate", "compute",
        "estimate", "quote", "preview", "validate", "compare", "status",
    }
)  # fmt: skip
_TOKEN_SPLIT = re.compile(r"[^a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

SoftMerge = Literal["off", "difflib", "embedding"]
Embedder = Callable[[Sequence[str]], np.ndarray]


# --- §1.2 state keys ------------------------------------------------------------------------


def env_state_hash(write_calls: Sequence[tuple[str, str]]) -> str:
    """Stand-in for the environment hash: sha1 of the successful write calls so far, in order.

    Trajectories record no per-step state hash, so the state after step t is named by the
    canonical calls (``canon_call``) of the writes that changed it (docs/methods.md §1.2).

    >>> env_state_hash([]) == env_state_hash(())
    True
    """
    return sha1_hex(canonical_json([list(c) for c in write_calls]))


def state_key(env_hash: str, info_set: Iterable[str], revealed_slots: Iterable[str]) -> str:
    """``sha1(env_state_hash || sorted(info_set) || sorted(revealed_slots))`` (methods.md §1.2).

    ``info_set`` holds one ``"tool#args_hash#obs_digest"`` per read call with class ok/empty.
    Sets, not sequences: two orders of the same independent reads give one key.

    >>> state_key("e", {"a#1#x", "b#2#y"}, []) == state_key("e", ["b#2#y", "a#1#x"], ())
    True
    """
    return sha1_hex(canonical_json([env_hash, sorted(set(info_set)), sorted(set(revealed_slots))]))


def err_key(skey: str, call: tuple[str, str], error_type: str | None) -> str:
    """``sha1(state_key || canon_call || "error" || error_type)`` (docs/methods.md §1.2).

    >>> err_key("s", ("get", "h"), "x") != err_key("s", ("get", "h"), "y")
    True
    """
    return sha1_hex(canonical_json([skey, list(call), "error", error_type or ""]))


def is_write_tool(name: str, write_tools: Collection[str] | None = None) -> bool:
    """Whether a call of tool ``name`` may change the environment (see the module notes).

    >>> is_write_tool("get_order"), is_write_tool("cancel_order"), is_write_tool("searchItems")
    (False, True, False)
    >>> is_write_tool("get_order", write_tools={"get_order"})
    True
    """
    if write_tools is not None:
        return name in write_tools
    tokens = [t for t in _TOKEN_SPLIT.split(_CAMEL.sub("_", name).lower()) if t]
    return not (tokens and tokens[0] in READ_PREFIXES)


# --- reading a trajectory as turns and steps ------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One assistant turn: its calls (in order), its text, and the user replies after it."""

    index: int
    calls: tuple[ToolCallRecord, ...]
    text: str
    user_replies: tuple[str, ...]


def _synthetic_record(call_id: str, tool: str, raw: str, content: str, turn: int) -> ToolCallRecord:
    parsed = parse_json_maybe(raw)
    error = content.lstrip().lower().startswith("error")
    empty = content.strip() in ("", "null", "[]", "{}")
    return ToolCallRecord(
        call_id=call_id,
        tool=tool,
        raw_arguments=raw,
        arguments=parsed if isinstance(parsed, dict) else None,
        observation=content,
        obs_class=ObsClass.ERROR if error else (ObsClass.EMPTY if empty else ObsClass.OK),
        turn=turn,
    )


def turns(trajectory: Trajectory) -> list[Turn]:
    """The assistant turns of a trajectory, in order (one pass over messages and calls).

    Calls are matched to the assistant message that made them by ``call_id``; a recorded call
    no message names goes to the turn its ``turn`` field says; a tool call in a message with no
    record is rebuilt from its tool message (an observation starting with "Error" is an error).
    """
    records = {c.call_id: c for c in trajectory.calls}
    tool_text = {
        m.tool_call_id: m.content or ""
        for m in trajectory.messages
        if m.role is MessageRole.TOOL and m.tool_call_id
    }
    out: list[dict[str, Any]] = []
    used: set[str] = set()
    for message in trajectory.messages:
        if message.role is MessageRole.ASSISTANT:
            calls: list[ToolCallRecord] = []
            for tc in message.tool_calls or []:
                record = records.get(tc.id)
                if record is None or tc.id in used:
                    record = _synthetic_record(
                        tc.id, tc.function.name, tc.function.arguments, tool_text.get(tc.id, ""),
                        len(out),
                    )  # fmt: skip
                used.add(tc.id)
                calls.append(record)
            out.append({"calls": calls, "text": message.content or "", "replies": []})
        elif message.role is MessageRole.USER and out:
            out[-1]["replies"].append(message.content or "")
    for record in trajectory.calls:  # recorded calls that no message names
        if record.call_id in used:
            continue
        while len(out) <= record.turn:
            out.append({"calls": [], "text": "", "replies": []})
        out[record.turn]["calls"].append(record)
    return [Turn(i, tuple(t["calls"]), t["text"], tuple(t["replies"])) for i, t in enumerate(out)]


def _schemas(tools: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for entry in tools:
        fn = entry.get("function") if isinstance(entry.get("function"), Mapping) else entry
        name = fn.get("name") if isinstance(fn, Mapping) else None
        params = fn.get("parameters") or fn.get("input_schema") if isinstance(fn, Mapping) else None
        if isinstance(name, str) and isinstance(params, Mapping):
            out[name] = params
    return out


def _revealed(texts: Iterable[str], hidden: Mapping[str, JsonValue], into: set[str]) -> None:
    for text in texts:
        low = text.casefold()
        for slot, value in hidden.items():
            if slot not in into and str(value).casefold() in low:
                into.add(slot)


@dataclass(frozen=True)
class Step:
    """One action and where it led: ``node`` is the state key, or the error key on an error."""

    turn: int
    action: str  # "tool#args_hash", "ask_user"
    state: str  # state_key after the action (unchanged by an error)
    node: str  # the graph node the action led to
    error: bool = False
    tool: str | None = None
    error_type: str | None = None


def _call_action(
    call: ToolCallRecord,
    schemas: Mapping[str, Mapping[str, Any]],
    cache: dict[tuple[str, str], tuple[str, str]] | None = None,
) -> tuple[str, str]:
    key = (call.tool, call.raw_arguments)
    if cache is not None and key in cache:
        return cache[key]
    action = call_key(call, schemas.get(call.tool))
    if cache is not None:
        cache[key] = action
    return action


def trajectory_steps(
    trajectory: Trajectory,
    *,
    write_tools: Collection[str] | None = None,
    hidden_info: Mapping[str, JsonValue] | None = None,
    volatile: frozenset[str] = frozenset(),
    digest_map: Mapping[str, str] | None = None,
    action_cache: dict[tuple[str, str], tuple[str, str]] | None = None,
) -> tuple[str, list[Step]]:
    """The start state key and one ``Step`` per action of a trajectory (docs/methods.md §1.2).

    ``digest_map`` (from a soft merge) replaces an observation digest by its cluster's. The
    terminal action is not a step; ``build_quotient_graph`` adds it. Shared by topology (§8),
    the stagnation signal (§7) and step grouping (§10). ``action_cache`` memoizes
    ``canon_call`` by (tool, raw arguments); share one only between trajectories with the same
    tool schemas (one task).
    """
    schemas = _schemas(trajectory.tools)
    hidden = hidden_info or {}
    writes: list[tuple[str, str]] = []
    info: set[str] = set()
    revealed: set[str] = set()
    opening = []
    for message in trajectory.messages:
        if message.role is MessageRole.ASSISTANT:
            break
        if message.role is MessageRole.USER:
            opening.append(message.content or "")
    _revealed(opening, hidden, revealed)
    env = env_state_hash(writes)
    current = state_key(env, info, revealed)
    start = current
    steps: list[Step] = []
    all_turns = turns(trajectory)
    last = len(all_turns) - 1
    for turn in all_turns:
        for call in turn.calls:
            action = _call_action(call, schemas, action_cache)
            label = f"{action[0]}#{action[1]}"
            if call.obs_class is ObsClass.ERROR:
                steps.append(
                    Step(turn.index, label, current, err_key(current, action, call.error_type),
                         error=True, tool=call.tool, error_type=call.error_type)
                )  # fmt: skip
                continue
            if is_write_tool(call.tool, write_tools):
                writes.append(action)
                env = env_state_hash(writes)
            else:
                digest = obs_digest(call.observation, volatile)
                if digest_map:
                    digest = digest_map.get(digest, digest)
                info.add(f"{label}#{digest}")
            current = state_key(env, info, revealed)
            steps.append(Step(turn.index, label, current, current, tool=call.tool))
        if not turn.calls and turn.index != last:
            _revealed(turn.user_replies, hidden, revealed)
            current = state_key(env, info, revealed)
            steps.append(Step(turn.index, "ask_user", current, current))
        elif turn.calls:
            _revealed(turn.user_replies, hidden, revealed)
            current = state_key(env, info, revealed)
    return start, steps


# --- the quotient graph ---------------------------------------------------------------------


def _skip_reason(trajectory: Trajectory, verdict: Verdict | None) -> str | None:
    if trajectory.failure_class in _EXCLUDED:
        return f"{trajectory.failure_class} failure: not counted against the policy"
    if verdict is None:
        return "no verdict"
    if verdict.excluded:
        return "verdict excluded (infra or simulator)"
    return None


def _soft_digest_map(
    trajectories: Sequence[Trajectory],
    *,
    write_tools: Collection[str] | None,
    volatile: frozenset[str],
    mode: SoftMerge,
    threshold: float,
    embedder: Embedder | None,
) -> dict[str, str]:
    """Digest -> leader digest for ok observations of one call that are near-equal (§1.2)."""
    groups: dict[str, dict[str, str]] = {}  # action -> digest -> text
    for trajectory in trajectories:
        schemas = _schemas(trajectory.tools)
        for call in trajectory.calls:
            if call.obs_class is not ObsClass.OK or is_write_tool(call.tool, write_tools):
                continue
            action = "#".join(_call_action(call, schemas))
            text = canonical_json(parse_json_maybe(call.observation))
            groups.setdefault(action, {}).setdefault(obs_digest(call.observation, volatile), text)
    mapping: dict[str, str] = {}
    for action in sorted(groups):
        items = sorted(groups[action].items())
        if len(items) < 2:
            continue
        vectors = None
        if mode == "embedding":
            if embedder is None:
                raise InputError("soft_merge='embedding' needs an embedder")
            vectors = np.asarray(embedder([t for _, t in items]), dtype=np.float64)
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.maximum(norms, EPS)
        leaders: list[int] = []
        for i, (digest, text) in enumerate(items):
            for j in leaders:
                if vectors is not None:
                    similar = float(vectors[i] @ vectors[j]) >= threshold
                else:
                    m = difflib.SequenceMatcher(None, text, items[j][1], autojunk=False)
                    similar = (
                        m.real_quick_ratio() >= threshold
                        and m.quick_ratio() >= threshold
                        and m.ratio() >= threshold
                    )
                if similar:
                    mapping[digest] = items[j][0]
                    break
            else:
                leaders.append(i)
    return mapping


def signature(nodes: Sequence[str]) -> tuple[str, ...]:
    """A node sequence with consecutive repeats removed (docs/methods.md §8).

    >>> signature(["A", "A", "E", "E", "B", "C"])
    ('A', 'E', 'B', 'C')
    """
    out: list[str] = []
    for node in nodes:
        if not out or out[-1] != node:
            out.append(node)
    return tuple(out)


def _sig_id(sig: Sequence[str]) -> str:
    return sha1_hex("\n".join(sig))[:16]


def build_quotient_graph(
    trajectories: Sequence[Trajectory],
    verdicts: Mapping[str, Verdict],
    *,
    task_id: str | None = None,
    write_tools: Collection[str] | None = None,
    hidden_info: Mapping[str, JsonValue] | None = None,
    volatile: frozenset[str] = frozenset(),
    soft_merge: SoftMerge = "off",
    similarity_threshold: float = 0.95,
    embedder: Embedder | None = None,
    steps: Mapping[str, tuple[str, list[Step]]] | None = None,
) -> nx.MultiDiGraph:
    """The quotient graph of all rollouts of one task (docs/methods.md §8, "Graph").

    Nodes are state keys, error keys and the terminals ``success``/``fail`` (``kind`` attribute:
    start, state, error, success, fail). Edges are keyed by action (``"tool#args_hash"``,
    ``"ask_user"``, ``"final_answer"``, ``"end:<termination>"``) and carry the ids of the
    rollouts that traversed them (``rollouts``), a traversal count, ``error`` (into an error
    node, or into a node from which ``success`` is unreachable) and ``on_success`` (traversed
    by a successful rollout). Infra and simulator rollouts, and rollouts without a verdict, are
    left out; ``graph.graph["skipped"]`` says why. ``graph.graph["walks"]`` keeps each valid
    rollout's node and edge sequence for the metrics.

    ``verdicts`` is keyed by trajectory id. ``soft_merge`` optionally merges near-equal ok
    observations of one call: ``difflib`` ratio or embedding cosine >= ``similarity_threshold``
    (§1.2). ``steps`` holds :func:`trajectory_steps` per trajectory id when the caller computed
    them already with the same ``write_tools``, ``hidden_info`` and ``volatile``; a soft merge
    recomputes them. Raises ``InputError`` if the trajectories belong to more than one task.
    """
    task_ids = {t.blueprint_id for t in trajectories}
    if task_id is not None:
        task_ids.add(task_id)
    if len(task_ids) > 1:
        raise InputError(f"one task per quotient graph; got {sorted(task_ids)}")
    tid = next(iter(task_ids)) if task_ids else ""
    graph = nx.MultiDiGraph(task_id=tid, walks={}, skipped={})
    valid: list[tuple[Trajectory, bool]] = []
    for trajectory in sorted(trajectories, key=lambda t: t.trajectory_id):
        verdict = verdicts.get(trajectory.trajectory_id)
        reason = _skip_reason(trajectory, verdict)
        if reason is not None or verdict is None:
            graph.graph["skipped"][trajectory.trajectory_id] = reason or "no verdict"
            continue
        valid.append((trajectory, verdict.passed))
    digest_map: dict[str, str] = {}
    if soft_merge != "off" and valid:
        digest_map = _soft_digest_map(
            [t for t, _ in valid],
            write_tools=write_tools,
            volatile=volatile,
            mode=soft_merge,
            threshold=similarity_threshold,
            embedder=embedder,
        )
    cache: dict[tuple[str, str], tuple[str, str]] = {}
    for trajectory, passed in valid:
        known = None if digest_map or steps is None else steps.get(trajectory.trajectory_id)
        if known is None:
            known = trajectory_steps(
                trajectory,
                write_tools=write_tools,
                hidden_info=hidden_info,
                volatile=volatile,
                digest_map=digest_map,
                action_cache=cache,
            )
        _add_walk(graph, trajectory, passed, known)
    _mark_error_edges(graph)
    return graph


def _add_node(graph: nx.MultiDiGraph, node: str, kind: str, step: int, rollout: str, **attrs):
    if node not in graph:
        graph.add_node(node, kind=kind, step=step, rollouts=[rollout], **attrs)
        return
    data = graph.nodes[node]
    data["step"] = min(data["step"], step)
    if data["rollouts"][-1] != rollout:
        data["rollouts"].append(rollout)


def _add_walk(
    graph: nx.MultiDiGraph,
    trajectory: Trajectory,
    passed: bool,
    walk: tuple[str, list[Step]],
) -> None:
    rid = trajectory.trajectory_id
    start, steps = walk
    nodes = [start]
    edges: list[tuple[str, str, str]] = []
    _add_node(graph, start, "start", 0, rid)
    prev = start
    for i, step in enumerate(steps, start=1):
        if step.error:
            _add_node(graph, step.node, "error", i, rid, tool=step.tool, error_type=step.error_type)
        else:
            _add_node(graph, step.node, "state", i, rid)
        edges.append((prev, step.action, step.node))
        nodes.append(step.node)
        prev = step.node
    all_turns = turns(trajectory)
    final_text = bool(all_turns) and not all_turns[-1].calls and bool(all_turns[-1].text.strip())
    action = "final_answer" if final_text else f"end:{trajectory.termination}"
    terminal = SUCCESS if passed else FAIL
    _add_node(graph, terminal, terminal, len(steps) + 1, rid)
    edges.append((prev, action, terminal))
    nodes.append(terminal)
    for u, key, v in edges:
        if graph.has_edge(u, v, key):
            data = graph.edges[u, v, key]
            data["count"] += 1
            if data["rollouts"][-1] != rid:
                data["rollouts"].append(rid)
        else:
            graph.add_edge(u, v, key=key, rollouts=[rid], count=1, on_success=False, error=False)
        if passed:
            graph.edges[u, v, key]["on_success"] = True
    if graph.nodes[start]["kind"] != "start":  # a later state equal to another rollout's start
        graph.nodes[start]["kind"] = "start"
    graph.graph["walks"][rid] = {
        "success": passed,
        "nodes": nodes,
        "edges": [list(e) for e in edges],
        "n_errors": sum(s.error for s in steps),
    }


def _mark_error_edges(graph: nx.MultiDiGraph) -> None:
    good = nx.ancestors(graph, SUCCESS) | {SUCCESS} if SUCCESS in graph else set()
    for _, v, data in graph.edges(data=True):
        data["error"] = graph.nodes[v]["kind"] == "error" or v not in good


def error_branch_ratio(graph: nx.MultiDiGraph) -> tuple[float, int, int, int]:
    """``EBR`` = error edges leaving branch points / edges leaving branch points (§8).

    A branch point is a node with >= 2 distinct outgoing edges (distinct action or target).
    Returns ``(ebr, n_branch_points, n_branch_edges, n_error_branch_edges)``; EBR is 0 with no
    branch point.
    """
    n_points = n_edges = n_error = 0
    for node in graph.nodes:
        out = list(graph.out_edges(node, keys=True, data="error"))
        if len(out) < 2:
            continue
        n_points += 1
        n_edges += len(out)
        n_error += sum(1 for *_, err in out if err)
    return (n_error / n_edges if n_edges else 0.0), n_points, n_edges, n_error


def _error_free(sig: Sequence[str], graph: nx.MultiDiGraph) -> tuple[str, ...]:
    return signature([n for n in sig if graph.nodes[n]["kind"] != "error"])


def _l_star(graph: nx.MultiDiGraph) -> int | None:
    walks = graph.graph["walks"].values()
    clean = [len(signature(w["nodes"])) - 1 for w in walks if w["success"] and w["n_errors"] == 0]
    if clean:
        return min(clean)
    charged = [len(w["edges"]) - w["n_errors"] for w in walks if w["success"]]
    return min(charged) if charged else None


def task_metrics(graph: nx.MultiDiGraph) -> TaskTopology:
    """Task-level metrics of a quotient graph (docs/methods.md §8, "Task-level metrics").

    ``p`` is the pass rate over valid rollouts, ``H_strat_norm = H(signatures) / ln(n)`` (0 for
    one rollout), ``n_success_strategies`` the distinct success signatures with error nodes
    removed and
    ``rl_score = 4·p·(1-p)·(EBR + H_strat_norm)/2``. A task with no valid rollout has ``p=None``
    and ``rl_score=0``.
    """
    walks: dict[str, dict[str, Any]] = graph.graph.get("walks", {})
    task_id = str(graph.graph.get("task_id", ""))
    n_excluded = len(graph.graph.get("skipped", {}))
    n = len(walks)
    if n == 0:
        return TaskTopology(task_id=task_id, n_excluded=n_excluded)
    n_success = sum(1 for w in walks.values() if w["success"])
    p = n_success / n
    ebr, n_points, n_branch, n_error = error_branch_ratio(graph)
    sigs = Counter(signature(w["nodes"]) for w in walks.values())
    h = entropy(sigs)
    h_norm = normalized_entropy(sigs, n)
    succ = {_error_free(signature(w["nodes"]), graph) for w in walks.values() if w["success"]}
    rl_score = 4.0 * p * (1.0 - p) * (ebr + h_norm) / 2.0
    return TaskTopology(
        task_id=task_id,
        n_rollouts=n,
        n_excluded=n_excluded,
        n_success=n_success,
        pass_rate=p,
        n_nodes=graph.number_of_nodes(),
        n_edges=graph.number_of_edges(),
        n_branch_points=n_points,
        n_branch_edges=n_branch,
        n_error_branch_edges=n_error,
        error_branch_ratio=ebr,
        strategy_entropy=h,
        strategy_entropy_norm=h_norm,
        n_signatures=len(sigs),
        n_success_strategies=len(succ),
        shortest_success_len=_l_star(graph),
        rl_score=max(0.0, rl_score),
    )


def trajectory_metrics(graph: nx.MultiDiGraph) -> list[TrajectoryTopology]:
    """Trajectory-level metrics (docs/methods.md §8): signature, rec, eff, redundancy.

    ``rec = 1`` if τ passes an error node and later reaches ``success``;
    ``eff = L* / max(L*, len(τ) - e(τ))`` for successes (``None`` otherwise);
    ``redundancy = 1 - eff``. Left-out rollouts come back with ``included=False`` and their
    reason. Sorted by trajectory id.
    """
    task_id = str(graph.graph.get("task_id", ""))
    l_star = _l_star(graph)
    out: list[TrajectoryTopology] = []
    for rid, w in graph.graph.get("walks", {}).items():
        sig = signature(w["nodes"])
        success = bool(w["success"])
        n_errors = int(w["n_errors"])
        recovered = n_errors if success else 0
        eff: float | None = None
        if success and l_star is not None:
            eff = l_star / max(l_star, len(w["edges"]) - recovered)
        out.append(
            TrajectoryTopology(
                trajectory_id=rid,
                task_id=task_id,
                success=success,
                signature=_sig_id(sig),
                signature_len=len(sig),
                path_len=len(w["edges"]),
                n_errors=n_errors,
                n_recovered=recovered,
                recovered=success and n_errors > 0,
                efficiency=eff,
                redundancy=None if eff is None else 1.0 - eff,
            )
        )
    for rid, reason in graph.graph.get("skipped", {}).items():
        out.append(
            TrajectoryTopology(
                trajectory_id=rid, task_id=task_id, included=False, skip_reason=reason
            )
        )
    return sorted(out, key=lambda t: t.trajectory_id)
